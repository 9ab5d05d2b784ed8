// zero-bench adam: elements per second of the fused CPU optimizer step per ISA and thread count,
// each variant next to its memory-bandwidth floor (the same loads and stores with trivial
// arithmetic), the fused half copy-out against a step followed by a separate cast pass, and the
// step from one copy of the state into another (super_offload's speculated step where a verdict
// can undo it) against the step in place.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace zero::bench {

struct AdamBenchOptions {
  double elements = 100e6;
  std::vector<int> threads = {1, 2};
  std::string isa = "best";  // best, scalar, avx2, avx512, all
  std::vector<std::string> variants = {"fp32", "bf16", "fp16", "bf16-state"};
  std::string optimizer = "adamw";
  int repeats = 5;
  std::string json;  // JSON lines file, empty: none
};

CLI::App* add_adam_command(CLI::App& app, AdamBenchOptions& options);

// Returns the exit status; throws zero::Error (usage errors for bad values).
int run_adam_bench(const AdamBenchOptions& options);

}  // namespace zero::bench
