// Reads a saved checkpoint at any world size: the manifest, and any range of any parameter's
// saved tensors, gathered from the rank files that hold it and converted to the dtype asked for.
// Every byte read is checked against the manifest's chunk checksums; each rank file's size and
// header are checked when it is first opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"

namespace zero::checkpoint {

// DIR/<tag> for `tag`, or for the tag DIR/latest names when `tag` is empty. A path that is
// itself a tag directory (it holds meta.json) is taken as it is when `tag` is empty.
std::string resolve_tag_directory(const std::string& dir, const std::string& tag);

class CheckpointReader {
 public:
  // Reads and checks `tag_dir`/meta.json (an io Error naming the file and key otherwise).
  explicit CheckpointReader(std::string tag_dir);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const Manifest& manifest() const noexcept { return manifest_; }
  const std::string& directory() const noexcept { return dir_; }

  // The dtype a kind of tensor was saved in: master fp32, moments the state dtype, param the
  // compute dtype.
  DType saved_dtype(std::string_view kind) const;

  // Elements [first, first + count) of `kind` ("master", a moment's name, "param") of the
  // parameter, as `dtype` (fp32, bf16 or fp16; converted with round to nearest even when it
  // differs), into `out`. Throws an io Error naming the file, tensor and offset when a file is
  // missing, short, or fails its checksum; a usage Error when the parameter has no such tensor.
  void read(std::string_view kind, const ParamEntry& param, std::uint64_t first, std::size_t count,
            DType dtype, void* out);

  // Whether the checkpoint holds `kind` for the parameter (masters and moments for trainable
  // parameters, param for frozen ones).
  bool has(std::string_view kind, const ParamEntry& param) const;

  // Checks every rank file: its size, header, that it holds exactly the tensors the manifest
  // implies with the right dtypes and shapes, and every chunk of every tensor. Returns the
  // bytes checked.
  std::uint64_t verify_all();

 private:
  SafetensorsReader& file(int rank);
  const TensorInfo& tensor(int rank, const std::string& name, std::uint64_t expected, DType dtype);

  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::vector<char> scratch_;
};

}  // namespace zero::checkpoint
