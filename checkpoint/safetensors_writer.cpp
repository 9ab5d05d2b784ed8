// The safetensors writer: the header built with nlohmann/json from the declarations, then the
// data streamed through a buffer with pwrite, hashed in chunks (XXH3-64) on its way through.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <new>
#include <set>

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <xxhash.h>

#include "base/direct_io.h"
#include "base/error.h"
#include "checkpoint/file_io.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_detail.h"

namespace zero::checkpoint {

using detail::data_bytes;
using detail::kMetadataKey;
using detail::new_xxh_state;
using detail::pwrite_all;
using detail::XxhState;

namespace {
constexpr std::size_t kWriteBufferBytes = std::size_t{4} << 20;

std::size_t round_up(std::size_t n, std::size_t unit) {
  return (n + unit - 1) / unit * unit;
}

// The write buffer, aligned for O_DIRECT.
class AlignedBuffer {
 public:
  std::byte* data() const noexcept { return data_.get(); }
  std::size_t size() const noexcept { return size_; }
  void allocate(std::size_t bytes) {
    data_.reset(
        static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{kDirectIoAlignment})));
    size_ = bytes;
  }
  void release() noexcept {
    data_.reset();
    size_ = 0;
  }

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept {
      ::operator delete[](p, std::align_val_t{kDirectIoAlignment});
    }
  };
  std::unique_ptr<std::byte[], Free> data_;
  std::size_t size_ = 0;
};

}  // namespace

struct SafetensorsWriter::State {
  AlignedBuffer buffer;  // data not yet written, starting at data byte written - fill
  std::size_t fill = 0;
  XxhState hash = new_xxh_state();
  std::uint64_t chunk_fill = 0;  // bytes of the current chunk hashed so far
  std::size_t current = 0;       // the tensor the next byte goes into
  bool failed = false;           // a write, flush or fsync failed: the file is incomplete
};

namespace {

std::string header_json(const std::vector<TensorInfo>& tensors,
                        const std::map<std::string, std::string>& metadata,
                        const std::string& path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  for (const TensorInfo& tensor : tensors) {
    header[tensor.name] = {{"dtype", tensor.dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {tensor.begin, tensor.end}}};
  }
  try {
    return header.dump();
  } catch (const nlohmann::json::exception& error) {  // a name or value that is not UTF-8
    throw make_error(ErrorCategory::usage, "cannot write the header of {}: {}", path, error.what());
  }
}

std::vector<TensorInfo> lay_out(const std::vector<TensorDecl>& decls, const std::string& path) {
  std::vector<TensorInfo> tensors;
  std::set<std::string_view> seen;
  std::uint64_t cursor = 0;
  for (const TensorDecl& decl : decls) {
    if (decl.name.empty() || decl.name == kMetadataKey || !seen.insert(decl.name).second) {
      throw make_error(ErrorCategory::usage,
                       "cannot write {}: tensor name '{}' is {}; give each tensor its own name",
                       path, decl.name,
                       decl.name.empty()           ? "empty"
                       : decl.name == kMetadataKey ? "reserved"
                                                   : "used twice");
    }
    const std::size_t size = element_size(decl.dtype);
    if (size == 0) {
      throw make_error(ErrorCategory::usage, "cannot write {}: tensor '{}' has unknown dtype '{}'",
                       path, decl.name, decl.dtype);
    }
    const auto bytes = data_bytes(decl.shape, size);
    if (!bytes || cursor + *bytes < cursor) {
      throw make_error(ErrorCategory::usage,
                       "cannot write {}: tensor '{}' has a negative or too large shape", path,
                       decl.name);
    }
    tensors.push_back({decl.name, decl.dtype, decl.shape, cursor, cursor + *bytes});
    cursor += *bytes;
  }
  return tensors;
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                                     std::map<std::string, std::string> metadata,
                                     std::uint64_t chunk_bytes, unsigned mode, bool direct)
    : path_(std::move(path)),
      chunk_bytes_(chunk_bytes),
      direct_(direct),
      state_(std::make_unique<State>()) {
  if (chunk_bytes == 0) {
    throw make_error(ErrorCategory::usage, "cannot write {}: chunk_bytes is 0", path_);
  }
  tensors_ = lay_out(tensors, path_);
  sums_.assign(tensors_.size(), ChunkSums{chunk_bytes, {}});
  const auto too_large = [&](const char* bound, std::uint64_t bytes) {
    return make_error(ErrorCategory::usage,
                      "cannot write {}: its header would have {}{} bytes, more than the {} that "
                      "safetensors readers accept; write fewer tensors or less metadata per file",
                      path_, bound, bytes, detail::kMaxHeaderBytes);
  };
  // The metadata's own bytes, a lower bound of the header's: refused before it is serialized.
  std::uint64_t metadata_bytes = 0;
  for (const auto& [key, value] : metadata) metadata_bytes += key.size() + value.size();
  if (metadata_bytes > detail::kMaxHeaderBytes) throw too_large("at least ", metadata_bytes);
  std::string json = header_json(tensors_, metadata, path_);
  // 8 + N a multiple of 8 (aligned data), or of O_DIRECT's unit.
  const std::size_t unit = direct_ ? kDirectIoAlignment : 8;
  json.append(round_up(8 + json.size(), unit) - 8 - json.size(), ' ');
  if (json.size() > detail::kMaxHeaderBytes) throw too_large("", json.size());
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  header += json;
  header_bytes_ = header.size();
  header_hash_ = XXH3_64bits(header.data(), header.size());
  while (state_->current < tensors_.size() && tensors_[state_->current].bytes() == 0) {
    ++state_->current;
  }

  // Never written through a link at the path (callers make temporaries with claim_temporary).
  const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC;
  if (direct_) {
    do {
      fd_ = ::open(path_.c_str(), flags | O_DIRECT, static_cast<mode_t>(mode));
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0 && errno != EINVAL) {
      const int err = errno;
      throw make_error(ErrorCategory::io, "cannot create {}: {}", path_, errno_text(err));
    }
    direct_ = fd_ >= 0;  // EINVAL: this file system takes no O_DIRECT; buffered, then
  }
  if (fd_ < 0) fd_ = detail::open_file(path_, flags, mode, "create");
  state_->buffer.allocate(std::max(kWriteBufferBytes, round_up(header.size(), kDirectIoAlignment)));
  try {
    // Through the aligned buffer: O_DIRECT reads the memory it writes from at its unit.
    std::memcpy(state_->buffer.data(), header.data(), header.size());
    pwrite_all(fd_, path_, state_->buffer.data(), header.size(), 0);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t SafetensorsWriter::current() const noexcept {
  return state_->current;
}

std::uint64_t SafetensorsWriter::header_bytes() const noexcept {
  return header_bytes_;
}

std::uint64_t SafetensorsWriter::file_bytes() const noexcept {
  return header_bytes_ + (tensors_.empty() ? 0 : tensors_.back().end);
}

std::uint64_t SafetensorsWriter::header_hash() const noexcept {
  return header_hash_;
}

void SafetensorsWriter::write(const void* data, std::size_t bytes) {
  State& state = *state_;
  if (fd_ < 0) throw make_error(ErrorCategory::usage, "write to {} after finish()", path_);
  if (state.failed) {
    throw make_error(ErrorCategory::io,
                     "cannot write to {}: an earlier write failed; the file is incomplete: remove "
                     "it and write it again",
                     path_);
  }
  const std::uint64_t total = file_bytes() - header_bytes_;
  if (bytes > total - written_) {
    throw make_error(ErrorCategory::usage,
                     "write of {} bytes to {} past the end of the data: {} of its {} bytes are "
                     "written",
                     bytes, path_, written_, total);
  }
  const auto* from = static_cast<const std::byte*>(data);
  try {
    while (bytes > 0) {
      const TensorInfo& tensor = tensors_[state.current];
      const std::size_t take =
          std::min<std::uint64_t>({bytes, tensor.end - written_, chunk_bytes_ - state.chunk_fill});
      ZERO_CHECK(take > 0, "no room in tensor {} of {}", state.current, path_);
      XXH3_64bits_update(state.hash.get(), from, take);
      for (std::size_t copied = 0; copied < take;) {  // into the buffer, flushing when full
        const std::size_t n = std::min(take - copied, state.buffer.size() - state.fill);
        std::memcpy(state.buffer.data() + state.fill, from + copied, n);
        state.fill += n;
        copied += n;
        written_ += n;
        if (state.fill == state.buffer.size()) {
          pwrite_all(fd_, path_, state.buffer.data(), state.fill,
                     header_bytes_ + written_ - state.fill);
          state.fill = 0;
        }
      }
      from += take;
      bytes -= take;
      state.chunk_fill += take;
      if (state.chunk_fill == chunk_bytes_ || written_ == tensor.end) {
        sums_[state.current].hashes.push_back(XXH3_64bits_digest(state.hash.get()));
        XXH3_64bits_reset(state.hash.get());
        state.chunk_fill = 0;
      }
      while (state.current < tensors_.size() && tensors_[state.current].end <= written_) {
        ++state.current;
      }
    }
  } catch (...) {
    state.failed = true;
    throw;
  }
}

void SafetensorsWriter::finish() {
  State& state = *state_;
  if (fd_ < 0) throw make_error(ErrorCategory::usage, "finish() of {} called twice", path_);
  if (state.failed) {
    throw make_error(ErrorCategory::io,
                     "cannot finish {}: an earlier write, flush or fsync failed; the file is "
                     "incomplete: remove it and write it again",
                     path_);
  }
  if (state.current < tensors_.size()) {
    const TensorInfo& tensor = tensors_[state.current];
    throw make_error(ErrorCategory::usage,
                     "finish() of {} with data missing: tensor '{}' has {} of its {} bytes ({} of "
                     "{} data bytes written)",
                     path_, tensor.name, written_ - tensor.begin, tensor.bytes(), written_,
                     file_bytes() - header_bytes_);
  }
  try {
    std::size_t tail = state.fill;
    if (direct_) {
      // The last piece in whole units, zero-padded; the file is then cut to its size.
      tail = round_up(state.fill, kDirectIoAlignment);
      std::memset(state.buffer.data() + state.fill, 0, tail - state.fill);
    }
    pwrite_all(fd_, path_, state.buffer.data(), tail, header_bytes_ + written_ - state.fill);
    if (tail != state.fill && ::ftruncate(fd_, static_cast<off_t>(file_bytes())) != 0) {
      const int err = errno;
      throw make_error(ErrorCategory::io, "cannot set the size of {} to {}: {}", path_,
                       file_bytes(), errno_text(err));
    }
    int result;
    do {
      result = ::fsync(fd_);
    } while (result != 0 && errno == EINTR);
    if (result != 0) {
      const int err = errno;
      throw make_error(ErrorCategory::io, "cannot fsync {}: {}; the file may not be on disk", path_,
                       errno_text(err));
    }
  } catch (...) {
    // Final: after an fsync error the kernel may have dropped the dirty pages, and a second
    // fsync would report success for data that is not on disk.
    state.failed = true;
    throw;
  }
  const int fd = fd_;
  fd_ = -1;
  state.buffer.release();
  if (::close(fd) != 0 && errno != EINTR) {  // EINTR: closed all the same (Linux)
    const int err = errno;
    throw make_error(ErrorCategory::io, "cannot close {}: {}", path_, errno_text(err));
  }
}

}  // namespace zero::checkpoint
