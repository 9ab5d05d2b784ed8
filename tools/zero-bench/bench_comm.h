// zero-bench comm: algorithm and bus bandwidth of the communicator's collectives per size, the
// way nccl-tests reports them, and (--overlap) how much of a collective hides behind compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zero::bench {

struct CommBenchOptions {
  std::string backend = "auto";   // auto, local, mpi, nccl
  std::string progress = "auto";  // auto, thread, poll
  std::string device = "auto";    // auto, cpu, cuda
  std::vector<std::string> ops = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  std::string dtype = "fp32";
  std::string op = "sum";
  std::string min_bytes = "1K";
  std::string max_bytes = "256M";
  int step_factor = 2;
  int warmup = 5;
  int iters = 0;               // 0: adaptive
  double time_per_size = 0.2;  // seconds, for adaptive iterations
  bool check = false;
  std::string json;  // JSON lines file, empty: none
  bool overlap = false;
  std::vector<std::string> overlap_sizes = {"1M", "16M", "64M"};
  int poll_every = 0;  // chunks of compute between work.test() calls; 0: never
  double timeout_s = 600;
  // Bytes each rank sent per call, read from the network devices of its node (/proc/net/dev:
  // the loopback device within the node, the others across nodes) around the timed calls.
  bool net_bytes = false;
};

// Adds the `comm` subcommand and its options to `app`; the parsed values land in `options`.
CLI::App* add_comm_command(CLI::App& app, CommBenchOptions& options);

// Runs the benchmark (collective over the job: every rank calls it). Returns the exit status;
// throws zero::Error (usage errors for bad values).
int run_comm_bench(const CommBenchOptions& options);

// "1K", "256M", "1G", "4096", "64KiB": binary multiples. Throws a usage Error naming `what`.
std::uint64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace zero::bench
