// Reading a checkpoint's tensors by global element range (see reader.h).
#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/half.h"
#include "checkpoint/durable.h"

namespace zero::checkpoint {
namespace {

// Converts `count` elements from one floating dtype to another (to fp32 and back rounds to
// nearest even, which is exact for widening).
void convert(const void* in, DType from, void* out, DType to, std::size_t count) {
  if (from == to) {
    std::memcpy(out, in, count * dtype_size(from));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    float value = 0.0f;
    switch (from) {
      case DType::f32:
        std::memcpy(&value, static_cast<const char*>(in) + 4 * i, 4);
        break;
      case DType::bf16:
        value = bf16_to_float(static_cast<const std::uint16_t*>(in)[i]);
        break;
      case DType::f16:
        value = fp16_to_float(static_cast<const std::uint16_t*>(in)[i]);
        break;
      case DType::i64:
      case DType::u8:
        break;
    }
    switch (to) {
      case DType::f32:
        std::memcpy(static_cast<char*>(out) + 4 * i, &value, 4);
        break;
      case DType::bf16:
        static_cast<std::uint16_t*>(out)[i] = float_to_bf16(value);
        break;
      case DType::f16:
        static_cast<std::uint16_t*>(out)[i] = float_to_fp16(value);
        break;
      case DType::i64:
      case DType::u8:
        break;
    }
  }
}

}  // namespace

std::string resolve_tag_directory(const std::string& dir, const std::string& tag) {
  namespace fs = std::filesystem;
  if (!tag.empty()) return (fs::path(dir) / tag).string();
  if (fs::exists(fs::path(dir) / kManifestName)) return dir;
  return (fs::path(dir) / read_latest(dir)).string();
}

CheckpointReader::CheckpointReader(std::string tag_dir)
    : dir_(std::move(tag_dir)),
      manifest_(read_manifest((std::filesystem::path(dir_) / kManifestName).string())) {
  files_.resize(static_cast<std::size_t>(manifest_.world_size));
}

CheckpointReader::~CheckpointReader() = default;

DType CheckpointReader::saved_dtype(std::string_view kind) const {
  if (kind == kMaster) return DType::f32;
  if (kind == kParam) return manifest_.compute_dtype;
  return manifest_.state_dtype;
}

bool CheckpointReader::has(std::string_view kind, const ParamEntry& param) const {
  if (kind == kParam) return !param.trainable;
  if (!param.trainable) return false;
  if (kind == kMaster) return true;
  return std::find(manifest_.state_names.begin(), manifest_.state_names.end(), kind) !=
         manifest_.state_names.end();
}

SafetensorsReader& CheckpointReader::file(int rank) {
  auto& slot = files_[static_cast<std::size_t>(rank)];
  if (slot) return *slot;
  const FileEntry& entry = manifest_.files[static_cast<std::size_t>(rank)];
  const std::string path = (std::filesystem::path(dir_) / entry.name).string();
  auto reader = std::make_unique<SafetensorsReader>(path);
  if (reader->file_bytes() != entry.bytes) {
    throw make_error(ErrorCategory::io,
                     "checkpoint file {} has {} bytes, meta.json says {}: it was truncated or "
                     "replaced after the save",
                     path, reader->file_bytes(), entry.bytes);
  }
  if (reader->header_hash() != entry.header_hash) {
    throw make_error(ErrorCategory::io,
                     "checkpoint file {}: its header does not match the checksum in meta.json: "
                     "the file was changed or damaged after the save",
                     path);
  }
  slot = std::move(reader);
  return *slot;
}

const TensorInfo& CheckpointReader::tensor(int rank, const std::string& name,
                                           std::uint64_t expected, DType dtype) {
  SafetensorsReader& reader = file(rank);
  const TensorInfo& info = reader.at(name);
  if (info.dtype != safetensors_dtype(dtype) || info.shape.size() != 1 ||
      static_cast<std::uint64_t>(info.shape[0]) != expected) {
    throw make_error(ErrorCategory::io,
                     "checkpoint file {}: tensor {} is {} of shape [{}], expected {} of [{}]",
                     reader.path(), name, info.dtype,
                     info.shape.empty() ? std::string() : std::to_string(info.shape[0]),
                     safetensors_dtype(dtype), expected);
  }
  return info;
}

void CheckpointReader::read(std::string_view kind, const ParamEntry& param, std::uint64_t first,
                            std::size_t count, DType dtype, void* out) {
  if (!has(kind, param)) {
    throw make_error(ErrorCategory::usage, "checkpoint {} has no {} tensor for parameter {}", dir_,
                     kind, param.name);
  }
  const DType stored = saved_dtype(kind);
  const std::size_t stored_size = dtype_size(stored);
  const std::string name = tensor_name(kind, param.name);
  const int world = manifest_.world_size;
  for (const SavedPiece& piece : saved_pieces(param.numel, world, first, count)) {
    const std::uint64_t saved = saved_range(param.numel, world, piece.rank).count;
    const TensorInfo& info = tensor(piece.rank, name, saved, stored);
    const FileEntry& entry = manifest_.files[static_cast<std::size_t>(piece.rank)];
    const auto sums_it = entry.sums.find(name);
    if (sums_it == entry.sums.end()) {
      throw make_error(ErrorCategory::io, "checkpoint {}: meta.json has no checksums for {} in {}",
                       dir_, name, entry.name);
    }
    const ChunkSums sums{manifest_.chunk_bytes, sums_it->second};
    char* target = static_cast<char*>(out) + piece.out * dtype_size(dtype);
    if (stored == dtype) {
      file(piece.rank)
          .read_checked(info, piece.offset * stored_size, piece.count * stored_size, target, sums);
      continue;
    }
    // Converted in pieces of at most 4 Mi elements.
    constexpr std::size_t kStep = std::size_t{1} << 22;
    for (std::size_t done = 0; done < piece.count; done += kStep) {
      const std::size_t n = std::min(kStep, piece.count - done);
      scratch_.resize(n * stored_size);
      file(piece.rank)
          .read_checked(info, (piece.offset + done) * stored_size, n * stored_size, scratch_.data(),
                        sums);
      convert(scratch_.data(), stored, target + done * dtype_size(dtype), dtype, n);
    }
  }
}

std::uint64_t CheckpointReader::verify_all() {
  std::uint64_t bytes = 0;
  for (int rank = 0; rank < manifest_.world_size; ++rank) {
    SafetensorsReader& reader = file(rank);
    const FileEntry& entry = manifest_.files[static_cast<std::size_t>(rank)];
    std::size_t expected_tensors = 0;
    for (const ParamEntry& param : manifest_.params) {
      std::vector<std::string_view> kinds;
      if (param.trainable) {
        kinds.push_back(kMaster);
        for (const std::string& s : manifest_.state_names) kinds.push_back(s);
      } else {
        kinds.push_back(kParam);
      }
      const std::uint64_t count = saved_range(param.numel, manifest_.world_size, rank).count;
      for (const std::string_view kind : kinds) {
        const std::string name = tensor_name(kind, param.name);
        const TensorInfo& info = tensor(rank, name, count, saved_dtype(kind));
        const auto sums = entry.sums.find(name);
        if (sums == entry.sums.end()) {
          throw make_error(ErrorCategory::io,
                           "checkpoint {}: meta.json has no checksums for {} in {}", dir_, name,
                           entry.name);
        }
        reader.verify(info, ChunkSums{manifest_.chunk_bytes, sums->second});
        bytes += info.bytes();
        ++expected_tensors;
      }
    }
    if (reader.tensors().size() != expected_tensors) {
      throw make_error(ErrorCategory::io,
                       "checkpoint file {} holds {} tensors; meta.json's parameters imply {}",
                       reader.path(), reader.tensors().size(), expected_tensors);
    }
  }
  return bytes;
}

}  // namespace zero::checkpoint
