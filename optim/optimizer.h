// The Optimizer interface the engine calls once per step with flat views of the buffers it
// owns, and the factories for the CPU (fused, per ISA, OpenMP) and CUDA (multi-tensor fused
// Adam/AdamW) implementations.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "base/cpu_isa.h"
#include "device/device.h"
#include "optim/spec.h"

namespace zero::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual const OptimizerSpec& spec() const noexcept = 0;
  virtual const Formats& formats() const noexcept = 0;
  // "AdamW on the CPU (avx512, 2 threads): bf16 grads, fp32 state, bf16 copy-out" (or "no
  // copy-out" when Formats::copy_out is false)
  virtual std::string description() const = 0;

  // One step over every slice. The CPU optimizer runs on the calling thread and its OpenMP
  // team and returns when done (stream is not used); the CUDA optimizer enqueues its kernels
  // on `stream` and returns at once, and its slices must point at memory the GPU can address.
  // Makes no allocation. Throws a usage Error naming the slice whose pointers the algorithm
  // needs but are null.
  virtual void step(std::span<const Slice> slices, const StepHyper& hyper, Stream& stream) = 0;

  // Writes each slice's param_out from its master (rounded to nearest even) and nothing else:
  // the half-precision parameters after a checkpoint load or an initialisation of the master.
  // Same execution rules as step(); slices without param_out are skipped.
  virtual void write_param_out(std::span<const Slice> slices, Stream& stream) = 0;
};

struct CpuOptimizerOptions {
  // OpenMP threads for the step (the engine divides the cores among its ranks). At least 1.
  int threads = 1;
  // The kernels' instruction set; unset: selected_cpu_isa() (the best, or ZERO_CPU_ISA).
  std::optional<CpuIsa> isa;
  // For benchmarks: step() performs AdamW's loads and stores with these formats but trivial
  // arithmetic, the memory-bandwidth floor a real step is measured against.
  bool bandwidth_floor = false;
};

// Throws a config Error for formats the CPU kernels do not take, or an ISA the CPU lacks.
std::unique_ptr<Optimizer> create_cpu_optimizer(const OptimizerSpec& spec, const Formats& formats,
                                                const CpuOptimizerOptions& options = {});

// The CPU optimizer as work on `device`'s streams: step() and write_param_out() enqueue the
// CPU step as a host task (Device::launch_host_task) over the device's host aliases of the
// slices' pointers, and return; on the synchronous CPU device the task runs at once. For a
// CPU device whose streams run on worker threads, or whose device memory the host reaches
// only through an alias. An error in the step surfaces at the stream's next synchronize.
std::unique_ptr<Optimizer> create_hosted_cpu_optimizer(Device& device, const OptimizerSpec& spec,
                                                       const Formats& formats,
                                                       const CpuOptimizerOptions& options = {});

// Adam and AdamW on a CUDA device (other types are a config Error naming the type). Throws a
// device Error in builds without CUDA.
std::unique_ptr<Optimizer> create_cuda_optimizer(const OptimizerSpec& spec, const Formats& formats);

}  // namespace zero::optim
