// Blocking I/O on checkpoint files (see file_io.h).
#include "checkpoint/file_io.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
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

std::string_view file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    default:
      return "not a regular file";
  }
}

int open_regular_for_reading(const std::string& path) {
  // O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; fstat then says
  // what the descriptor really is, with no window for the path to change in between.
  const int fd = open_file(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0, "open for reading");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const unsigned mode = st.st_mode;
    ::close(fd);
    throw make_error(ErrorCategory::io,
                     "cannot read {}: it is {}, not a regular file; name the file itself (links "
                     "to regular files are followed)",
                     path, file_kind(mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) static_cast<void>(::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK));
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
