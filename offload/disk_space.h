// The free space of the file system a path is or would be on, for checking before any file is
// made that the swap files fit (the engine's init) and for planning (zero-mem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zero::offload {

struct DiskSpace {
  std::uint64_t free = 0;  // bytes an unprivileged writer may still take
  std::string filesystem;  // names the file system on this machine ("device 259:1")
  std::string probed;      // the directory asked: `path` or its nearest existing ancestor
};

// For `path` or, where it does not exist yet, its nearest existing ancestor (relative paths
// from the working directory); nullopt when none can be asked.
std::optional<DiskSpace> disk_space(const std::string& path);

}  // namespace zero::offload
