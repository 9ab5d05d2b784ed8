// The alignment zero lays every direct-I/O (O_DIRECT) transfer out for: 4096 bytes, the
// strictest a Linux file system asks. A file's own (offload File::alignment(), from statx's
// STATX_DIOALIGN) divides it, so offsets, lengths and buffers aligned to it suit any file.
#pragma once

#include <cstddef>

namespace zero {

inline constexpr std::size_t kDirectIoAlignment = 4096;

// `bytes` rounded up to a multiple of kDirectIoAlignment.
constexpr std::size_t align_direct(std::size_t bytes) {
  return (bytes + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment;
}

}  // namespace zero
