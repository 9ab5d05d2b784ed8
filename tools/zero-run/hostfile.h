// Reading an Open MPI hostfile, only as far as zero-run needs it: the hosts it names and the
// slots it gives them, to work out how many ranks land on each node and to name the nodes.
#pragma once

#include <string>
#include <vector>

namespace zero::run {

struct Hostfile {
  std::string path;
  int hosts = 0;      // distinct host names
  int max_slots = 0;  // the largest slots=N given to one host (summed over its lines); 0: none
  std::vector<std::string> names;  // the distinct hosts, in the order the file first names them
};

// Lines are "HOST [slots=N] [other Open MPI keys]"; '#' starts a comment. Throws a usage
// zero::Error when the file cannot be read, names no host, or has a malformed slots value.
Hostfile read_hostfile(const std::string& path);

}  // namespace zero::run
