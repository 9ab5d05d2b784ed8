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

// Opens `path` for reading (O_RDONLY | O_CLOEXEC) when it is a regular file, following links;
// anything else (a FIFO, whose open would wait for a writer forever, a device, a directory) is
// an io Error naming the path and what it is, before a byte is read.
int open_regular_for_reading(const std::string& path);

// What kind of file `mode` (st_mode) says: "a regular file", "a FIFO", "a directory", ...
std::string_view file_kind(unsigned mode);

// Reads exactly `bytes` at `offset`; an error or the end of the file first is an io Error.
void pread_all(int fd, const std::string& path, void* out, std::size_t bytes, std::uint64_t offset);

// Writes exactly `bytes` at `offset`; an error is an io Error.
void pwrite_all(int fd, const std::string& path, const void* data, std::size_t bytes,
                std::uint64_t offset);

}  // namespace zero::checkpoint::detail
