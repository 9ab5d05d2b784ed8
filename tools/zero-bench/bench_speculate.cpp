#include "tools/zero-bench/bench_speculate.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/timer.h"
#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"
#include "tools/zero-bench/bench_stats.h"

namespace zero::bench {
namespace {

// One mode's figures, in seconds: the median over the measured steps.
struct Figures {
  double step = 0;     // first pre_forward to the end of the engine's step
  double compute = 0;  // the sleeps
  double call = 0;     // the engine's step call
};

std::string config_text(const SpeculateBenchOptions& o, bool speculate, std::size_t bucket) {
  const std::string precision =
      o.precision == "fp32" ? "" : fmt::format(R"("{}": {{"enabled": true}},)", o.precision);
  return fmt::format(R"({{
    "train_micro_batch_size_per_gpu": 1, "wall_clock_breakdown": {}, "steps_per_print": 1, {}
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-4}}}},
    "zero_optimization": {{"stage": 3, "sub_group_size": {}, "reduce_bucket_size": {},
      "allgather_bucket_size": {}, "overlap_comm": true,
      "offload_optimizer": {{"device": "cpu", "pin_memory": true, "super_offload": {},
                            "cpuadam_cores_perc": {}}}}}}})",
                     o.breakdown ? "true" : "false", precision, bucket, bucket, bucket,
                     speculate ? "true" : "false", o.cores_perc);
}

void sleep_seconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Trains `steps` steps of the stand-in model; `compute` seconds of sleeps per step, a third in
// forward and two thirds in backward, spread over the modules.
Figures run_mode(const SpeculateBenchOptions& o, bool speculate, double compute) {
  const auto per_module = static_cast<std::size_t>(o.params / o.modules);
  auto device = create_cpu_device(CpuDeviceMode::async);
  comm::CommOptions comm_options;
  comm_options.device = device.get();
  auto comm = comm::make_local_communicator(comm_options);
  engine::EngineOptions engine_options;
  engine_options.optimizer_threads = o.threads;
  const auto bucket = o.bucket > 0 ? static_cast<std::size_t>(o.bucket) : per_module;
  engine::Engine engine(config::read_config_text(config_text(o, speculate, bucket), {}),
                        std::move(device), std::move(comm), engine_options);
  for (int m = 0; m < o.modules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    engine.add_param(fmt::format("block{}.weight", m), {static_cast<std::int64_t>(per_module)},
                     true, 0, {module});
  }
  engine.init();
  const double forward = compute / 3 / o.modules;
  const double backward = 2 * compute / 3 / o.modules;
  std::vector<double> steps, computes, calls;
  for (int s = 0; s < o.steps; ++s) {
    Timer whole;
    double slept = 0;
    for (int m = 0; m < o.modules; ++m) {
      engine.pre_forward(static_cast<std::size_t>(m));
      Timer t;
      sleep_seconds(forward);
      slept += t.seconds();
      engine.post_forward(static_cast<std::size_t>(m));
    }
    for (int m = o.modules - 1; m >= 0; --m) {
      engine.pre_backward(static_cast<std::size_t>(m));
      Timer t;
      sleep_seconds(backward);
      slept += t.seconds();
      engine.post_backward(static_cast<std::size_t>(m));
    }
    Timer call;
    engine.step();
    if (s == 0) continue;  // warm-up
    calls.push_back(call.seconds());
    steps.push_back(whole.seconds());
    computes.push_back(slept);
  }
  return {median(steps), median(computes), median(calls)};
}

}  // namespace

CLI::App* add_speculate_command(CLI::App& app, SpeculateBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "speculate",
      "offload_optimizer.super_offload: the step with the offloaded optimizer overlapped with "
      "backward against the step after it, with a timed stand-in for compute (target: step <= "
      "1.1 x max(compute, CPU optimizer))");
  command->add_option("--params", options.params, "Trainable elements (default 20e6)");
  command->add_option("--modules", options.modules, "Modules, one parameter each (default 8)");
  command->add_option("--bucket", options.bucket,
                      "Elements per reduction bucket, all-gather bucket and step group "
                      "(sub_group_size); default one module's");
  command->add_option("--compute-ms", options.compute_ms,
                      "Forward + backward stand-in per step, ms (default: the optimizer's step "
                      "time, measured first)");
  command->add_option("--threads", options.threads, "Optimizer threads (default 2)");
  command->add_option("--cores-perc", options.cores_perc,
                      "offload_optimizer.cpuadam_cores_perc (default 1.0)");
  command->add_option("--steps", options.steps,
                      "Steps per mode; the first is a warm-up (default 5)");
  command->add_option("--precision", options.precision, "fp32, bf16 or fp16 (default bf16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  command->add_flag("--breakdown", options.breakdown,
                    "Print the engine's wall_clock_breakdown after every step of every mode");
  command->add_option("--json", options.json, "Append one JSON line to FILE");
  return command;
}

int run_speculate_bench(const SpeculateBenchOptions& options) {
  if (options.params < options.modules || options.modules < 1 || options.steps < 2 ||
      options.threads < 1 || options.compute_ms < 0) {
    throw make_error(ErrorCategory::usage,
                     "--params must be at least --modules, --modules and --threads positive, "
                     "--steps at least 2 and --compute-ms not negative");
  }
  // The optimizer's step alone: the step call without speculation, with no compute.
  const Figures alone = run_mode(options, false, 0.0);
  const double compute = options.compute_ms > 0 ? options.compute_ms / 1e3 : alone.call;
  const Figures after = run_mode(options, false, compute);
  const Figures overlapped = run_mode(options, true, compute);
  const double bound = std::max(compute, alone.call);
  // Forward and backward as they run anyway (the hooks' gathers and reductions included): the
  // run without speculation's step less its step call.
  const double passes = after.step - after.call;
  const double pass_bound = std::max(passes, alone.call);
  const std::size_t bucket = options.bucket > 0
                                 ? static_cast<std::size_t>(options.bucket)
                                 : static_cast<std::size_t>(options.params / options.modules);
  std::cout << fmt::format(
      "{:.0f} elements in {} modules, buckets and step groups of {} elements, {}, AdamW on {} "
      "thread(s) x cpuadam_cores_perc {}; compute stand-in {:.1f} ms, forward + backward {:.1f} "
      "ms, the CPU optimizer's step alone {:.1f} ms\n",
      options.params, options.modules, bucket, options.precision, options.threads,
      options.cores_perc, compute * 1e3, passes * 1e3, alone.call * 1e3);
  for (const auto& [name, f] :
       {std::pair{"after backward", after}, {"super_offload", overlapped}}) {
    std::cout << fmt::format(
        "  {:<15} step {:8.1f} ms (compute {:7.1f}, engine step call {:7.1f}) = {:.3f} x "
        "max(compute, optimizer), {:.3f} x max(forward + backward, optimizer)\n",
        name, f.step * 1e3, f.compute * 1e3, f.call * 1e3, f.step / bound, f.step / pass_bound);
  }
  if (!options.json.empty()) {
    nlohmann::json line = {{"bench", "speculate"},
                           {"params", options.params},
                           {"modules", options.modules},
                           {"bucket", bucket},
                           {"precision", options.precision},
                           {"threads", options.threads},
                           {"cores_perc", options.cores_perc},
                           {"compute_ms", compute * 1e3},
                           {"passes_ms", passes * 1e3},
                           {"optimizer_alone_ms", alone.call * 1e3},
                           {"after_step_ms", after.step * 1e3},
                           {"after_ratio", after.step / bound},
                           {"super_offload_step_ms", overlapped.step * 1e3},
                           {"super_offload_call_ms", overlapped.call * 1e3},
                           {"super_offload_ratio", overlapped.step / bound},
                           {"super_offload_passes_ratio", overlapped.step / pass_bound}};
    std::ofstream(options.json, std::ios::app) << line.dump() << "\n";
  }
  return 0;
}

}  // namespace zero::bench
