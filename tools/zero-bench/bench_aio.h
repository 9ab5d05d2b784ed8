// zero-bench aio: read and write GB/s of the offload engine's direct I/O per block size and
// queue depth on one path, next to fio's io_uring engine on the same file, sizes and depths.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zero::bench {

struct AioBenchOptions {
  std::string path;             // a directory (a scratch file is made there) or a new file
  std::string size = "256M";    // bytes moved per run, and the file's size
  int repeats = 3;              // runs per measurement (median), ours and fio's taking turns
  double settle_seconds = 0.5;  // pause before every run, ours and fio's alike
  std::vector<std::string> block_sizes = {"128K", "1M", "4M"};
  std::vector<int> queue_depths = {1, 8, 32};
  bool full = false;              // every block size 128K..4M and depth 1..64 (powers of two)
  std::string backend = "uring";  // uring, threads
  int parallelism = 1;            // rings (or thread groups)
  std::string register_buffers = "yes";  // yes, no
  std::string fio = "auto";              // auto (fio on PATH), no, or the fio program
  bool each_run = false;                 // print every run, not only the medians
  std::string json;                      // JSON lines file, empty: none
};

CLI::App* add_aio_command(CLI::App& app, AioBenchOptions& options);

// Returns the exit status; throws zero::Error (usage errors for bad values).
int run_aio_bench(const AioBenchOptions& options);

}  // namespace zero::bench
