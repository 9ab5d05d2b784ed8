// A model's safetensors files as one set of named tensors (see tensor_set.h).
#include "engine/checkpoint/tensor_set.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace zero::checkpoint {
namespace fs = std::filesystem;

namespace {

bool is_index(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.size() > 5 && name.substr(name.size() - 5) == ".json";
}

}  // namespace

TensorSet::TensorSet(const std::string& path) {
  fs::path target(path);
  if (fs::is_directory(target)) {
    if (fs::exists(target / "model.safetensors.index.json")) {
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
  std::ifstream in(target);
  if (!in) throw make_error(ErrorCategory::io, "cannot open {}: {}", target.string(), std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw make_error(ErrorCategory::io, "{}: not valid JSON ({})", target.string(), e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw make_error(ErrorCategory::io,
                     "{}: no \"weight_map\" object: not a safetensors index", target.string());
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
        throw make_error(ErrorCategory::io, "{}: the index puts tensor {} here, but the file lacks it",
                         path, name);
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
