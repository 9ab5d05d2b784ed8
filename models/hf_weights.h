// What a Hugging Face weights path holds, read from the headers alone (no tensor data, no
// engine): the tensor names of a .safetensors file, of an index's weight_map, or of a directory
// holding either. The model families check a directory against its config.json with it before
// the engine loads the weights, so that a disagreement is told in the directory's terms.
#pragma once

#include <set>
#include <string>

namespace zero::models {

// The tensor names `path` holds. Throws std::runtime_error naming the file when it is missing,
// not a regular file (a FIFO, a device, a directory where a file is meant), or not readable as
// a safetensors header or an index.
std::set<std::string> pretrained_tensor_names(const std::string& path);

}  // namespace zero::models
