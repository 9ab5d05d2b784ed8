#include "tools/zero-bench/bench_adam.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/cpu_isa.h"
#include "base/error.h"
#include "device/device.h"
#include "optim/optimizer.h"

namespace zero::bench {
namespace {

struct Variant {
  std::string_view name;
  std::string_view what;
  optim::Formats formats;
  bool copy_out;
};

// The variants the issue names: fp32 grads (no copy-out); bf16 and fp16 grads with a copy-out
// of the same dtype; bf16 moments.
constexpr Variant kVariants[] = {
    {"fp32", "fp32 grads, fp32 state, no copy-out", {DType::f32, DType::f32, DType::bf16}, false},
    {"bf16", "bf16 grads, fp32 state, bf16 copy-out", {DType::bf16, DType::f32, DType::bf16}, true},
    {"fp16", "fp16 grads, fp32 state, fp16 copy-out", {DType::f16, DType::f32, DType::f16}, true},
    {"bf16-state",
     "bf16 grads, bf16 state, bf16 copy-out",
     {DType::bf16, DType::bf16, DType::bf16},
     true},
};

const Variant& find_variant(const std::string& name) {
  for (const Variant& v : kVariants) {
    if (v.name == name) return v;
  }
  throw make_error(ErrorCategory::usage,
                   "--variants: unknown variant '{}'; use fp32, bf16, fp16 "
                   "or bf16-state",
                   name);
}

optim::OptimizerType parse_type(const std::string& name) {
  if (name == "adamw") return optim::OptimizerType::adamw;
  if (name == "adam") return optim::OptimizerType::adam;
  if (name == "adagrad") return optim::OptimizerType::adagrad;
  if (name == "lion") return optim::OptimizerType::lion;
  if (name == "sgd") return optim::OptimizerType::sgd;
  throw make_error(ErrorCategory::usage, "--optimizer '{}': use adamw, adam, adagrad, lion or sgd",
                   name);
}

// Bytes one step moves per element: reads of master, grad and state, writes of master, state and
// the copy-out (write-allocate reads not counted).
double bytes_per_element(const optim::Formats& f, int states, bool copy_out) {
  return 8.0 + static_cast<double>(dtype_size(f.grad)) +
         2.0 * states * static_cast<double>(dtype_size(f.state)) +
         (copy_out ? static_cast<double>(dtype_size(f.param_out)) : 0.0);
}

// Host buffers for the largest variant, touched once so that page faults stay out of the
// timings.
struct Buffers {
  Buffers(Device& device, std::size_t n) : device(device), n(n) {
    for (auto& b : blocks) {
      b = device.reserve(Tier::host, n * 4);
      std::memset(b, 0, n * 4);
    }
    auto* master = static_cast<float*>(blocks[0]);
    for (std::size_t i = 0; i < n; ++i) master[i] = 1.0f + static_cast<float>(i % 1000) * 1e-3f;
  }
  ~Buffers() {
    for (auto* b : blocks) device.unreserve(Tier::host, b, n * 4);
  }
  optim::Slice slice(bool copy_out) const {
    return optim::Slice{static_cast<float*>(blocks[0]),
                        blocks[1],
                        {blocks[2], blocks[3]},
                        copy_out ? blocks[4] : nullptr,
                        n,
                        0.01,
                        1.0,
                        0};
  }
  // The step from the master and states into their second copy (`back`: from the second copy
  // into them), as super_offload's speculated steps take it.
  optim::Slice other_copy(bool copy_out, bool back) const {
    optim::Slice s = slice(copy_out);
    void* const other[3] = {blocks[5], blocks[6], blocks[7]};
    s.master_from = static_cast<const float*>(back ? other[0] : blocks[0]);
    s.state_from[0] = back ? other[1] : blocks[2];
    s.state_from[1] = back ? other[2] : blocks[3];
    s.master = static_cast<float*>(back ? blocks[0] : other[0]);
    s.state[0] = back ? blocks[2] : other[1];
    s.state[1] = back ? blocks[3] : other[2];
    return s;
  }
  Device& device;
  std::size_t n;
  // master, grad, state 0, state 1, copy-out, then the second copy's master, state 0, state 1
  void* blocks[8] = {};
};

// The medians of `repeats` timed calls of `a` and of `b`, in seconds, after one warm-up call of
// each. The calls alternate, a then b, so that the pair sees the same machine: this one's speed
// drifts by a fifth over seconds, which separate runs of each would read as a difference.
template <class A, class B>
std::pair<double, double> paired_medians(int repeats, const A& a, const B& b) {
  a();
  b();
  std::vector<double> times_a, times_b;
  const auto timed = [](const auto& call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int r = 0; r < repeats; ++r) {
    times_a.push_back(timed(a));
    times_b.push_back(timed(b));
  }
  std::sort(times_a.begin(), times_a.end());
  std::sort(times_b.begin(), times_b.end());
  return {times_a[times_a.size() / 2], times_b[times_b.size() / 2]};
}

// A JSON line's keys every paired measurement shares, the pair's own figures added after.
nlohmann::json measurement(const char* bench, const Variant& v, CpuIsa isa, int threads,
                           std::size_t n) {
  return {{"bench", bench},
          {"variant", v.name},
          {"isa", cpu_isa_name(isa)},
          {"threads", threads},
          {"elements", n}};
}

std::vector<CpuIsa> chosen_isas(const std::string& isa) {
  if (isa == "best") return {best_cpu_isa()};
  if (isa == "all") {
    std::vector<CpuIsa> all;
    for (CpuIsa i : {CpuIsa::avx512, CpuIsa::avx2, CpuIsa::scalar}) {
      if (cpu_features().supports(i)) all.push_back(i);
    }
    return all;
  }
  const auto parsed = parse_cpu_isa(isa);
  if (!parsed) {
    throw make_error(ErrorCategory::usage, "--isa '{}': use best, all, scalar, avx2 or avx512",
                     isa);
  }
  require_cpu_isa(*parsed, "--isa");
  return {*parsed};
}

}  // namespace

CLI::App* add_adam_command(CLI::App& app, AdamBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "adam",
      "The fused CPU optimizer step: elements/s and GB/s per variant, ISA and thread count, "
      "each as a fraction of its bandwidth floor (the same loads and stores, trivial "
      "arithmetic), the fused half copy-out against a step followed by a separate cast, and the "
      "step from one copy of the state into another (super_offload's speculated step) against "
      "the step in place.");
  command->add_option("--elements", options.elements, "Elements (parameters) per step")
      ->capture_default_str();
  command->add_option("--threads", options.threads, "OpenMP thread counts to measure")
      ->capture_default_str();
  command->add_option("--isa", options.isa, "best, all, scalar, avx2 or avx512")
      ->capture_default_str();
  command
      ->add_option("--variants", options.variants,
                   "fp32 (fp32 grads), bf16 (bf16 grads, bf16 copy-out), fp16 (fp16 grads, "
                   "fp16 copy-out), bf16-state (bf16 grads, state and copy-out)")
      ->capture_default_str();
  command->add_option("--optimizer", options.optimizer, "adamw, adam, adagrad, lion or sgd")
      ->capture_default_str();
  command->add_option("--repeats", options.repeats, "Timed steps per measurement (median)")
      ->capture_default_str();
  command->add_option("--json", options.json, "Append one JSON line per measurement to FILE");
  return command;
}

int run_adam_bench(const AdamBenchOptions& options) {
  if (options.elements < 1 || options.elements > 4e9) {
    throw make_error(ErrorCategory::usage, "--elements {}: give 1 to 4e9", options.elements);
  }
  if (options.repeats < 1) throw make_error(ErrorCategory::usage, "--repeats must be at least 1");
  for (int t : options.threads) {
    if (t < 1) throw make_error(ErrorCategory::usage, "--threads: {} is not a thread count", t);
  }
  const auto n = static_cast<std::size_t>(options.elements);
  optim::OptimizerSpec spec;
  spec.type = parse_type(options.optimizer);
  spec.momentum = spec.type == optim::OptimizerType::sgd ? 0.9 : 0.0;
  const int states = spec.state_buffers();
  std::vector<const Variant*> variants;
  for (const auto& name : options.variants) variants.push_back(&find_variant(name));
  const std::vector<CpuIsa> isas = chosen_isas(options.isa);

  auto device = create_cpu_device();
  Buffers buffers(*device, n);
  Stream& stream = device->default_stream();
  std::ofstream json;
  if (!options.json.empty()) json.open(options.json, std::ios::app);

  fmt::print("zero-bench adam: {}, {} elements, CPU features: {}\n",
             optim::optimizer_type_name(spec.type), n, cpu_features().describe());
  fmt::print("{:<11} {:<7} {:>7} {:>10} {:>10} {:>9} {:>8} {:>9}\n", "variant", "isa", "threads",
             "step ms", "floor ms", "Melem/s", "GB/s", "of floor");
  int step = 0;
  for (CpuIsa isa : isas) {
    for (int threads : options.threads) {
      for (const Variant* v : variants) {
        const optim::CpuOptimizerOptions run{threads, isa, false};
        auto optimizer = optim::create_cpu_optimizer(spec, v->formats, run);
        auto floor = optim::create_cpu_optimizer(spec, v->formats, {threads, isa, true});
        const optim::Slice slice = buffers.slice(v->copy_out);
        optim::StepHyper hyper;
        const auto [t_step, t_floor] = paired_medians(
            options.repeats,
            [&] {
              hyper.step = ++step;
              optimizer->step({&slice, 1}, hyper, stream);
            },
            [&] {
              floor->step({&slice, 1}, hyper, stream);
            });
        const double bytes = bytes_per_element(v->formats, states, v->copy_out) * n;
        const double floor_bytes = bytes_per_element(v->formats, 2, v->copy_out) * n;
        fmt::print("{:<11} {:<7} {:>7} {:>10.2f} {:>10.2f} {:>9.1f} {:>8.2f} {:>9.3f}\n", v->name,
                   cpu_isa_name(isa), threads, t_step * 1e3, t_floor * 1e3, n / t_step / 1e6,
                   bytes / t_step / 1e9, t_floor / t_step);
        nlohmann::json line{{"bench", "adam"},
                            {"optimizer", optim::optimizer_type_name(spec.type)},
                            {"variant", v->name},
                            {"formats", v->what},
                            {"isa", cpu_isa_name(isa)},
                            {"threads", threads},
                            {"elements", n},
                            {"step_s", t_step},
                            {"floor_s", t_floor},
                            {"elements_per_s", n / t_step},
                            {"step_GBps", bytes / t_step / 1e9},
                            {"floor_GBps", floor_bytes / t_floor / 1e9},
                            {"fraction_of_floor", t_floor / t_step}};
        if (json.is_open()) json << line.dump() << "\n";
      }
    }
  }

  // Fused copy-out against a step without it followed by a separate cast pass over the master.
  fmt::print("\nhalf copy-out fused into the step vs. step then a separate cast pass:\n");
  fmt::print("{:<11} {:<7} {:>7} {:>10} {:>14} {:>9}\n", "variant", "isa", "threads", "fused ms",
             "step+cast ms", "speedup");
  for (CpuIsa isa : isas) {
    for (int threads : options.threads) {
      for (const Variant* v : variants) {
        if (!v->copy_out) continue;
        auto optimizer = optim::create_cpu_optimizer(spec, v->formats, {threads, isa, false});
        const optim::Slice fused = buffers.slice(true);
        const optim::Slice bare = buffers.slice(false);
        optim::StepHyper hyper;
        const auto [t_fused, t_separate] = paired_medians(
            options.repeats,
            [&] {
              hyper.step = ++step;
              optimizer->step({&fused, 1}, hyper, stream);
            },
            [&] {
              hyper.step = ++step;
              optimizer->step({&bare, 1}, hyper, stream);
              optimizer->write_param_out({&fused, 1}, stream);
            });
        fmt::print("{:<11} {:<7} {:>7} {:>10.2f} {:>14.2f} {:>8.2f}x\n", v->name, cpu_isa_name(isa),
                   threads, t_fused * 1e3, t_separate * 1e3, t_separate / t_fused);
        nlohmann::json line = measurement("adam_copy_out", *v, isa, threads, n);
        line["fused_s"] = t_fused;
        line["step_then_cast_s"] = t_separate;
        line["speedup"] = t_separate / t_fused;
        if (json.is_open()) json << line.dump() << "\n";
      }
    }
  }

  // The step from one copy of the state into the other (super_offload's speculated step where a
  // verdict can undo it; the copies in turn, as the verdicts that keep the steps make each
  // current) against the step in place: the same bytes moved where the destination's stores
  // stream past the cache.
  fmt::print("\nstep from one copy of the state into the other vs. in place:\n");
  fmt::print("{:<11} {:<7} {:>7} {:>12} {:>15} {:>9}\n", "variant", "isa", "threads", "in place ms",
             "other copy ms", "ratio");
  for (CpuIsa isa : isas) {
    for (int threads : options.threads) {
      for (const Variant* v : variants) {
        auto optimizer = optim::create_cpu_optimizer(spec, v->formats, {threads, isa, false});
        const optim::Slice in_place = buffers.slice(v->copy_out);
        const optim::Slice forth = buffers.other_copy(v->copy_out, false);
        const optim::Slice back = buffers.other_copy(v->copy_out, true);
        optim::StepHyper hyper;
        bool there = false;  // the current copy is the second one
        const auto [t_in_place, t_other] = paired_medians(
            options.repeats,
            [&] {
              hyper.step = ++step;
              optimizer->step({&in_place, 1}, hyper, stream);
            },
            [&] {
              hyper.step = ++step;
              optimizer->step({there ? &back : &forth, 1}, hyper, stream);
              there = !there;
            });
        fmt::print("{:<11} {:<7} {:>7} {:>12.2f} {:>15.2f} {:>8.2f}x\n", v->name, cpu_isa_name(isa),
                   threads, t_in_place * 1e3, t_other * 1e3, t_other / t_in_place);
        nlohmann::json line = measurement("adam_other_copy", *v, isa, threads, n);
        line["in_place_s"] = t_in_place;
        line["other_copy_s"] = t_other;
        line["ratio"] = t_other / t_in_place;
        if (json.is_open()) json << line.dump() << "\n";
      }
    }
  }
  return 0;
}

}  // namespace zero::bench
