// zero-bench offload: the NVMe-offloaded optimizer step (engine/state/optimizer_swap: reads, the
// fused CPU Adam and writes of each sub-group, pipelined through pinned buffers) next to, in the
// same run, the same reads and writes with no compute and the Adam alone on data in memory. The
// target is a step within 1.15 x max(I/O, Adam): the pipeline hides the shorter of the two.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace zero::bench {

struct OffloadBenchOptions {
  std::string path;         // a directory on the disk to swap to
  double elements = 50e6;   // optimizer state elements (one rank's owned shard)
  double sub_group = 10e6;  // sub_group_size
  int buffers = 4;          // offload_optimizer.buffer_count
  int threads = 1;          // CPU optimizer threads
  int repeats = 3;
  std::string backend = "automatic";  // automatic, uring, threads
  int queue_depth = 8;                // aio.queue_depth
  double block_size = 1048576;        // aio.block_size
  int parallelism = 1;                // aio.intra_op_parallelism
  std::string json;                   // JSON lines file, empty: none
};

CLI::App* add_offload_command(CLI::App& app, OffloadBenchOptions& options);

// Returns the exit status; throws zero::Error (usage errors for bad values).
int run_offload_bench(const OffloadBenchOptions& options);

}  // namespace zero::bench
