// SwapDirectory: <nvme_path>/zero/<job id>/rank<r>/, its preallocated files, their removal.
#include <cerrno>
#include <filesystem>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"
#include "base/log.h"
#include "offload/disk_space.h"
#include "offload/swap.h"
#include "offload/swap_jobs.h"

namespace zero::offload {
namespace {

// A single path component of ours: a job id or a file name.
void check_component(std::string_view what, std::string_view name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string_view("/\0", 2)) != std::string_view::npos) {
    throw make_error(ErrorCategory::usage,
                     "swap {} '{}': give a non-empty name without '/' (it becomes a directory "
                     "entry)",
                     what, name);
  }
}

// mkdir -p, creating what is missing with mode 0700: swap files hold the model's state.
void make_directories(const std::string& path) {
  std::filesystem::path prefix;
  for (const auto& part : std::filesystem::path(path)) {
    prefix /= part;
    if (part == "/" || part.empty()) continue;
    if (::mkdir(prefix.c_str(), 0700) == 0) continue;
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    throw make_error(ErrorCategory::io, "cannot create the swap directory {}: {} at {}", path,
                     errno_text(err == EEXIST ? ENOTDIR : err), prefix.string());
  }
}

}  // namespace

namespace {

// A directory descriptor, closed on every path.
class DirFd {
 public:
  explicit DirFd(int fd) : fd_(fd) {}
  ~DirFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Opens `name` inside `parent` as a directory, never through a link, and checks who may write
// to it: `ours` requires it to belong to this user; otherwise it may be shared when the sticky
// bit keeps others from renaming what is ours in it.
int open_real_directory(int parent, const std::string& name, const std::string& path, bool ours) {
  const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) &&
        ::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
      throw make_error(ErrorCategory::io,
                       "swap directory {} is a symbolic link: refusing to follow it (swap files "
                       "would land wherever it points); remove the link",
                       path);
    }
    throw make_error(ErrorCategory::io, "cannot open the swap directory {}: {}", path,
                     errno_text(err));
  }
  struct stat st {};
  ::fstat(fd, &st);
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  if (ours && st.st_uid != ::geteuid()) {
    ::close(fd);
    throw make_error(ErrorCategory::io,
                     "swap directory {} belongs to user {}, not to this process's user {}: "
                     "another user made it; use another nvme_path",
                     path, st.st_uid, ::geteuid());
  }
  if (!ours && others_write && (st.st_mode & S_ISVTX) == 0 && st.st_uid != ::geteuid()) {
    ::close(fd);
    throw make_error(ErrorCategory::io,
                     "swap directory {} can be written by other users and has no sticky bit, so "
                     "they could replace what zero makes in it; make it 0700 or 1777",
                     path);
  }
  return fd;
}

// mkdirat that accepts an existing entry (checked by open_real_directory next).
void make_directory_at(int parent, const std::string& name, const std::string& path) {
  if (::mkdirat(parent, name.c_str(), 0700) == 0 || errno == EEXIST) return;
  throw make_error(ErrorCategory::io, "cannot create the swap directory {}: {}", path,
                   errno_text(errno));
}

}  // namespace

SwapDirectory::SwapDirectory(std::string nvme_path, std::string job_id, int rank)
    : nvme_path_(std::move(nvme_path)) {
  if (nvme_path_.empty()) {
    throw make_error(ErrorCategory::usage, "the swap directory needs an nvme_path (none given)");
  }
  check_component("job id", job_id);
  if (rank < 0) throw make_error(ErrorCategory::usage, "swap directory: rank {} < 0", rank);
  const std::filesystem::path root = std::filesystem::path(nvme_path_) / "zero";
  const std::filesystem::path job = root / job_id;
  const std::string rank_name = "rank" + std::to_string(rank);
  job_path_ = job.lexically_normal().string();
  path_ = (job / rank_name).lexically_normal().string();

  // nvme_path is the user's to choose, links and all; below it nothing is followed.
  make_directories(nvme_path_);
  const DirFd base(::open(nvme_path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (base.get() < 0) {
    throw make_error(ErrorCategory::io, "cannot open nvme_path {}: {}", nvme_path_,
                     errno_text(errno));
  }
  make_directory_at(base.get(), "zero", root.string());
  const DirFd zero(open_real_directory(base.get(), "zero", root.string(), /*ours=*/false));
  make_directory_at(zero.get(), job_id, job_path_);
  const DirFd job_fd(open_real_directory(zero.get(), job_id, job_path_, /*ours=*/true));
  if (::mkdirat(job_fd.get(), rank_name.c_str(), 0700) != 0) {
    const int err = errno;
    throw make_error(ErrorCategory::io, "cannot create the swap directory {}: {}{}", path_,
                     errno_text(err),
                     err == EEXIST ? " (left by an earlier run with the same job id: remove it, "
                                     "or use another job id)"
                                   : "");
  }
  cleanup_ = std::make_unique<SwapCleanup>(path_, job_path_, rank);
  try {
    const DirFd rank_fd(open_real_directory(job_fd.get(), rank_name, path_, /*ours=*/true));
    write_owner_record(rank_fd.get(), path_, rank);
    cleanup_->add_file("owner.json");
    files_.push_back(path_ + "/owner.json");
  } catch (...) {
    cleanup_.reset();
    ::rmdir(path_.c_str());
    ::rmdir(job_path_.c_str());
    throw;
  }
  if (rank == 0) {
    const std::string stale = describe_stale_jobs(find_swap_jobs(nvme_path_), nvme_path_);
    if (!stale.empty()) log::warn("{}", stale);
  }
}

SwapDirectory::~SwapDirectory() {
  if (keep_) return;
  for (const std::string& file : files_) ::unlink(file.c_str());
  // Both fail, harmlessly, when something else lives there: only what we created goes.
  ::rmdir(path_.c_str());
  ::rmdir(job_path_.c_str());
}

void SwapDirectory::keep(std::string_view why) {
  if (keep_) return;
  keep_ = true;
  if (cleanup_) cleanup_->keep();
  log::warn(
      "swap files left for inspection in {} ({}); remove them when done (zero-swap clean "
      "{})",
      path_, why, nvme_path_);
}

std::unique_ptr<SwapFile> SwapDirectory::create(std::string_view name, std::uint64_t bytes,
                                                std::string_view setting) {
  check_component("file name", name);
  const std::string path = (std::filesystem::path(path_) / name).string();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    throw make_error(ErrorCategory::io,
                     "swap file {} already exists{}: zero never overwrites or follows one; remove "
                     "it (or the directory)",
                     path, S_ISLNK(st.st_mode) ? " as a symbolic link" : "");
  }
  // Refused here, before fallocate: a file system fills itself up to the last block before
  // fallocate gives up, which would starve every other writer of the disk meanwhile.
  if (const auto space = disk_space(path_)) {
    const std::uint64_t free = space->free;
    if (bytes > free) {
      const std::string stale = describe_stale_jobs(find_swap_jobs(nvme_path_), nvme_path_);
      throw make_error(ErrorCategory::io,
                       "{}: {} has {} free; swap file {} needs {} ({} bytes): free space there, "
                       "point {} at a disk with more room, or offload less to NVMe{}{}",
                       setting, path_, format_bytes(free), name, format_bytes(bytes), bytes,
                       setting, stale.empty() ? "" : ". ", stale);
    }
  }
  try {
    if (cleanup_) cleanup_->add_file(name);
    auto file = std::make_unique<SwapFile>(path, bytes);
    files_.push_back(path);
    return file;
  } catch (const Error& error) {
    ::unlink(path.c_str());  // it did not exist before; a partial reservation must not stay
    throw make_error(error.category(), "{}: {}", setting, error.what());
  }
}

}  // namespace zero::offload
