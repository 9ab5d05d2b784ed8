// Blocking I/O on checkpoint files (see file_io.h).
#include "engine/checkpoint/file_io.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::checkpoint::detail {

int open_file(const std::string& path, int flags, unsigned mode, std::string_view what) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    throw make_error(ErrorCategory::io, "cannot {} {}: {}", what, path, errno_text(err));
  }
  return fd;
}

void pread_all(int fd, const std::string& path, void* out, std::size_t bytes,
               std::uint64_t offset) {
  auto* cursor = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, cursor + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw make_error(ErrorCategory::io, "cannot read {} bytes of {} at offset {}: {}",
                       bytes - done, path, offset + done, errno_text(err));
    }
    if (n == 0) {
      throw make_error(ErrorCategory::io,
                       "cannot read {} bytes of {} at offset {}: the file ends there (was it "
                       "truncated after it was opened?)",
                       bytes - done, path, offset + done);
    }
    done += static_cast<std::size_t>(n);
  }
}

void pwrite_all(int fd, const std::string& path, const void* data, std::size_t bytes,
                std::uint64_t offset) {
  const auto* cursor = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd, cursor + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw make_error(
          ErrorCategory::io, "cannot write {} bytes to {} at offset {}: {}{}", bytes - done, path,
          offset + done, errno_text(err),
          err == ENOSPC || err == EDQUOT ? "; free space there or write elsewhere" : "");
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace zero::checkpoint::detail
