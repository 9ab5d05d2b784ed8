// SwapDirectory: <nvme_path>/zero/<job id>/rank<r>/, its preallocated files, their removal.
#include <cerrno>
#include <exception>
#include <filesystem>

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "offload/swap.h"
#include "base/bytes.h"

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

SwapDirectory::SwapDirectory(std::string nvme_path, std::string job_id, int rank) {
  if (nvme_path.empty()) {
    throw make_error(ErrorCategory::usage, "the swap directory needs an nvme_path (none given)");
  }
  check_component("job id", job_id);
  if (rank < 0) throw make_error(ErrorCategory::usage, "swap directory: rank {} < 0", rank);
  const std::filesystem::path job = std::filesystem::path(nvme_path) / "zero" / job_id;
  job_path_ = job.lexically_normal().string();
  path_ = (job / ("rank" + std::to_string(rank))).lexically_normal().string();
  make_directories(path_);
  uncaught_exceptions_ = std::uncaught_exceptions();
}

SwapDirectory::~SwapDirectory() {
  if (!keep_ && std::uncaught_exceptions() > uncaught_exceptions_) {
    keep("destroyed while an exception unwinds the stack: a failure");
  }
  if (keep_) return;
  for (const std::string& file : files_) ::unlink(file.c_str());
  // Both fail, harmlessly, when something else lives there: only what we created goes.
  ::rmdir(path_.c_str());
  ::rmdir(job_path_.c_str());
}

void SwapDirectory::keep(std::string_view why) {
  keep_ = true;
  log::warn("swap files left for inspection in {} ({}); remove the directory when done", path_,
            why);
}

std::unique_ptr<SwapFile> SwapDirectory::create(std::string_view name, std::uint64_t bytes,
                                                std::string_view setting) {
  check_component("file name", name);
  const std::string path = (std::filesystem::path(path_) / name).string();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    throw make_error(ErrorCategory::io,
                     "swap file {} already exists, left by an earlier run with the same job id; "
                     "remove it (or the directory) or use another job id",
                     path);
  }
  // Refused here, before fallocate: a file system fills itself up to the last block before
  // fallocate gives up, which would starve every other writer of the disk meanwhile.
  struct statvfs vfs {};
  if (::statvfs(path_.c_str(), &vfs) == 0) {
    const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (bytes > free) {
      throw make_error(ErrorCategory::io,
                       "{}: {} has {} free; swap file {} needs {} ({} bytes): free space there, "
                       "point {} at a disk with more room, or offload less to NVMe",
                       setting, path_, format_bytes(free), name, format_bytes(bytes),
                       bytes, setting);
    }
  }
  try {
    auto file = std::make_unique<SwapFile>(path, bytes);
    files_.push_back(path);
    return file;
  } catch (const Error& error) {
    ::unlink(path.c_str());  // it did not exist before; a partial reservation must not stay
    throw make_error(error.category(), "{}: {}", setting, error.what());
  }
}

}  // namespace zero::offload
