// Counts the hosts and slots of an Open MPI hostfile (see hostfile.h).
#include "tools/zero-run/hostfile.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "base/error.h"

namespace zero::run {

Hostfile read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw make_error(ErrorCategory::usage, "--hostfile {}: cannot read the file", path);
  std::map<std::string, int> slots_per_host;
  std::vector<std::string> names;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    if (!slots_per_host.contains(host)) names.push_back(host);
    int& slots = slots_per_host[host];
    while (words >> word) {
      if (!word.starts_with("slots=")) continue;
      const std::string_view value = std::string_view(word).substr(6);
      int parsed = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
      if (error != std::errc() || end != value.data() + value.size() || parsed < 1) {
        throw make_error(ErrorCategory::usage,
                         "--hostfile {}:{}: '{}' is not a valid slot count (want slots=N, N >= 1)",
                         path, number, word);
      }
      slots += parsed;  // Open MPI adds up the slots of a host named on several lines
    }
  }
  if (slots_per_host.empty()) {
    throw make_error(ErrorCategory::usage, "--hostfile {}: names no host", path);
  }
  Hostfile hostfile{path, static_cast<int>(slots_per_host.size()), 0, std::move(names)};
  for (const auto& [host, slots] : slots_per_host) {
    hostfile.max_slots = std::max(hostfile.max_slots, slots);
  }
  return hostfile;
}

}  // namespace zero::run
