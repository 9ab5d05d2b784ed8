// The CUDA optimizer: Adam and AdamW over the engine's slices with the multi-tensor fused
// kernel of fused_adam.cu (and its copy-out kernel for write_param_out). Host C++20; it
// computes the step's scalars in double once per step and enqueues the kernels on the
// caller's stream, up to kFusedAdamMaxTensors slices per call of a launcher, from an array on
// the stack: no allocation.
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "base/error.h"
#include "optim/cuda/fused_adam.h"
#include "optim/optimizer.h"

namespace zero::optim {
namespace {

std::optional<cuda::Format> kernel_format(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return cuda::Format::f32;
    case DType::f16:
      return cuda::Format::f16;
    case DType::bf16:
      return cuda::Format::bf16;
    case DType::i64:
    case DType::u8:
      break;
  }
  return std::nullopt;
}

// The kernel's formats, or a config Error naming what the kernel does not take.
cuda::FusedAdamFormats kernel_formats(const OptimizerSpec& spec, const Formats& formats) {
  if (spec.type != OptimizerType::adam && spec.type != OptimizerType::adamw) {
    throw make_error(ErrorCategory::config,
                     "the CUDA optimizer runs Adam and AdamW only, not {}; run {} on the CPU "
                     "(offload_optimizer.device: cpu)",
                     optimizer_type_name(spec.type), optimizer_type_name(spec.type));
  }
  const std::optional<cuda::Format> grad = kernel_format(formats.grad);
  if (!grad) {
    throw make_error(ErrorCategory::config,
                     "the CUDA optimizer takes fp32, bf16 or fp16 gradients, not {}",
                     dtype_name(formats.grad));
  }
  if (formats.state != DType::f32 && formats.state != DType::bf16) {
    throw make_error(ErrorCategory::config,
                     "the CUDA optimizer keeps its state in fp32 or bf16, not {}",
                     dtype_name(formats.state));
  }
  if (formats.param_out != DType::bf16 && formats.param_out != DType::f16) {
    throw make_error(ErrorCategory::config,
                     "the CUDA optimizer writes its parameter copy in bf16 or fp16, not {}",
                     dtype_name(formats.param_out));
  }
  cuda::FusedAdamFormats result;
  result.grad = *grad;
  result.state = *kernel_format(formats.state);
  result.param_out = *kernel_format(formats.param_out);
  return result;
}

[[noreturn]] void throw_cuda_error(cudaError_t status, std::string_view what) {
  static_cast<void>(cudaGetLastError());  // leave no error behind for the next check
  throw make_error(ErrorCategory::device, "{} failed: {}: {}", what, cudaGetErrorName(status),
                   cudaGetErrorString(status));
}

// A usage Error from `caller` unless `data` (needed when `required`) is set and aligned to
// `dtype`.
void check_pointer(const char* caller, const void* data, DType dtype, bool required,
                   std::size_t slice, const char* name) {
  if (data == nullptr) {
    if (!required) return;
    throw make_error(ErrorCategory::usage, "CUDA optimizer {}: slice {} has no {} buffer", caller,
                     slice, name);
  }
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(dtype) != 0) {
    throw make_error(ErrorCategory::usage,
                     "CUDA optimizer {}: slice {}'s {} buffer at {} is not aligned to its "
                     "{}-byte {} elements",
                     caller, slice, name, data, dtype_size(dtype), dtype_name(dtype));
  }
}

// Describes the slices that describe(slice, tensor) accepts (returns true for) and calls
// launch(tensors, count, first_slice, last_slice) for each group of up to
// kFusedAdamMaxTensors of them, from an array on the stack.
template <class Describe, class Launch>
void for_each_group(std::span<const Slice> slices, Describe describe, Launch launch) {
  std::array<cuda::FusedAdamTensor, cuda::kFusedAdamMaxTensors> tensors;
  std::size_t filled = 0, first = 0, last = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    if (!describe(slices[i], tensors[filled])) continue;
    if (filled == 0) first = i;
    last = i;
    if (++filled == tensors.size()) {
      launch(tensors.data(), filled, first, last);
      filled = 0;
    }
  }
  if (filled > 0) launch(tensors.data(), filled, first, last);
}

// The CUDA stream behind `stream`, with its GPU made current on the calling thread (the
// kernels run there whatever the thread had current).
cudaStream_t activate(Stream& stream, std::string_view caller) {
  const cudaStream_t handle = static_cast<cudaStream_t>(stream.native());
  if (handle == nullptr) {
    throw make_error(ErrorCategory::usage,
                     "CUDA optimizer {}: the stream is not a CUDA stream (a CPU device's?)",
                     caller);
  }
  int ordinal = 0;
  cudaError_t status = cudaStreamGetDevice(handle, &ordinal);
  if (status != cudaSuccess) throw_cuda_error(status, "cudaStreamGetDevice(optimizer stream)");
  status = cudaSetDevice(ordinal);
  if (status != cudaSuccess) throw_cuda_error(status, "cudaSetDevice(optimizer stream's GPU)");
  return handle;
}

class CudaAdam final : public Optimizer {
 public:
  CudaAdam(const OptimizerSpec& spec, const Formats& formats)
      : spec_(spec), formats_(formats), kernel_formats_(kernel_formats(spec, formats)) {
    validate(spec, formats);
  }

  const OptimizerSpec& spec() const noexcept override { return spec_; }
  const Formats& formats() const noexcept override { return formats_; }

  std::string description() const override {
    return fmt::format(
        "{} on CUDA (multi-tensor): {} grads, {} state, {}", optimizer_type_name(spec_.type),
        dtype_name(formats_.grad), dtype_name(formats_.state),
        formats_.copy_out ? fmt::format("{} copy-out", dtype_name(formats_.param_out))
                          : std::string("no copy-out"));
  }

  void step(std::span<const Slice> slices, const StepHyper& hyper, Stream& stream) override {
    if (hyper.step < 1) {
      throw make_error(ErrorCategory::usage, "CUDA optimizer step: step {} (steps count from 1)",
                       hyper.step);
    }
    for (std::size_t i = 0; i < slices.size(); ++i) check_slice(slices[i], i);
    const cudaStream_t handle = activate(stream, "step");

    const double t = static_cast<double>(hyper.step);
    const double bias_correction1 = spec_.bias_correction ? 1.0 - std::pow(hyper.beta1, t) : 1.0;
    const double bias_correction2 = spec_.bias_correction ? 1.0 - std::pow(hyper.beta2, t) : 1.0;
    cuda::FusedAdamStep scalars;
    scalars.beta1 = static_cast<float>(hyper.beta1);
    scalars.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
    scalars.beta2 = static_cast<float>(hyper.beta2);
    scalars.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
    scalars.eps = static_cast<float>(spec_.eps);
    scalars.grad_scale = static_cast<float>(hyper.grad_scale);
    scalars.inverse_sqrt_bias_correction2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
    scalars.seed = hyper.seed;
    scalars.step = static_cast<std::uint64_t>(hyper.step);
    scalars.verdict = hyper.verdict;  // the kernel reads it when it runs
    scalars.loss_scale = hyper.loss_scale;
    scalars.max_norm = hyper.max_norm;

    const auto describe = [&](const Slice& slice, cuda::FusedAdamTensor& tensor) {
      if (slice.count == 0) return false;
      const double lr = hyper.lr * slice.lr_scale;
      tensor.master = slice.master;
      tensor.grad = slice.grad;
      tensor.exp_avg = slice.state[0];
      tensor.exp_avg_sq = slice.state[1];
      tensor.param_out = slice.param_out;
      tensor.count = slice.count;
      tensor.first_index = slice.first_index;
      tensor.step_size = static_cast<float>(lr / bias_correction1);
      if (spec_.type == OptimizerType::adam) {
        tensor.decay = 1.0f;
        tensor.l2 = static_cast<float>(slice.weight_decay);
      } else {
        tensor.decay = static_cast<float>(1.0 - lr * slice.weight_decay);
        tensor.l2 = 0.0f;
      }
      return true;
    };
    const auto launch = [&](const cuda::FusedAdamTensor* tensors, std::size_t count,
                            std::size_t first, std::size_t last) {
      const cudaError_t status =
          cuda::launch_fused_adam(kernel_formats_, scalars, tensors, count, handle);
      if (status != cudaSuccess) {
        throw_cuda_error(status,
                         fmt::format("the fused {} kernel (slices {} to {}, step {})",
                                     optimizer_type_name(spec_.type), first, last, hyper.step));
      }
    };
    for_each_group(slices, describe, launch);
  }

  void write_param_out(std::span<const Slice> slices, Stream& stream) override {
    for (std::size_t i = 0; i < slices.size(); ++i) {
      if (slices[i].count == 0) continue;
      check_pointer("write_param_out", slices[i].master, DType::f32, true, i, "master");
      check_pointer("write_param_out", slices[i].param_out, formats_.param_out, false, i,
                    "param_out");
    }
    const cudaStream_t handle = activate(stream, "write_param_out");
    const auto describe = [](const Slice& slice, cuda::FusedAdamTensor& tensor) {
      if (slice.count == 0 || slice.param_out == nullptr) return false;
      tensor = cuda::FusedAdamTensor{};
      tensor.master = slice.master;
      tensor.param_out = slice.param_out;
      tensor.count = slice.count;
      return true;
    };
    const auto launch = [&](const cuda::FusedAdamTensor* tensors, std::size_t count,
                            std::size_t first, std::size_t last) {
      const cudaError_t status =
          cuda::launch_param_out(kernel_formats_.param_out, tensors, count, handle);
      if (status != cudaSuccess) {
        throw_cuda_error(status,
                         fmt::format("the param_out kernel (slices {} to {})", first, last));
      }
    };
    for_each_group(slices, describe, launch);
  }

 private:
  void check_slice(const Slice& slice, std::size_t i) const {
    if (slice.count == 0) return;
    check_pointer("step", slice.master, DType::f32, true, i, "master");
    check_pointer("step", slice.grad, formats_.grad, true, i, "grad");
    check_pointer("step", slice.state[0], formats_.state, true, i, "state[0] (exp_avg)");
    check_pointer("step", slice.state[1], formats_.state, true, i, "state[1] (exp_avg_sq)");
    check_pointer("step", slice.param_out, formats_.param_out, false, i, "param_out");
    if (slice.master_from != nullptr || slice.state_from[0] != nullptr ||
        slice.state_from[1] != nullptr) {
      throw make_error(ErrorCategory::usage,
                       "CUDA optimizer step: slice {} asks to step from another copy of its "
                       "state (super_offload's speculated step), which only the CPU optimizer "
                       "does",
                       i);
    }
  }

  OptimizerSpec spec_;
  Formats formats_;
  cuda::FusedAdamFormats kernel_formats_;
};

}  // namespace

std::unique_ptr<Optimizer> create_cuda_optimizer(const OptimizerSpec& spec,
                                                 const Formats& formats) {
  return std::make_unique<CudaAdam>(spec, formats);
}

}  // namespace zero::optim
