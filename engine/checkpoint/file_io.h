// Blocking I/O on checkpoint files: open, pread and pwrite retried on EINTR, short transfers
// resumed, and errors (io) that name the path, the file offset and strerror.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zero::checkpoint::detail {

// open(2) retried on EINTR; on failure an io Error "cannot <what> <path>: <strerror>".
int open_file(const std::string& path, int flags, unsigned mode, std::string_view what);

// Reads exactly `bytes` at `offset`; an error or the end of the file first is an io Error.
void pread_all(int fd, const std::string& path, void* out, std::size_t bytes, std::uint64_t offset);

// Writes exactly `bytes` at `offset`; an error is an io Error.
void pwrite_all(int fd, const std::string& path, const void* data, std::size_t bytes,
                std::uint64_t offset);

}  // namespace zero::checkpoint::detail
