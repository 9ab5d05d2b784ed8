// The CPU optimizer: one fused pass per element over the engine's flat buffers, in runs of
// cache-sized tiles that OpenMP threads take in turn, each tile handed to the kernel of the
// chosen ISA. Results do not depend on the thread count or the slicing: kernels are elementwise and
// stochastic rounding depends only on (seed, step, element index).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "optim/cpu/kernels.h"
#include "optim/optimizer.h"
#include "optim/rounding.h"

namespace zero::optim {
namespace {

// Elements per kernel call: every stream of a tile (at most 34 bytes an element) fits in L2,
// and thread boundaries fall on whole tiles.
constexpr std::size_t kTile = 4096;

// The elements of one 2^32 block of indices share a rounding key; pieces never cross blocks.
constexpr std::uint64_t kIndexBlock = std::uint64_t{1} << 32;

cpu::Coefficients coefficients(const OptimizerSpec& spec, const StepHyper& hyper,
                               const Slice& slice) {
  const double lr = hyper.lr * slice.lr_scale;
  const double wd = slice.weight_decay;
  cpu::Coefficients c;
  c.grad_scale = static_cast<float>(hyper.grad_scale);
  c.lr = static_cast<float>(lr);
  c.eps = static_cast<float>(spec.eps);
  c.beta1 = static_cast<float>(hyper.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  c.beta2 = static_cast<float>(hyper.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  switch (spec.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw: {
      const double t = static_cast<double>(hyper.step);
      const double bc1 = spec.bias_correction ? 1.0 - std::pow(hyper.beta1, t) : 1.0;
      const double bc2 = spec.bias_correction ? 1.0 - std::pow(hyper.beta2, t) : 1.0;
      c.step_size = static_cast<float>(lr / bc1);
      c.rbc2 = static_cast<float>(1.0 / std::sqrt(bc2));
      if (spec.type == OptimizerType::adam)
        c.l2 = static_cast<float>(wd);
      else
        c.decay = static_cast<float>(1.0 - lr * wd);
      break;
    }
    case OptimizerType::adagrad:
      c.l2 = static_cast<float>(wd);
      break;
    case OptimizerType::lion:
      c.decay = static_cast<float>(1.0 - lr * wd);
      break;
    case OptimizerType::sgd:
      c.l2 = static_cast<float>(wd);
      c.momentum = static_cast<float>(spec.momentum);
      c.one_minus_dampening = static_cast<float>(1.0 - spec.dampening);
      c.first_step = hyper.step == 1;
      c.nesterov = spec.nesterov;
      break;
  }
  return c;
}

class CpuOptimizer final : public Optimizer {
 public:
  CpuOptimizer(const OptimizerSpec& spec, const Formats& formats, CpuIsa isa, int threads,
               bool floor)
      : spec_(spec), formats_(formats), isa_(isa), threads_(threads), floor_(floor) {
    const cpu::Mode mode = floor ? cpu::Mode::floor : cpu::Mode::step;
    kernel_ = cpu::find_kernel(isa, mode, spec.type, formats, false);
    kernel_out_ = cpu::find_kernel(isa, mode, spec.type, formats, true);
    copy_out_ = cpu::find_kernel(isa, cpu::Mode::copy_out, spec.type, formats, true);
  }

  const OptimizerSpec& spec() const noexcept override { return spec_; }
  const Formats& formats() const noexcept override { return formats_; }

  std::string description() const override {
    const int states = spec_.state_buffers();
    return fmt::format(
        "{}{} on the CPU ({}, {} thread{}): {} grads, {}, {}", floor_ ? "bandwidth floor of " : "",
        optimizer_type_name(spec_.type), cpu_isa_name(isa_), threads_, threads_ == 1 ? "" : "s",
        dtype_name(formats_.grad),
        states == 0 ? std::string("no state") : fmt::format("{} state", dtype_name(formats_.state)),
        formats_.copy_out ? fmt::format("{} copy-out", dtype_name(formats_.param_out))
                          : std::string("no copy-out"));
  }

  void step(std::span<const Slice> slices, const StepHyper& step_hyper, Stream& stream) override {
    if (step_hyper.step < 1) {
      throw make_error(ErrorCategory::usage, "optimizer step: step number {} (steps count from 1)",
                       step_hyper.step);
    }
    StepHyper hyper = step_hyper;
    if (!apply_verdict(hyper)) {  // the verdict, read now, skips the step: only the copy-out
      write_param_out(slices, stream);
      return;
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < slices.size(); ++i) {
      check_slice(slices[i], i);
      total += slices[i].count;
    }
    parallel(total,
             [&](std::size_t begin, std::size_t end) { run(slices, hyper, begin, end, false); });
  }

  void write_param_out(std::span<const Slice> slices, Stream&) override {
    std::size_t total = 0;
    for (std::size_t i = 0; i < slices.size(); ++i) {
      if (slices[i].count > 0 && slices[i].master == nullptr) {
        throw make_error(ErrorCategory::usage, "write_param_out: slice {} has no master", i);
      }
      total += slices[i].count;
    }
    parallel(total, [&](std::size_t begin, std::size_t end) {
      run(slices, StepHyper{}, begin, end, true);
    });
  }

 private:
  // Calls work(begin, end) over [0, total) in runs of whole tiles that the threads take in
  // turn as they finish the last: a thread slowed by another on its core (the engine's own
  // thread, beside a GPU the backward's hooks) leaves its share to the others instead of holding
  // the whole step. A run is 16 tiles, or more where that makes over 32 runs a thread.
  template <class Work>
  void parallel(std::size_t total, const Work& work) const {
    const std::size_t tiles = (total + kTile - 1) / kTile;
    const int threads = static_cast<int>(std::min<std::size_t>(threads_, tiles));
    if (threads <= 1) {
      work(0, total);
      return;
    }
    const std::size_t run_tiles =
        std::max<std::size_t>(16, tiles / (32 * static_cast<std::size_t>(threads)));
    const std::size_t run_elements = run_tiles * kTile;
    std::atomic<std::size_t> next{0};
#pragma omp parallel num_threads(threads)
    {
      for (std::size_t begin = next.fetch_add(run_elements, std::memory_order_relaxed);
           begin < total; begin = next.fetch_add(run_elements, std::memory_order_relaxed)) {
        work(begin, std::min(total, begin + run_elements));
      }
    }
  }

  void check_slice(const Slice& slice, std::size_t i) const {
    if (slice.count == 0) return;
    const int states = floor_ ? 2 : spec_.state_buffers();  // the floor moves AdamW's bytes
    const char* missing = slice.master == nullptr                    ? "master"
                          : slice.grad == nullptr                    ? "grad"
                          : states >= 1 && slice.state[0] == nullptr ? "state[0]"
                          : states >= 2 && slice.state[1] == nullptr ? "state[1]"
                                                                     : nullptr;
    if (missing != nullptr) {
      throw make_error(ErrorCategory::usage,
                       "optimizer step: slice {} ({} elements) has no {} buffer; {} needs it", i,
                       slice.count, missing, optimizer_type_name(spec_.type));
    }
    // Stepped from another copy: that copy of every buffer the step updates, and of every state
    // buffer given beside them (the kernels' partial vectors copy each given one).
    if (slice.master_from != nullptr || slice.state_from[0] != nullptr ||
        slice.state_from[1] != nullptr) {
      const auto needs = [&](int k) {
        return (states > k || slice.state[k] != nullptr) && slice.state_from[k] == nullptr;
      };
      const char* unread = slice.master_from == nullptr ? "master"
                           : needs(0)                   ? "state[0]"
                           : needs(1)                   ? "state[1]"
                                                        : nullptr;
      if (unread != nullptr) {
        throw make_error(ErrorCategory::usage,
                         "optimizer step: slice {} is stepped from another copy of its state "
                         "but has no {} there; give the other copy of every buffer or none",
                         i, unread);
      }
    }
  }

  // Steps (or only copies out, with `copy_only`) the elements [begin, end) of the slices laid
  // end to end.
  void run(std::span<const Slice> slices, const StepHyper& hyper, std::size_t begin,
           std::size_t end, bool copy_only) const {
    const std::size_t state_size = dtype_size(formats_.state);
    const std::size_t out_size = dtype_size(formats_.param_out);
    std::size_t slice_end = 0;  // position after the current slice in the concatenation
    for (const Slice& slice : slices) {
      const std::size_t slice_begin = slice_end;
      slice_end += slice.count;
      if (slice_end <= begin) continue;
      if (slice_begin >= end) break;
      const std::size_t first = std::max(begin, slice_begin) - slice_begin;
      const std::size_t stop = std::min(end, slice_end) - slice_begin;
      if (copy_only && slice.param_out == nullptr) continue;
      cpu::Coefficients c = coefficients(spec_, hyper, slice);
      const cpu::Kernel kernel = copy_only                    ? copy_out_
                                 : slice.param_out != nullptr ? kernel_out_
                                                              : kernel_;
      const void* grad = copy_only ? slice.master : slice.grad;
      const std::size_t grad_size = copy_only ? sizeof(float) : dtype_size(formats_.grad);
      for (std::size_t at = first; at < stop;) {
        const std::uint64_t index = slice.first_index + at;
        const std::size_t count = static_cast<std::size_t>(
            std::min<std::uint64_t>({kTile, stop - at, kIndexBlock - (index & (kIndexBlock - 1))}));
        c.rounding_key =
            rounding_key(hyper.seed, hyper.step, static_cast<std::uint32_t>(index >> 32));
        // In place, or (copy_only aside) from the slice's other copy into this one.
        const bool from = slice.master_from != nullptr && !copy_only;
        char* state0 = slice.state[0] && !copy_only
                           ? static_cast<char*>(slice.state[0]) + at * state_size
                           : nullptr;
        char* state1 = slice.state[1] && !copy_only
                           ? static_cast<char*>(slice.state[1]) + at * state_size
                           : nullptr;
        const auto in = [&](const void* other, char* own) -> const void* {
          return from && own != nullptr ? static_cast<const char*>(other) + at * state_size : own;
        };
        const cpu::Piece piece{
            slice.master + at,
            static_cast<const char*>(grad) + at * grad_size,
            state0,
            state1,
            slice.param_out ? static_cast<char*>(slice.param_out) + at * out_size : nullptr,
            count,
            static_cast<std::uint32_t>(index),
            from ? slice.master_from + at : slice.master + at,
            in(slice.state_from[0], state0),
            in(slice.state_from[1], state1),
            from};
        kernel(piece, c);
        at += count;
      }
    }
  }

  OptimizerSpec spec_;
  Formats formats_;
  CpuIsa isa_;
  int threads_;
  bool floor_;
  cpu::Kernel kernel_ = nullptr;      // step without copy-out
  cpu::Kernel kernel_out_ = nullptr;  // step with copy-out
  cpu::Kernel copy_out_ = nullptr;    // copy-out only
};

}  // namespace

std::unique_ptr<Optimizer> create_cpu_optimizer(const OptimizerSpec& spec, const Formats& formats,
                                                const CpuOptimizerOptions& options) {
  validate(spec, formats);
  if (options.threads < 1) {
    throw make_error(ErrorCategory::usage, "CPU optimizer: {} threads; give at least 1",
                     options.threads);
  }
  if (options.isa) require_cpu_isa(*options.isa, "CPU optimizer");
  const CpuIsa isa = options.isa ? *options.isa : selected_cpu_isa();
  return std::make_unique<CpuOptimizer>(spec, formats, isa, options.threads,
                                        options.bandwidth_floor);
}

}  // namespace zero::optim
