// A model's safetensors files as one set of named tensors (see tensor_set.h).
#include "checkpoint/tensor_set.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace zero::checkpoint {
namespace fs = std::filesystem;

namespace {

bool is_index(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 5 && name.substr(name.size() - 5) == ".json";
}

// The first difference between two readings of a model, or empty when they hold the same
// tensors, dtypes, shapes and bytes. The bytes are compared in pieces of 4 MiB.
std::string first_difference(const TensorSet& a, const TensorSet& b) {
  for (const auto& [name, entry] : a.tensors()) {
    if (b.find(name) == nullptr) return fmt::format("tensor {} is only in the first", name);
  }
  for (const auto& [name, entry] : b.tensors()) {
    const TensorSet::Entry* other = a.find(name);
    if (other == nullptr) return fmt::format("tensor {} is only in the second", name);
    if (other->info->dtype != entry.info->dtype || other->info->shape != entry.info->shape) {
      return fmt::format("tensor {} is {} {} in one and {} {} in the other", name,
                         other->info->dtype, fmt::join(other->info->shape, "x"), entry.info->dtype,
                         fmt::join(entry.info->shape, "x"));
    }
  }
  constexpr std::size_t kPiece = std::size_t{4} << 20;
  std::vector<char> x(kPiece), y(kPiece);
  for (const auto& [name, entry] : a.tensors()) {
    const TensorSet::Entry* other = b.find(name);
    const std::uint64_t bytes = entry.info->bytes();
    for (std::uint64_t at = 0; at < bytes; at += kPiece) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, bytes - at));
      entry.file->read(*entry.info, at, n, x.data());
      other->file->read(*other->info, at, n, y.data());
      if (std::memcmp(x.data(), y.data(), n) != 0) {
        return fmt::format("tensor {} holds other values (from byte {} on)", name, at);
      }
    }
  }
  return {};
}

}  // namespace

TensorSet::TensorSet(const std::string& path) {
  fs::path target(path);
  if (fs::is_directory(target)) {
    const bool index = fs::exists(target / "model.safetensors.index.json");
    const bool single = fs::exists(target / "model.safetensors");
    if (index && single) {
      // transformers loads the single file, an index-first reader the shards: both must be the
      // same model, or which one trains is an accident of the reader.
      const TensorSet sharded((target / "model.safetensors.index.json").string());
      const TensorSet whole((target / "model.safetensors").string());
      if (const std::string difference = first_difference(sharded, whole); !difference.empty()) {
        throw make_error(
            ErrorCategory::io,
            "{} holds both model.safetensors.index.json (with its shards) and model.safetensors, "
            "and they are different models ({}; the first is the index's): one is stale, left "
            "by an export or download over another; remove the stale one (transformers loads "
            "model.safetensors)",
            path, difference);
      }
    }
    if (index) {
      target /= "model.safetensors.index.json";
    } else if (fs::exists(target / "model.safetensors")) {
      target /= "model.safetensors";
    } else {
      throw make_error(ErrorCategory::io,
                       "{} holds neither model.safetensors nor model.safetensors.index.json: name "
                       "the file to load",
                       path);
    }
  }
  if (!is_index(target)) {
    add_file(target.string(), nullptr);
    return;
  }
  std::error_code status_error;
  if (!fs::is_regular_file(target, status_error)) {
    throw make_error(ErrorCategory::io,
                     "cannot read {}: it is not a regular file; name the index file itself",
                     target.string());
  }
  std::ifstream in(target);
  if (!in)
    throw make_error(ErrorCategory::io, "cannot open {}: {}", target.string(),
                     std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw make_error(ErrorCategory::io, "{}: not valid JSON ({})", target.string(), e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw make_error(ErrorCategory::io, "{}: no \"weight_map\" object: not a safetensors index",
                     target.string());
  }
  // File -> the tensors the index puts there, in the order of the files' first mention.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw make_error(ErrorCategory::io, "{}: weight_map[\"{}\"] is not a file name",
                       target.string(), tensor);
    }
    const std::string name = file.get<std::string>();
    if (by_file.find(name) == by_file.end()) order.push_back(name);
    by_file[name].push_back(tensor);
  }
  for (const std::string& file : order) {
    add_file((target.parent_path() / file).string(), &by_file[file]);
  }
}

TensorSet::~TensorSet() = default;

void TensorSet::add_file(const std::string& path, const std::vector<std::string>* expected) {
  auto reader = std::make_unique<SafetensorsReader>(path);
  if (expected != nullptr) {
    for (const std::string& name : *expected) {
      if (reader->find(name) == nullptr) {
        throw make_error(ErrorCategory::io,
                         "{}: the index puts tensor {} here, but the file lacks it", path, name);
      }
    }
  }
  for (const TensorInfo& info : reader->tensors()) {
    const auto [it, added] = tensors_.emplace(info.name, Entry{reader.get(), &info});
    if (!added) {
      throw make_error(ErrorCategory::io, "tensor {} is in both {} and {}", info.name,
                       it->second.file->path(), path);
    }
  }
  paths_.push_back(path);
  readers_.push_back(std::move(reader));
}

const TensorSet::Entry* TensorSet::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace zero::checkpoint
