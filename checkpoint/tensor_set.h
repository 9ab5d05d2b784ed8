// The tensors of a model stored as safetensors files: one file, several files listed by an index
// JSON (Hugging Face's model.safetensors.index.json: {"weight_map": {tensor: file}}), or a
// directory holding model.safetensors or an index. Files are opened once, headers only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"

namespace zero::checkpoint {

class TensorSet {
 public:
  // Throws an io Error naming the path when it is none of the above, a file fails its header
  // checks, the index names a file that is missing, or a tensor appears in two files.
  explicit TensorSet(const std::string& path);
  ~TensorSet();
  TensorSet(const TensorSet&) = delete;
  TensorSet& operator=(const TensorSet&) = delete;

  struct Entry {
    const SafetensorsReader* file;
    const TensorInfo* info;
  };
  // nullptr when there is no such tensor.
  const Entry* find(std::string_view name) const;
  const std::map<std::string, Entry, std::less<>>& tensors() const noexcept { return tensors_; }
  const std::vector<std::string>& files() const noexcept { return paths_; }

 private:
  void add_file(const std::string& path, const std::vector<std::string>* expected);

  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<SafetensorsReader>> readers_;
  std::map<std::string, Entry, std::less<>> tensors_;
};

}  // namespace zero::checkpoint
