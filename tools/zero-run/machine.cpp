// CPU counts, PATH lookup and zero-run's own path (see machine.h).
#include "tools/zero-run/machine.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::run {

Cpus available_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int count = online > 0 ? static_cast<int>(online) : 1;
    return {count, count};
  }
  Cpus cpus{CPU_COUNT(&mask), 0};
  // A core is identified by the list of hardware threads it holds; SMT siblings share it.
  std::set<std::string> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    std::ifstream in(
        fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", cpu));
    std::string siblings;
    if (!(in >> siblings)) return {cpus.logical, cpus.logical};
    cores.insert(siblings);
  }
  cpus.physical = cores.empty() ? cpus.logical : static_cast<int>(cores.size());
  return cpus;
}

namespace {

// A directory is "executable" to access(); exec needs a regular file.
bool is_executable_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> find_program(const std::string& name) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return name;
    return std::nullopt;
  }
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    const std::string candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, name);
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(colon + 1);
  }
}

std::string own_path() {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string("zero-run") : path.string();
}

std::string deepspeed_shim(const std::string& own) {
  const std::filesystem::path folder = std::filesystem::path(own).parent_path() / "as-deepspeed";
  std::error_code error;
  if (!std::filesystem::is_regular_file(folder / "deepspeed" / "__init__.py", error)) {
    throw make_error(ErrorCategory::usage,
                     "--as-deepspeed: {} has no deepspeed/__init__.py; zero-run finds it beside "
                     "itself, where the build copies python/as-deepspeed (rebuild zero-run)",
                     folder.string());
  }
  return folder.string();
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  int port = 29500;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace zero::run
