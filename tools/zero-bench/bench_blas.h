// zero-bench blas: what runs the CPU layers' matrix products (the OpenBLAS file, its version,
// threading and kernel set, who chose the kernels, the CPU) and how fast each product of a
// GPT-2 block and its head runs there, forward and backward, in GFLOP/s. Run it under each
// OPENBLAS_CORETYPE the CPU can run to compare kernel sets (bench/blas.sh).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zero::bench {

struct BlasBenchOptions {
  bool info = false;  // only say what runs
  int rows = 256;     // N: micro-batch x sequence
  int channels = 768;
  int vocab = 50257;
  std::vector<int> threads = {1, 2};
  int repeats = 5;
  std::string json;  // JSON lines file, empty: none
};

CLI::App* add_blas_command(CLI::App& app, BlasBenchOptions& options);

// Returns the exit status; throws zero::Error for usage errors, std::runtime_error when the
// BLAS cannot be loaded.
int run_blas_bench(const BlasBenchOptions& options);

}  // namespace zero::bench
