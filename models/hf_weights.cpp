// Tensor names from safetensors headers and index files (hf_weights.h).
#include "models/hf_weights.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace zero::models {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors spec's limit

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what);
}

// Opens `path` for reading when it is a regular file (links followed): a FIFO would wait for
// a writer forever.
std::ifstream open_regular(const fs::path& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) fail(path, "cannot read it: it does not exist");
  if (!fs::is_regular_file(status)) fail(path, "cannot read it: it is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open it: ") + std::strerror(errno));
  return in;
}

std::set<std::string> names_in_file(const fs::path& path) {
  std::ifstream in = open_regular(path);
  unsigned char length[8] = {};
  if (!in.read(reinterpret_cast<char*>(length), 8)) fail(path, "shorter than a safetensors header");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | length[i];
  if (n > kMaxHeaderBytes)
    fail(path, "not a safetensors file (its header length is " + std::to_string(n) + " bytes)");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) {
    fail(path, "its safetensors header is cut short");
  }
  const json header = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) fail(path, "its safetensors header is not a JSON object");
  std::set<std::string> names;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") names.insert(name);
  }
  return names;
}

std::set<std::string> names_in_index(const fs::path& path) {
  std::ifstream in = open_regular(path);
  const json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail(path, "no \"weight_map\" object: not a safetensors index");
  }
  std::set<std::string> names;
  for (const auto& [name, file] : index["weight_map"].items()) names.insert(name);
  return names;
}

}  // namespace

std::set<std::string> pretrained_tensor_names(const std::string& path) {
  fs::path target(path);
  if (fs::is_directory(target)) {
    if (fs::exists(target / "model.safetensors.index.json")) {
      return names_in_index(target / "model.safetensors.index.json");
    }
    return names_in_file(target / "model.safetensors");
  }
  if (target.extension() == ".json") return names_in_index(target);
  return names_in_file(target);
}

}  // namespace zero::models
