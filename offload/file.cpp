// File: a file opened O_DIRECT, its direct-I/O alignment, and preallocation.
#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"
#include "base/log.h"
#include "offload/aio.h"

namespace zero::offload {
namespace {

constexpr std::size_t kDefaultAlignment = 4096;

// The larger of the memory and offset alignments statx reports for direct I/O (Linux 6.1 and
// later), else 4096, which every device and file system we meet accepts.
std::size_t direct_io_alignment(int fd) {
#ifdef STATX_DIOALIGN
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
      (stx.stx_mask & STATX_DIOALIGN) != 0 && stx.stx_dio_offset_align != 0 &&
      stx.stx_dio_mem_align != 0) {
    return std::max<std::size_t>(stx.stx_dio_offset_align, stx.stx_dio_mem_align);
  }
#endif
  (void)fd;
  return kDefaultAlignment;
}

// Free bytes for an unprivileged writer on the file system of `fd`, or -1 when unknown.
long long free_bytes(int fd) {
  struct statvfs vfs {};
  if (::fstatvfs(fd, &vfs) != 0) return -1;
  return static_cast<long long>(vfs.f_bavail) * static_cast<long long>(vfs.f_frsize);
}

}  // namespace

File::File(std::string path, bool create) : path_(std::move(path)) {
  // A file is created new, never through a link or over an existing file.
  const int flags = O_RDWR | O_DIRECT | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0);
  do {
    fd_ = ::open(path_.c_str(), flags, 0600);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) {
    const int err = errno;
    // open() answers EINVAL for O_DIRECT on file systems without direct I/O (tmpfs before 6.6,
    // some FUSE and network file systems).
    throw make_error(ErrorCategory::io, "cannot open {} for direct I/O: {}{}", path_,
                     errno_text(err),
                     err == EINVAL ? "; the file system does not support O_DIRECT (tmpfs?): put "
                                     "the swap directory (nvme_path) on a local disk"
                                   : "");
  }
  alignment_ = direct_io_alignment(fd_);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);  // no retry on EINTR: the descriptor is gone either way
}

void File::preallocate(std::uint64_t bytes) {
  if (bytes == 0) return;
  int result;
  do {
    result = ::fallocate(fd_, 0, 0, static_cast<off_t>(bytes));
  } while (result != 0 && errno == EINTR);
  if (result == 0) return;
  const int err = errno;
  if (err == EOPNOTSUPP) {
    // The file system cannot reserve blocks: size the file and say that running out of room
    // will only show when a write fails.
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) == 0) {
      log::warn(
          "{}: the file system cannot preallocate (fallocate: {}); the file is sized to {} "
          "but its blocks are not reserved, so a full disk shows only when a write fails",
          path_, errno_text(err), format_bytes(bytes));
      return;
    }
  }
  const long long free = free_bytes(fd_);
  throw make_error(
      ErrorCategory::io,
      "cannot preallocate {} ({} bytes) for {}: {} (the file system has {} free); "
      "free space there or put the file on a larger disk",
      format_bytes(bytes), bytes, path_, errno_text(err),
      free < 0 ? std::string("an unknown amount") : format_bytes(static_cast<std::uint64_t>(free)));
}

}  // namespace zero::offload
