// zero-bench speculate: offload_optimizer.super_offload's overlapped step against the step after
// backward, on the asynchronous CPU device with a model whose compute is a timed stand-in (each
// hook sleeps), so that compute and the CPU optimizer do not compete for the cores: stage 3 on
// one rank, bf16, AdamW, one parameter per module, step groups and buckets of one module. For each
// mode it reports the wall time of a whole step (forward, backward and the engine's step), the
// compute alone (the sleeps) and the engine's step call. Two ratios: the step against
// max(compute, the CPU optimizer's step alone), the latter the step call without speculation
// (the target: at most 1.1 with speculation); and against max(forward + backward as the
// run without speculation measures them, hooks' own work included, the step alone), which
// isolates what speculation can hide, the step after backward.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace zero::bench {

struct SpeculateBenchOptions {
  double params = 20e6;     // trainable elements, split evenly over the modules
  int modules = 8;          // one parameter each
  double bucket = 0;        // elements per reduction bucket and step group; 0: one module's
  double compute_ms = 0;    // forward + backward stand-in per step; 0: the optimizer's time
  int threads = 2;          // the engine's optimizer threads (before cpuadam_cores_perc)
  double cores_perc = 1.0;  // offload_optimizer.cpuadam_cores_perc
  int steps = 5;            // the first is a warm-up, the median of the rest counts
  std::string precision = "bf16";
  bool breakdown = false;  // the engine's wall_clock_breakdown after each measured step
  std::string json;        // JSON lines file, empty: none
};

CLI::App* add_speculate_command(CLI::App& app, SpeculateBenchOptions& options);

// Returns the exit status; throws zero::Error (usage errors for bad values).
int run_speculate_bench(const SpeculateBenchOptions& options);

}  // namespace zero::bench
