// The safetensors reader and the dtype tables: the header parsed with nlohmann/json and checked
// as the spec (and the reference implementation) requires, data read with pread, chunk sums
// checked on the whole chunks a read touches. The writer is in safetensors_writer.cpp.
#include "checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/half.h"
#include "checkpoint/file_io.h"
#include "checkpoint/safetensors_detail.h"

namespace zero::checkpoint {

using detail::data_bytes;
using detail::kMetadataKey;
using detail::new_xxh_state;
using detail::pread_all;
using detail::XxhState;

namespace {

// The format is little-endian and tensor data is copied byte for byte.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

constexpr std::size_t kReadPieceBytes = std::size_t{1} << 20;  // scratch for hashing, converting

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw make_error(ErrorCategory::io,
                   "{} is not a valid safetensors file: {}; the file is damaged or truncated, or "
                   "not a safetensors file: restore or rewrite it",
                   path, what);
}

std::uint64_t json_uint(const nlohmann::json& value, const std::string& path,
                        const std::string& name, std::string_view field) {
  if (!value.is_number_unsigned()) {
    bad_file(path, fmt::format("tensor '{}': {} holds {}, not a non-negative integer", name, field,
                               value.dump()));
  }
  return value.get<std::uint64_t>();
}

TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry,
                       const std::string& path) {
  if (!entry.is_object()) bad_file(path, fmt::format("tensor '{}' is not a JSON object", name));
  TensorInfo info;
  info.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    bad_file(path, fmt::format("tensor '{}' has no string \"dtype\"", name));
  }
  info.dtype = dtype->get<std::string>();
  const std::size_t size = element_size(info.dtype);
  if (size == 0)
    bad_file(path, fmt::format("tensor '{}' has unknown dtype '{}'", name, info.dtype));

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    bad_file(path, fmt::format("tensor '{}' has no \"shape\" array", name));
  }
  for (const auto& dim : *shape) {
    const std::uint64_t value = json_uint(dim, path, name, "shape");
    if (value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      bad_file(path, fmt::format("tensor '{}' has a dimension of {}", name, value));
    }
    info.shape.push_back(static_cast<std::int64_t>(value));
  }

  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    bad_file(path, fmt::format("tensor '{}' has no \"data_offsets\" [begin, end]", name));
  }
  info.begin = json_uint((*offsets)[0], path, name, "data_offsets");
  info.end = json_uint((*offsets)[1], path, name, "data_offsets");
  const auto expected = data_bytes(info.shape, size);
  if (!expected) bad_file(path, fmt::format("tensor '{}' has a shape too large to address", name));
  if (info.end < info.begin || info.end - info.begin != *expected) {
    bad_file(path, fmt::format("tensor '{}' has data_offsets [{}, {}] but its shape and dtype {} "
                               "need {} bytes",
                               name, info.begin, info.end, info.dtype, *expected));
  }
  return info;
}

std::map<std::string, std::string> parse_metadata(const nlohmann::json& value,
                                                  const std::string& path) {
  if (!value.is_object()) bad_file(path, "\"__metadata__\" is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      bad_file(path, fmt::format("\"__metadata__\" entry '{}' is not a string", key));
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Sorts by data offset and checks that the tensors tile [0, data bytes) with no gap or overlap;
// returns the data section's size.
std::uint64_t sort_and_tile(std::vector<TensorInfo>& tensors, const std::string& path) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t cursor = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& tensor : tensors) {
    if (tensor.begin != cursor) {
      bad_file(path, fmt::format("tensor '{}' starts at data offset {} but {} at {}: {}",
                                 tensor.name, tensor.begin,
                                 previous ? fmt::format("tensor '{}' ends", previous->name)
                                          : std::string("the data section starts"),
                                 cursor, tensor.begin < cursor ? "they overlap" : "a gap"));
    }
    cursor = tensor.end;
    previous = &tensor;
  }
  return cursor;
}

// Whole chunks of a tensor in [first, last] are read and checked against `sums`; the bytes of
// tensor range [copy_begin, copy_end) are read straight into `out` (out[0] is copy_begin).
void check_chunks(int fd, const std::string& path, std::uint64_t data_offset,
                  const TensorInfo& tensor, const ChunkSums& sums, std::uint64_t first,
                  std::uint64_t last, std::uint64_t copy_begin, std::uint64_t copy_end,
                  std::byte* out) {
  const std::uint64_t chunk = sums.chunk_bytes;
  std::vector<std::byte> scratch;
  const XxhState state = new_xxh_state();
  for (std::uint64_t c = first; c <= last; ++c) {
    const std::uint64_t chunk_begin = c * chunk;
    const std::uint64_t chunk_end = std::min(chunk_begin + chunk, tensor.bytes());
    XXH3_64bits_reset(state.get());
    for (std::uint64_t pos = chunk_begin; pos < chunk_end;) {
      // Pieces lie wholly inside or wholly outside the copied range, so that copied bytes are
      // read once, into `out`, and only the rest goes through the scratch buffer.
      std::uint64_t next = std::min<std::uint64_t>(chunk_end, pos + kReadPieceBytes);
      if (pos < copy_begin) next = std::min(next, copy_begin);
      if (pos < copy_end) next = std::min(next, copy_end);
      const bool inside = pos >= copy_begin && pos < copy_end;
      std::byte* target = nullptr;
      if (inside) {
        target = out + (pos - copy_begin);
      } else {
        if (scratch.empty()) scratch.resize(kReadPieceBytes);
        target = scratch.data();
      }
      pread_all(fd, path, target, next - pos, data_offset + tensor.begin + pos);
      // Read once: its pages leave the page cache at once, so that reading a checkpoint larger
      // than memory does not push out the training's own memory (and the freed pages serve the
      // next read).
      ::posix_fadvise(fd, static_cast<off_t>(data_offset + tensor.begin + pos),
                      static_cast<off_t>(next - pos), POSIX_FADV_DONTNEED);
      XXH3_64bits_update(state.get(), target, next - pos);
      pos = next;
    }
    const std::uint64_t hash = XXH3_64bits_digest(state.get());
    if (hash != sums.hashes[c]) {
      const std::uint64_t at = data_offset + tensor.begin;
      throw make_error(ErrorCategory::io,
                       "{}: tensor '{}': chunk {} (file bytes [{}, {})) has XXH3 {:016x} but "
                       "{:016x} was written: the file was changed or damaged after it was "
                       "written; restore it from a good copy or write the checkpoint again",
                       path, tensor.name, c, at + chunk_begin, at + chunk_end, hash,
                       sums.hashes[c]);
    }
  }
}

}  // namespace

// ---- dtypes --------------------------------------------------------------------------------

std::size_t element_size(std::string_view dtype) noexcept {
  static constexpr std::pair<std::string_view, std::size_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},      {"U16", 2},
      {"U32", 4}, {"U64", 8}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (name == dtype) return size;
  }
  return 0;
}

std::optional<DType> engine_dtype(std::string_view dtype) noexcept {
  if (dtype == "F32") return DType::f32;
  if (dtype == "F16") return DType::f16;
  if (dtype == "BF16") return DType::bf16;
  if (dtype == "I64") return DType::i64;
  return std::nullopt;
}

std::string_view safetensors_dtype(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "?";
}

std::uint64_t TensorInfo::numel() const noexcept {
  std::uint64_t n = 1;
  for (const std::int64_t dim : shape) n *= static_cast<std::uint64_t>(dim);
  return n;
}

// ---- reader --------------------------------------------------------------------------------

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  fd_ = detail::open_regular_for_reading(path_);
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int err = errno;
      throw make_error(ErrorCategory::io, "cannot stat {}: {}", path_, errno_text(err));
    }
    file_bytes_ = static_cast<std::uint64_t>(st.st_size);
    if (file_bytes_ < 8) {
      bad_file(path_,
               fmt::format("it has {} bytes, fewer than the 8 of the header length", file_bytes_));
    }
    unsigned char length[8];
    pread_all(fd_, path_, length, sizeof length, 0);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
    if (n > detail::kMaxHeaderBytes) {
      bad_file(path_, fmt::format("the header length {} exceeds the limit of {} bytes", n,
                                  detail::kMaxHeaderBytes));
    }
    if (8 + n > file_bytes_) {
      bad_file(path_, fmt::format("the header length {} runs past the end of the file ({} bytes)",
                                  n, file_bytes_));
    }
    data_offset_ = 8 + n;
    std::string text(n, '\0');
    pread_all(fd_, path_, text.data(), text.size(), 8);
    // The spec wants '{' first; trailing whitespace (the writers' padding) the parser skips.
    if (text.empty() || text.front() != '{') bad_file(path_, "the header does not start with '{'");
    // A name given twice would otherwise keep only its last entry (JSON objects hold one value
    // per key) and show as a gap in the data: the parser reports each top-level key.
    std::set<std::string> names;
    std::string duplicate;
    const nlohmann::json::parser_callback_t note_names =
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (depth == 1 && event == nlohmann::json::parse_event_t::key &&
              !names.insert(parsed.get<std::string>()).second && duplicate.empty()) {
            duplicate = parsed.get<std::string>();
          }
          return true;
        };
    const nlohmann::json header =
        nlohmann::json::parse(text, note_names, /*allow_exceptions=*/false);
    if (header.is_discarded()) bad_file(path_, "the header is not valid JSON");
    if (!duplicate.empty()) {
      bad_file(path_, fmt::format("the header names tensor '{}' twice", duplicate));
    }
    if (!header.is_object()) bad_file(path_, "the header is not a JSON object");

    for (const auto& [name, entry] : header.items()) {
      if (name == kMetadataKey) {
        metadata_ = parse_metadata(entry, path_);
      } else {
        tensors_.push_back(parse_entry(name, entry, path_));
      }
    }
    const std::uint64_t data = sort_and_tile(tensors_, path_);
    if (file_bytes_ != data_offset_ + data) {
      bad_file(path_, fmt::format("it has {} bytes but the header says 8 + {} + {} = {}{}",
                                  file_bytes_, n, data, data_offset_ + data,
                                  file_bytes_ < data_offset_ + data ? " (truncated data)"
                                                                    : " (extra bytes at the end)"));
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);  // no retry on EINTR: the descriptor is gone either way
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const noexcept {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& SafetensorsReader::at(std::string_view name) const {
  if (const TensorInfo* tensor = find(name)) return *tensor;
  throw make_error(ErrorCategory::io, "{} has no tensor '{}' (it holds {} tensors)", path_, name,
                   tensors_.size());
}

std::uint64_t SafetensorsReader::file_bytes() const noexcept {
  return file_bytes_;
}

std::uint64_t SafetensorsReader::header_hash() const {
  // Read again rather than kept: the header may be up to 100 MB and is rarely hashed.
  const XxhState state = new_xxh_state();
  std::vector<std::byte> piece(std::min<std::uint64_t>(kReadPieceBytes, data_offset_));
  for (std::uint64_t pos = 0; pos < data_offset_;) {
    const std::size_t bytes = std::min<std::uint64_t>(piece.size(), data_offset_ - pos);
    pread_all(fd_, path_, piece.data(), bytes, pos);
    XXH3_64bits_update(state.get(), piece.data(), bytes);
    pos += bytes;
  }
  return XXH3_64bits_digest(state.get());
}

namespace {

void check_range(const std::string& path, std::uint64_t data_bytes, const TensorInfo& tensor,
                 std::uint64_t offset, std::size_t bytes) {
  if (tensor.end > data_bytes || tensor.begin > tensor.end) {
    throw make_error(ErrorCategory::usage,
                     "tensor '{}' (data bytes [{}, {})) is not one of {}'s: its data section has "
                     "{} bytes",
                     tensor.name, tensor.begin, tensor.end, path, data_bytes);
  }
  if (offset > tensor.bytes() || bytes > tensor.bytes() - offset) {
    throw make_error(ErrorCategory::usage,
                     "read of bytes [{}, {}) of tensor '{}' in {}, which has {} bytes", offset,
                     offset + bytes, tensor.name, path, tensor.bytes());
  }
}

void check_sums(const std::string& path, const TensorInfo& tensor, const ChunkSums& sums) {
  const std::uint64_t chunk = sums.chunk_bytes;
  const std::uint64_t expected = tensor.bytes() == 0 ? 0
                                 : chunk == 0        ? 0
                                                     : (tensor.bytes() + chunk - 1) / chunk;
  if ((tensor.bytes() != 0 && chunk == 0) || sums.hashes.size() != expected) {
    throw make_error(ErrorCategory::usage,
                     "the chunk sums given for tensor '{}' in {} ({} hashes of {} bytes) do not "
                     "fit its {} bytes, which need {} hashes: they belong to another tensor",
                     tensor.name, path, sums.hashes.size(), chunk, tensor.bytes(), expected);
  }
}

}  // namespace

void SafetensorsReader::read(const TensorInfo& tensor, std::uint64_t offset, std::size_t bytes,
                             void* out) const {
  check_range(path_, file_bytes_ - data_offset_, tensor, offset, bytes);
  pread_all(fd_, path_, out, bytes, data_offset_ + tensor.begin + offset);
}

void SafetensorsReader::read_checked(const TensorInfo& tensor, std::uint64_t offset,
                                     std::size_t bytes, void* out, const ChunkSums& sums) const {
  check_range(path_, file_bytes_ - data_offset_, tensor, offset, bytes);
  check_sums(path_, tensor, sums);
  if (bytes == 0) return;
  check_chunks(fd_, path_, data_offset_, tensor, sums, offset / sums.chunk_bytes,
               (offset + bytes - 1) / sums.chunk_bytes, offset, offset + bytes,
               static_cast<std::byte*>(out));
}

void SafetensorsReader::verify(const TensorInfo& tensor, const ChunkSums& sums) const {
  check_range(path_, file_bytes_ - data_offset_, tensor, 0, 0);
  check_sums(path_, tensor, sums);
  if (sums.hashes.empty()) return;
  check_chunks(fd_, path_, data_offset_, tensor, sums, 0, sums.hashes.size() - 1, 0, 0, nullptr);
}

void SafetensorsReader::read_f32(const TensorInfo& tensor, std::uint64_t first, std::size_t count,
                                 float* out, const ChunkSums* sums) const {
  const std::string& dtype = tensor.dtype;
  if (dtype != "F32" && dtype != "F16" && dtype != "BF16" && dtype != "F64") {
    throw make_error(ErrorCategory::usage,
                     "tensor '{}' in {} has dtype {}: read_f32 reads F64, F32, F16 and BF16 only",
                     tensor.name, path_, dtype);
  }
  const std::size_t size = element_size(dtype);
  const std::uint64_t numel = tensor.bytes() / size;
  if (first > numel || count > numel - first) {
    throw make_error(ErrorCategory::usage,
                     "read of elements [{}, {}) of tensor '{}' in {}, which has {}", first,
                     first + count, tensor.name, path_, numel);
  }
  auto read_bytes = [&](std::uint64_t offset, std::size_t bytes, void* to) {
    if (sums) {
      read_checked(tensor, offset, bytes, to, *sums);
    } else {
      read(tensor, offset, bytes, to);
    }
  };
  if (dtype == "F32") {
    read_bytes(first * 4, count * 4, out);
    return;
  }
  // Pieces of a bounded size; with sums, at least a chunk, ending on chunk boundaries when they
  // fall between elements, so that no chunk is read twice.
  const std::uint64_t chunk = sums ? sums->chunk_bytes : 0;
  const std::uint64_t piece = std::max<std::uint64_t>(kReadPieceBytes, chunk) / size * size;
  const bool align = chunk != 0 && chunk % size == 0;
  std::vector<std::byte> buffer(std::min<std::uint64_t>(piece, count * size));
  std::uint64_t pos = first * size;
  const std::uint64_t end = (first + count) * size;
  while (pos < end) {
    std::uint64_t next = std::min(end, pos + piece);
    if (align && next < end) next = std::max(next / chunk * chunk, pos + chunk - pos % chunk);
    const std::size_t bytes = next - pos;
    read_bytes(pos, bytes, buffer.data());
    float* to = out + (pos / size - first);
    const std::size_t n = bytes / size;
    if (dtype == "F64") {
      for (std::size_t i = 0; i < n; ++i) {
        double value;
        std::memcpy(&value, buffer.data() + i * 8, 8);
        to[i] = static_cast<float>(value);
      }
    } else {
      const bool bf16 = dtype == "BF16";
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t half;
        std::memcpy(&half, buffer.data() + i * 2, 2);
        to[i] = bf16 ? bf16_to_float(half) : fp16_to_float(half);
      }
    }
    pos = next;
  }
}

}  // namespace zero::checkpoint
