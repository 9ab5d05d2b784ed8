#include "device/memory_probe.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/bytes.h"

namespace zero::memory_probe {
namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The leading unsigned number of `text` (after blanks); nullopt for none ("max", empty).
std::optional<std::uint64_t> leading_number(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> read_number(const std::string& path) {
  const auto text = read_text(path);
  return text ? leading_number(*text) : std::nullopt;
}

// The value of `key` in a "key value" file such as memory.stat.
std::optional<std::uint64_t> stat_value(const std::string& path, std::string_view key) {
  const auto text = read_text(path);
  if (!text) return std::nullopt;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ' ') {
      return leading_number(std::string_view(line).substr(key.size() + 1));
    }
  }
  return std::nullopt;
}

// MemAvailable from meminfo, in bytes.
std::optional<std::uint64_t> mem_available(const std::string& root) {
  const auto kib = stat_value(root + "/proc/meminfo", "MemAvailable:");
  if (!kib) return std::nullopt;
  return *kib * 1024;
}

// The cgroup path of this process for the v2 hierarchy ("0::/path") or the v1 memory
// controller ("N:...memory...:/path"), from /proc/self/cgroup.
struct CgroupPaths {
  std::optional<std::string> v2, v1_memory;
};

CgroupPaths cgroup_paths(const std::string& root) {
  CgroupPaths paths;
  const auto text = read_text(root + "/proc/self/cgroup");
  if (!text) return paths;
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) paths.v2 = path;
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');) {
      if (name == "memory") paths.v1_memory = path;
    }
  }
  return paths;
}

// The directories from `base` + `path` up to `base`, deepest first; only `base` itself when
// `path`'s directory is not there (a cgroup namespace shows the process's cgroup as the root).
std::vector<std::string> levels(const std::string& base, const std::string& path) {
  std::vector<std::string> dirs;
  std::filesystem::path dir = std::filesystem::path(base + path).lexically_normal();
  std::error_code error;
  if (std::filesystem::is_directory(dir, error)) {
    const std::filesystem::path top = std::filesystem::path(base).lexically_normal();
    while (dir.string().size() > top.string().size()) {
      dirs.push_back(dir.string());
      dir = dir.parent_path();
    }
  }
  dirs.push_back(base);
  return dirs;
}

struct Limit {
  std::uint64_t available;
  std::string where;
};

// Over every level of the process's cgroup that sets a memory limit: the limit less the usage
// that cannot be reclaimed (less the inactive page cache), the smallest of them.
std::optional<Limit> cgroup_limit(const std::string& root) {
  const CgroupPaths paths = cgroup_paths(root);
  std::optional<Limit> best;
  const auto consider = [&](std::uint64_t limit, std::uint64_t usage, std::uint64_t inactive,
                            const std::string& dir, const std::string& base) {
    const std::uint64_t used = usage - std::min(usage, inactive);
    const std::uint64_t available = limit - std::min(limit, used);
    if (!best || available < best->available) {
      const std::string relative = dir.size() > base.size() ? dir.substr(base.size()) : "/";
      best = Limit{available, fmt::format("cgroup {}: its limit {} less {} in use", relative,
                                          format_bytes(limit), format_bytes(used))};
    }
  };
  // No limit is near this (v1 writes about 2^63 for none).
  constexpr std::uint64_t kUnlimited = std::uint64_t{1} << 62;
  if (paths.v2) {
    const std::string base = root + "/sys/fs/cgroup";
    for (const std::string& dir : levels(base, *paths.v2)) {
      const auto limit = read_number(dir + "/memory.max");  // "max": none
      const auto usage = read_number(dir + "/memory.current");
      if (!limit || !usage || *limit >= kUnlimited) continue;
      consider(*limit, *usage, stat_value(dir + "/memory.stat", "inactive_file").value_or(0), dir,
               base);
    }
  }
  if (paths.v1_memory) {
    const std::string base = root + "/sys/fs/cgroup/memory";
    for (const std::string& dir : levels(base, *paths.v1_memory)) {
      const auto limit = read_number(dir + "/memory.limit_in_bytes");
      const auto usage = read_number(dir + "/memory.usage_in_bytes");
      if (!limit || !usage || *limit >= kUnlimited) continue;
      consider(*limit, *usage, stat_value(dir + "/memory.stat", "total_inactive_file").value_or(0),
               dir, base);
    }
  }
  return best;
}

}  // namespace

std::optional<HostAvailable> host_available(const std::string& root) {
  const auto available = mem_available(root);
  if (!available) return std::nullopt;
  HostAvailable result{*available, "MemAvailable in /proc/meminfo"};
  if (const auto limit = cgroup_limit(root); limit && limit->available < result.bytes) {
    result = HostAvailable{limit->available, limit->where};
  }
  return result;
}

std::optional<std::uint64_t> memlock_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return std::nullopt;
  }
  return static_cast<std::uint64_t>(limit.rlim_cur);
}

std::string machine_id(const std::string& root) {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) name[0] = '\0';
  std::string boot = read_text(root + "/proc/sys/kernel/random/boot_id").value_or("");
  while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  return fmt::format("{} ({})", name[0] != '\0' ? name : "unnamed host",
                     boot.empty() ? "no boot id" : boot);
}

}  // namespace zero::memory_probe
