// What this machine has free for a new reservation: host memory (the kernel's MemAvailable,
// lowered to what the process's cgroups still allow), the limit on page-locked memory, and a
// name for the machine, so that ranks on one machine can add up what they will take from it.
// Read from /proc and /sys/fs/cgroup; `root` (a directory standing in for "/") lets tests give
// their own files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace zero::memory_probe {

struct HostAvailable {
  std::uint64_t bytes = 0;  // what a new reservation may take
  std::string source;       // where the figure comes from, e.g. "MemAvailable" or "cgroup /a"
};

// MemAvailable, or less where a cgroup of this process (v2: memory.max over memory.current,
// every level up to the root; v1: memory.limit_in_bytes over memory.usage_in_bytes) allows
// less. nullopt when /proc/meminfo has no MemAvailable.
std::optional<HostAvailable> host_available(const std::string& root = "");

// The limit on page-locked memory (RLIMIT_MEMLOCK); nullopt when unlimited.
std::optional<std::uint64_t> memlock_limit();

// This machine's name for grouping ranks: the host name and the kernel's boot id.
std::string machine_id(const std::string& root = "");

}  // namespace zero::memory_probe
