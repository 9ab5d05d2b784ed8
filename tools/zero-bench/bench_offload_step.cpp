#include "tools/zero-bench/bench_offload_step.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "base/error.h"
#include "base/timer.h"
#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "device/trace.h"
#include "engine/engine.h"
#include "optim/optimizer.h"
#include "tools/zero-bench/bench_stats.h"

namespace zero::bench {
namespace {

constexpr const char* kComputeLane = "compute";
constexpr int kModeWarmup = 3;  // unmeasured steps before a mode's first block
// Reduction buckets (and step groups) a step by default: gpt2-1.5b's 1.56B parameters in
// gpu-check's reduce_bucket_size of 5e7.
constexpr double kDefaultBuckets = 32;

// One mode's figures for its median step, in seconds, and the trace of its last step.
struct StepFigures {
  double step = 0;     // first pre_forward to the end of the engine's step
  double call = 0;     // the engine's step call
  double compute = 0;  // the stand-in's tasks on the compute stream
  double d2h = 0;      // the link's busy time, device to host
  double h2d = 0;      // host to device
  double adds = 0;     // the engine's host adds of reduced gradients
  double cpu = 0;      // the process's CPU time (user and system, every thread) in the step
  std::vector<Trace::Span> spans;
};

// The stand-in model's fixed parts, and the floor and bound they give with the optimizer alone
// as measured beside a block of steps.
struct StepModel {
  double compute = 0;  // one micro-step's forward and backward
  double down = 0;     // a step's gradients down the link
  double up = 0;       // its parameters up
  int accumulation = 1;

  // max(compute, CPU optimizer, each link direction).
  double floor(double alone) const { return std::max({accumulation * compute, alone, down, up}); }
  // What the mode's own order allows an exact step, the link aside: after backward, the
  // window's compute then the optimizer; speculated, the optimizer hidden only beside the
  // window's last backward and the next forward (one micro-step's compute), which need it.
  double bound(const std::string& mode, double alone) const {
    const double ordered = mode.starts_with("super_offload")
                               ? (accumulation - 1) * compute + std::max(compute, alone)
                               : accumulation * compute + alone;
    return std::max({ordered, down, up});
  }
};

// A mode's figures: its median step, and its ratios paired block by block with the optimizer
// alone measured right after each block (this machine's speed drifts by a fifth within
// seconds, so a floor measured apart from the steps moves the ratio by as much).
struct ModeFigures {
  StepFigures median;      // the median measured step
  double alone = 0;        // the optimizer alone: the median of the blocks' measurements
  double ratio = 0;        // the median of the blocks' median step over their floor
  double bound_ratio = 0;  // the same over the mode's order's bound
  // Each block's, in the order run: its median step and the optimizer alone beside it.
  std::vector<std::pair<double, double>> blocks;
};

// The process's CPU time so far (user and system, all threads), in seconds.
double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::string offload_step_config(const OffloadStepBenchOptions& o, const std::string& mode,
                                std::size_t bucket) {
  // pin_memory unset: pinned beside a GPU (the timed device stands in for one).
  const std::string pin = mode == "pageable" ? R"(, "pin_memory": false)" : "";
  const bool speculate = mode.starts_with("super_offload");
  // Without bf16's overflow check (and clipping) nothing can undo a speculated step: it writes
  // the state in place, with no second copy.
  const char* check = mode == "super_offload_unchecked" ? "false" : "true";
  // super_offload's step groups as the engine sizes them without a sub_group_size (a bucket's),
  // as gpu-check's config leaves it; the steps after backward take the bucket's size too.
  const std::string sub_group =
      speculate ? std::string() : fmt::format(R"( "sub_group_size": {},)", bucket);
  return fmt::format(R"({{
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {},
    "steps_per_print": 1000000, "bf16": {{"enabled": true, "check_grad_overflow": {}}},
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-4}}}},
    "zero_optimization": {{"stage": 3,{} "reduce_bucket_size": {},
      "allgather_bucket_size": {}, "stage3_prefetch_bucket_size": {}, "overlap_comm": true,
      "offload_optimizer": {{"device": "cpu"{}, "super_offload": {},
                            "accumulate_on_device": {}}}}}}})",
                     o.accumulation, check, sub_group, bucket, bucket, bucket, pin,
                     speculate ? "true" : "false", o.accumulate_on_device ? "true" : "false");
}

// The CPU optimizer's step over `n` elements alone, as the engine's offloaded step runs it:
// AdamW, gradients in `grad` (the engine's accumulation dtype), fp32 masters and moments, a bf16
// copy-out. Its memory is taken (and the step warmed up) once, so each measurement is one
// step's time and can sit between the engine's.
class OptimizerAlone {
 public:
  OptimizerAlone(std::size_t n, int threads, DType grad) : device_(create_cpu_device()), n_(n) {
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      bytes_[i] = n * (i == kGrad ? dtype_size(grad) : i == kOut ? 2 : 4);
      blocks_[i] = device_->reserve(Tier::host, bytes_[i]);
      std::memset(blocks_[i], 0, bytes_[i]);
    }
    optim::OptimizerSpec spec;
    spec.type = optim::OptimizerType::adamw;
    optim::Formats formats;
    formats.grad = grad;
    optimizer_ = optim::create_cpu_optimizer(spec, formats, {threads, std::nullopt, false});
    seconds();  // the warm-up
  }
  ~OptimizerAlone() {
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      device_->unreserve(Tier::host, blocks_[i], bytes_[i]);
    }
  }
  OptimizerAlone(const OptimizerAlone&) = delete;
  OptimizerAlone& operator=(const OptimizerAlone&) = delete;

  // One step, timed.
  double seconds() {
    const optim::Slice slice{static_cast<float*>(blocks_[0]),
                             blocks_[kGrad],
                             {blocks_[2], blocks_[3]},
                             blocks_[kOut],
                             n_,
                             0.01,
                             1.0,
                             0};
    optim::StepHyper hyper;
    hyper.step = ++steps_;
    Timer timer;
    optimizer_->step({&slice, 1}, hyper, device_->default_stream());
    return timer.seconds();
  }
  // The median of `count` steps.
  double median_of(int count) {
    std::vector<double> times;
    for (int r = 0; r < count; ++r) times.push_back(seconds());
    return median(times);
  }

 private:
  static constexpr std::size_t kGrad = 1;  // blocks_: master, gradient, two moments, copy-out
  static constexpr std::size_t kOut = 4;
  std::unique_ptr<Device> device_;
  std::size_t n_;
  std::array<void*, 5> blocks_{};
  std::array<std::size_t, 5> bytes_{};
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::int64_t steps_ = 0;
};

// The busy seconds of `spans` named `name` (on `lane` where given).
double busy(const std::vector<Trace::Span>& spans, const std::string& name,
            const std::string& lane = "") {
  double ms = 0;
  for (const auto& s : spans) {
    if (s.name == name && (lane.empty() || s.lane == lane)) ms += s.end_ms - s.begin_ms;
  }
  return ms / 1e3;
}

// Runs `seconds` on `stream` as a GPU's kernel would (the host goes on), traced as compute.
void compute_task(Device& device, Stream& stream, double seconds, const char* name) {
  device.launch_host_task(stream, [&device, seconds, name] {
    const auto begin = Trace::Clock::now();
    wait_until(begin + std::chrono::duration_cast<Trace::Clock::duration>(
                           std::chrono::duration<double>(seconds)));
    device.trace()->record(kComputeLane, name, begin, Trace::Clock::now());
  });
}

ModeFigures run_mode(const OffloadStepBenchOptions& o, const std::string& mode,
                     const StepModel& model, const SimulatedLink& link, OptimizerAlone& alone) {
  const auto per_module = static_cast<std::size_t>(o.params / o.modules);
  auto made = create_timed_cpu_device(link);
  Device& device = *made;
  Trace& trace = *device.trace();
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  auto comm = comm::make_local_communicator(comm_options);
  engine::EngineOptions engine_options;
  engine_options.optimizer_threads = o.threads;
  const auto bucket =
      o.bucket > 0 ? static_cast<std::size_t>(o.bucket)
                   : std::max<std::size_t>(static_cast<std::size_t>(o.params / kDefaultBuckets), 1);
  engine::Engine engine(config::read_config_text(offload_step_config(o, mode, bucket), {}),
                        std::move(made), std::move(comm), engine_options);
  for (int m = 0; m < o.modules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    engine.add_param(fmt::format("block{}.weight", m), {static_cast<std::int64_t>(per_module)},
                     true, 0, {module});
  }
  engine.init();
  auto stream = device.create_stream();
  const double forward = model.compute / 3 / o.modules;
  const double backward = 2 * model.compute / 3 / o.modules;
  const auto run_step = [&] {
    trace.take();
    const double cpu_before = process_cpu_seconds();
    Timer whole;
    double call_seconds = 0;
    for (int micro = 0; micro < o.accumulation; ++micro) {
      for (int m = 0; m < o.modules; ++m) {
        engine.pre_forward(static_cast<std::size_t>(m), stream.get());
        compute_task(device, *stream, forward, "forward");
        engine.post_forward(static_cast<std::size_t>(m), stream.get());
      }
      for (int m = o.modules - 1; m >= 0; --m) {
        engine.pre_backward(static_cast<std::size_t>(m), stream.get());
        compute_task(device, *stream, backward, "backward");
        engine.post_backward(static_cast<std::size_t>(m), stream.get());
      }
      Timer call;
      engine.step();
      call_seconds += call.seconds();
    }
    stream->synchronize();
    StepFigures f;
    f.step = whole.seconds();
    f.cpu = process_cpu_seconds() - cpu_before;
    f.call = call_seconds;
    f.spans = trace.take();
    f.compute = busy(f.spans, "forward", kComputeLane) + busy(f.spans, "backward", kComputeLane);
    f.d2h = busy(f.spans, "d2h");
    f.h2d = busy(f.spans, "h2d");
    f.adds = busy(f.spans, "add");
    return f;
  };
  std::vector<StepFigures> each;
  ModeFigures figures;
  std::vector<double> alones, ratios, bound_ratios;
  trace.enable(true);
  // A mode's first steps are not its steady state: the first pass records the modules' order,
  // which the later passes' gathers prefetch by, and the next checks it across ranks.
  for (int s = 0; s < kModeWarmup; ++s) run_step();
  for (int done = 0; done < o.steps; done += o.block) {
    // A block's first step has no step's tail beside its forward: a warm-up.
    run_step();
    std::vector<double> steps;
    for (int s = 0; s < std::min(o.block, o.steps - done); ++s) {
      each.push_back(run_step());
      steps.push_back(each.back().step);
    }
    engine.read_param(0);  // waits for the last step's tail
    const double beside = alone.median_of(3);
    alones.push_back(beside);
    figures.blocks.emplace_back(median(steps), beside);
    ratios.push_back(median(steps) / model.floor(beside));
    bound_ratios.push_back(median(steps) / model.bound(mode, beside));
  }
  trace.enable(false);
  std::sort(each.begin(), each.end(),
            [](const StepFigures& a, const StepFigures& b) { return a.step < b.step; });
  figures.median = std::move(each[each.size() / 2]);
  figures.alone = median(alones);
  figures.ratio = median(ratios);
  figures.bound_ratio = median(bound_ratios);
  return figures;
}

// The spans as a Chrome trace (chrome://tracing, Perfetto): one row per lane.
void write_chrome_trace(const std::string& path, const std::vector<Trace::Span>& spans) {
  std::map<std::string, int> lanes;
  nlohmann::json events = nlohmann::json::array();
  const double origin = spans.empty() ? 0.0 : spans.front().begin_ms;
  double first = origin;
  for (const auto& s : spans) first = std::min(first, s.begin_ms);
  for (const auto& s : spans) {
    const auto [it, added] = lanes.emplace(s.lane, static_cast<int>(lanes.size()));
    if (added) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", 0},
                        {"tid", it->second},
                        {"args", {{"name", s.lane}}}});
    }
    events.push_back({{"ph", "X"},
                      {"name", s.name},
                      {"pid", 0},
                      {"tid", it->second},
                      {"ts", (s.begin_ms - first) * 1e3},
                      {"dur", (s.end_ms - s.begin_ms) * 1e3},
                      {"args", {{"bytes", s.bytes}}}});
  }
  std::ofstream out(path);
  if (!out) throw make_error(ErrorCategory::io, "--trace {}: cannot write the file", path);
  out << nlohmann::json{{"traceEvents", events}}.dump() << "\n";
}

}  // namespace

CLI::App* add_offload_step_command(CLI::App& app, OffloadStepBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "offload-step",
      "The optimizer-offloaded step on the timed CPU device (a GPU's copies and kernels, this "
      "machine's CPU optimizer) against its floor, max(compute, CPU optimizer, each link "
      "direction), the CPU optimizer alone measured right after each block of steps (target: "
      "step <= 1.2 x floor), and against the bound its mode's order allows an exact step (after "
      "backward: "
      "compute, then the optimizer; speculated: the micro-steps before the window's last, then "
      "the larger of a micro-step and the optimizer, which it can hide only beside the last "
      "backward and the next forward)");
  command->add_option("--params", options.params, "Trainable elements (default 40e6)");
  command->add_option("--modules", options.modules, "Modules, one parameter each (default 16)");
  command->add_option("--bucket", options.bucket,
                      "Elements per reduction bucket and step group; default --params / 32, "
                      "the 32 buckets of gpt2-1.5b's 1.56B parameters in gpu-check's 5e7 "
                      "(super_offload's modes set no sub_group_size: the engine's groups are "
                      "then a bucket's size)");
  command->add_option("--compute-ms", options.compute_ms,
                      "Forward + backward stand-in per micro-step, ms (default 0.45 x the CPU "
                      "optimizer's step, measured first)");
  command->add_option("--link-gbps", options.link_gbps,
                      "The simulated PCIe link, each direction, GB/s (default: one direction's "
                      "bytes in 0.2 x the CPU optimizer's step)");
  command->add_option("--kernel-gbps", options.kernel_gbps,
                      "The simulated device memory's bandwidth, GB/s (default 2500)");
  command->add_option("--threads", options.threads, "CPU optimizer threads (default 2)");
  command->add_option("--accumulation", options.accumulation,
                      "gradient_accumulation_steps (default 1)");
  command->add_flag("--accumulate-on-device", options.accumulate_on_device,
                    "offload_optimizer.accumulate_on_device: with --accumulation above 1, a "
                    "window's gradients summed on the device and copied down once, at its last "
                    "micro-step (the floor's gradients down counts that one copy)");
  command->add_option("--steps", options.steps,
                      "Measured steps per mode, after 3 unmeasured ones (default 24)");
  command->add_option("--block", options.block,
                      "Measured steps per block (default 2): each block follows one unmeasured "
                      "step, and is followed by the optimizer alone, measured 3 times; a mode's "
                      "ratio is the median over its blocks of the block's median step over the "
                      "floor with that measurement");
  command
      ->add_option("--modes", options.modes,
                   "Comma-separated: pinned (offload_optimizer without pin_memory: pinned beside "
                   "a GPU), pageable (pin_memory false), super_offload (pinned and "
                   "super_offload, whose groups stepped before bf16's overflow check has its "
                   "verdict write a second copy of the state, and those after it the state in "
                   "place), super_offload_unchecked (the same with "
                   "bf16.check_grad_overflow false: nothing can undo a speculated step, so it "
                   "writes the state in place); default: "
                   "pinned,super_offload")
      ->delimiter(',')
      ->check(CLI::IsMember({"pinned", "pageable", "super_offload", "super_offload_unchecked"}));
  command->add_option("--trace", options.trace,
                      "Write the last mode's median step as a Chrome trace to FILE");
  command->add_option("--json", options.json, "Append one JSON line per mode to FILE");
  return command;
}

int run_offload_step_bench(const OffloadStepBenchOptions& o) {
  if (o.params < o.modules || o.modules < 1 || o.steps < 1 || o.block < 1 || o.threads < 1 ||
      o.compute_ms < 0 || o.link_gbps < 0 || o.kernel_gbps <= 0 || o.accumulation < 1) {
    throw make_error(ErrorCategory::usage,
                     "--params must be at least --modules, --modules, --steps, --block, "
                     "--threads and --accumulation positive, --kernel-gbps positive and "
                     "--compute-ms and --link-gbps not negative");
  }
  const auto n = static_cast<std::size_t>(o.params / o.modules) * o.modules;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  // The gradients as the engine's optimizer reads them (bf16: the config's accumulation dtype).
  const DType grad = config::read_config_text(offload_step_config(o, "pinned", n / o.modules), {})
                         .grad_accum_dtype;
  OptimizerAlone alone(n, o.threads, grad);
  const double adam = alone.median_of(3);
  StepModel model;
  model.compute = o.compute_ms > 0 ? o.compute_ms / 1e3 : 0.45 * adam;
  model.accumulation = o.accumulation;
  const double bytes = 2.0 * static_cast<double>(n);  // bf16 each way
  SimulatedLink link;
  link.kernel_gbps = o.kernel_gbps;
  link.move_data = false;  // the host's cores for the host's work, as beside a GPU
  link.h2d_gbps = link.d2h_gbps = o.link_gbps > 0 ? o.link_gbps : bytes / (0.2 * adam) / 1e9;
  // Down every micro-step, or once a window where it is summed on the device.
  model.down = (o.accumulate_on_device ? 1 : o.accumulation) * bytes / (link.d2h_gbps * 1e9);
  model.up = bytes / (link.h2d_gbps * 1e9);
  std::cout << fmt::format(
      "zero-bench offload-step: {} elements in {} modules, stage 3, bf16, AdamW on {} CPU "
      "thread(s), gradient accumulation {}{}; timed device: link {:.2f} GB/s each way, device "
      "memory {:.0f} GB/s\n  compute {:.1f} ms, CPU optimizer alone {:.1f} ms, gradients down "
      "{:.1f} ms, parameters up {:.1f} ms: floor {:.1f} ms; each mode's floor and ratio: per "
      "block of {} steps (after one unmeasured), with the optimizer alone measured right after "
      "the block, the median over the blocks; a mode's order's bound: after backward, compute "
      "then the optimizer; speculated, the micro-steps before the last, then max(a micro-step, "
      "the optimizer); the cores' bound: the step's CPU time (every thread of the process) over "
      "this machine's {} cores\n",
      n, o.modules, o.threads, o.accumulation,
      o.accumulate_on_device && o.accumulation > 1 ? " summed on the device" : "", link.d2h_gbps,
      link.kernel_gbps, o.accumulation * model.compute * 1e3, adam * 1e3, model.down * 1e3,
      model.up * 1e3, model.floor(adam) * 1e3, o.block, cores);
  std::vector<Trace::Span> last;
  for (const std::string& mode : o.modes) {
    ModeFigures m = run_mode(o, mode, model, link, alone);
    const StepFigures& f = m.median;
    const double mode_floor = model.floor(m.alone);
    const double bound = model.bound(mode, m.alone);
    // This machine's cores: the step's CPU time (the optimizer's threads, the engine's own, the
    // stand-in's hand-offs) spread over all of them, the least a step can take here whatever
    // its order.
    const double cpu_bound = f.cpu / cores;
    std::cout << fmt::format(
        "  {:<24} step {:8.1f} ms = {:.3f} x floor {:5.1f}, {:.3f} x its order's bound {:5.1f}, "
        "{:.3f} x the cores' {:5.1f} | compute {:7.1f}, link down {:6.1f} up {:6.1f}, host adds "
        "{:6.1f}, engine step call {:7.1f}, CPU {:6.1f} ms\n",
        mode, f.step * 1e3, m.ratio, mode_floor * 1e3, m.bound_ratio, bound * 1e3,
        f.step / cpu_bound, cpu_bound * 1e3, f.compute * 1e3, f.d2h * 1e3, f.h2d * 1e3,
        f.adds * 1e3, f.call * 1e3, f.cpu * 1e3);
    if (!o.json.empty()) {
      nlohmann::json blocks_ms = nlohmann::json::array();
      for (const auto& [step, beside] : m.blocks) blocks_ms.push_back({step * 1e3, beside * 1e3});
      const nlohmann::json line = {{"bench", "offload-step"},
                                   {"mode", mode},
                                   {"params", n},
                                   {"modules", o.modules},
                                   {"threads", o.threads},
                                   {"accumulation", o.accumulation},
                                   {"accumulate_on_device", o.accumulate_on_device},
                                   {"link_gbps", link.d2h_gbps},
                                   {"compute_ms", o.accumulation * model.compute * 1e3},
                                   {"optimizer_alone_ms", m.alone * 1e3},
                                   {"down_ms", model.down * 1e3},
                                   {"up_ms", model.up * 1e3},
                                   {"floor_ms", mode_floor * 1e3},
                                   {"step_ms", f.step * 1e3},
                                   {"ratio", m.ratio},
                                   {"blocks_step_alone_ms", blocks_ms},
                                   {"order_bound_ms", bound * 1e3},
                                   {"ratio_to_order_bound", m.bound_ratio},
                                   {"cpu_ms", f.cpu * 1e3},
                                   {"cores", cores},
                                   {"cores_bound_ms", cpu_bound * 1e3},
                                   {"compute_busy_ms", f.compute * 1e3},
                                   {"d2h_busy_ms", f.d2h * 1e3},
                                   {"h2d_busy_ms", f.h2d * 1e3},
                                   {"adds_ms", f.adds * 1e3},
                                   {"step_call_ms", f.call * 1e3}};
      std::ofstream(o.json, std::ios::app) << line.dump() << "\n";
    }
    last = std::move(m.median.spans);
  }
  if (!o.trace.empty()) write_chrome_trace(o.trace, last);
  return 0;
}

}  // namespace zero::bench
