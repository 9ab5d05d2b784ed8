// The safetensors file format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header, then the data section. The header maps each tensor's
// name to {"dtype", "shape", "data_offsets": [begin, end)} (byte offsets into the data section,
// row-major, little-endian), plus an optional "__metadata__" object of string values. Tensors
// tile the data section without holes or overlaps.
//
// Checkpoints use it for every file they write (each rank's shards, and the consolidated export),
// so any safetensors reader opens them; pretrained weights come in through the same reader.
//
// Checksums: the writer hashes each tensor's data in chunks of `chunk_bytes` (XXH3-64, chunks
// counted from the tensor's first byte, the last one shorter), so that a reader that needs only
// part of a tensor verifies just the chunks it reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"

namespace zero::checkpoint {

// The bytes per element of a safetensors dtype string ("F32", "BF16", "F16", "F64", "I64",
// "I32", "I16", "I8", "U8", "U16", "U32", "U64", "BOOL", "F8_E4M3", "F8_E5M2"); 0 when unknown.
std::size_t element_size(std::string_view dtype) noexcept;
// The engine's dtype of a safetensors dtype (F32, F16, BF16, I64), or none.
std::optional<DType> engine_dtype(std::string_view dtype) noexcept;
// The safetensors name of an engine dtype: "F32", "F16", "BF16", "I64".
std::string_view safetensors_dtype(DType dtype) noexcept;

struct TensorInfo {
  std::string name;
  std::string dtype;                // as the file spells it: "F32", "BF16", ...
  std::vector<std::int64_t> shape;  // empty: a scalar (one element)
  std::uint64_t begin = 0;          // byte offsets in the data section
  std::uint64_t end = 0;
  std::uint64_t numel() const noexcept;  // product of shape (1 for a scalar)
  std::uint64_t bytes() const noexcept { return end - begin; }
};

// XXH3-64 of each `chunk_bytes` piece of a tensor's data, first to last.
struct ChunkSums {
  std::uint64_t chunk_bytes = 0;
  std::vector<std::uint64_t> hashes;
};

// Reads a safetensors file with pread; the header is parsed and checked at construction.
// Thread-compatible: const members may be called from several threads.
class SafetensorsReader {
 public:
  // Opens `path` and checks the header: its length (at most 100 MB and within the file), valid
  // JSON, every entry's dtype known, shape non-negative, data_offsets consistent with
  // numel * element size, tensors tiling the data section exactly, and the file's size equal
  // to 8 + N + the data section. Throws an io Error naming the path and, where one is at
  // fault, the tensor.
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const noexcept { return path_; }
  // In the order of their data (increasing begin).
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  const TensorInfo* find(std::string_view name) const noexcept;
  // Throws an io Error naming the path and the tensor when there is none by that name.
  const TensorInfo& at(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  std::uint64_t header_bytes() const noexcept { return data_offset_; }  // 8 + N
  std::uint64_t file_bytes() const noexcept;

  // XXH3-64 of the file's first header_bytes() bytes (the length and the JSON).
  std::uint64_t header_hash() const;

  // Bytes [offset, offset + bytes) of the tensor's data into `out`. Throws a usage Error when
  // the range is outside the tensor, an io Error (path, file offset, strerror) when the read
  // fails or comes up short.
  void read(const TensorInfo& tensor, std::uint64_t offset, std::size_t bytes, void* out) const;

  // The same, after reading the whole chunks that hold the range and checking them against
  // `sums` (which must have ceil(tensor.bytes() / chunk_bytes) hashes); a mismatch is an io
  // Error naming the path, the tensor, the chunk's byte range in the file and saying the file
  // was changed or damaged after it was written.
  void read_checked(const TensorInfo& tensor, std::uint64_t offset, std::size_t bytes, void* out,
                    const ChunkSums& sums) const;

  // Elements [first, first + count) of a floating tensor (F64, F32, F16, BF16) as fp32 (F64
  // rounds to nearest). With `sums`, read through read_checked. Throws a usage Error for other
  // dtypes, naming the tensor and its dtype.
  void read_f32(const TensorInfo& tensor, std::uint64_t first, std::size_t count, float* out,
                const ChunkSums* sums = nullptr) const;

  // Checks every chunk of the tensor against `sums`; throws as read_checked does.
  void verify(const TensorInfo& tensor, const ChunkSums& sums) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t file_bytes_ = 0;
  std::uint64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A tensor the writer will write: its data comes in declaration order.
struct TensorDecl {
  std::string name;
  std::string dtype;  // a safetensors dtype string
  std::vector<std::int64_t> shape;
};

// Writes a safetensors file in one pass: the header is written from the declarations at
// construction, then each tensor's data, in declaration order, in pieces of any size.
class SafetensorsWriter {
 public:
  // Creates (or truncates) `path` with `mode` and writes the header (padded with spaces so
  // that the data section starts at a multiple of 8). Throws an io Error naming the path; a
  // usage Error for a duplicate or empty name, a name "__metadata__", or an unknown dtype.
  //
  // `direct`: write with O_DIRECT, past the page cache (several times faster where buffered
  // writeback is throttled, and a checkpoint does not evict the training's pages). The header
  // is then padded to a multiple of 4096 bytes, every write is whole 4096-byte units from an
  // aligned buffer, and the file is truncated to its size at finish(). A file system that
  // refuses O_DIRECT (tmpfs) gets buffered writes instead; direct() says which.
  SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                    std::map<std::string, std::string> metadata = {},
                    std::uint64_t chunk_bytes = kDefaultChunkBytes, unsigned mode = 0644,
                    bool direct = false);
  // Closes the file; an unfinished file stays as it is (the caller removes it).
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  static constexpr std::uint64_t kDefaultChunkBytes = std::uint64_t{16} << 20;

  // The next `bytes` of data: they may span the end of one tensor and the start of the next.
  // Throws a usage Error past the last tensor's end, an io Error (path, offset, strerror) when
  // the write fails.
  void write(const void* data, std::size_t bytes);
  // The index of the tensor the next write() goes into (tensors().size() when all are full).
  std::size_t current() const noexcept;
  bool direct() const noexcept { return direct_; }

  // After the last byte: flushes, fsyncs and closes. Throws a usage Error when data is missing
  // (naming the first tensor not yet full), an io Error when the flush or fsync fails.
  void finish();

  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  std::uint64_t header_bytes() const noexcept;
  std::uint64_t file_bytes() const noexcept;
  std::uint64_t header_hash() const noexcept;
  // Per tensor, in declaration order; complete after finish().
  const std::vector<ChunkSums>& sums() const noexcept { return sums_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<TensorInfo> tensors_;
  std::vector<ChunkSums> sums_;
  std::uint64_t header_bytes_ = 0;
  std::uint64_t header_hash_ = 0;
  std::uint64_t written_ = 0;  // data bytes so far
  std::uint64_t chunk_bytes_;
  bool direct_ = false;
  // Buffered output and the running hash of the current chunk, in the .cpp.
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zero::checkpoint
