#include "offload/disk_space.h"

#include <filesystem>

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>

namespace zero::offload {

std::optional<DiskSpace> disk_space(const std::string& path) {
  std::error_code error;
  std::filesystem::path dir = std::filesystem::absolute(path.empty() ? "." : path, error);
  if (error) return std::nullopt;
  dir = dir.lexically_normal();
  while (true) {
    struct stat st {};
    struct statvfs vfs {};
    if (::stat(dir.c_str(), &st) == 0 && ::statvfs(dir.c_str(), &vfs) == 0) {
      return DiskSpace{static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize,
                       fmt::format("device {}:{}", major(st.st_dev), minor(st.st_dev)),
                       dir.string()};
    }
    if (!dir.has_parent_path() || dir.parent_path() == dir) return std::nullopt;
    dir = dir.parent_path();
  }
}

}  // namespace zero::offload
