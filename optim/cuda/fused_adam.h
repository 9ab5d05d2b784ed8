// The launchers of the multi-tensor fused Adam/AdamW kernel and of its copy-out kernel: plain
// C++17 (no C++20), included by cuda_optimizer.cpp (g++) and fused_adam.cu (nvcc). The caller
// computes every per-step and per-tensor scalar in double and passes them as floats; the
// kernel does only the fp32 update of optim/spec.h per element:
//   g = l2 p + float(grad) grad_scale          (Adam: l2 = weight decay; AdamW: 0)
//   m = beta1 m + one_minus_beta1 g;   v = beta2 v + one_minus_beta2 (g g)
//   p = p decay - (step_size m) / (sqrt(v) inverse_sqrt_bias_correction2 + eps)
//                                            (AdamW: decay = 1 - lr wd; Adam: 1)
// each operation an IEEE fp32 operation rounded on its own, in that order (no contraction
// into FMA, no approximate sqrt or division): the operations of the portable CPU kernel
// (optim/cpu/kernel_body.h), so the two give the same bits. bf16 state is rounded
// stochastically as optim/rounding.h does, and the bf16/fp16 copy of p to nearest even as
// base/half.h does, bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace zero::optim::cuda {

// The formats of the buffers (the caller maps DType onto these).
enum class Format : int { f32 = 0, f16 = 1, bf16 = 2 };

// What is fixed for the optimizer's life.
struct FusedAdamFormats {
  Format grad = Format::f32;        // f32, f16 or bf16
  Format state = Format::f32;       // f32 or bf16
  Format param_out = Format::bf16;  // f16 or bf16, written where a tensor's param_out is set
};

// What is the same for every tensor of one step.
struct FusedAdamStep {
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float grad_scale = 1.0f;
  float inverse_sqrt_bias_correction2 = 1.0f;  // 1 / sqrt(1 - beta2^t); 1 without correction
  std::uint64_t seed = 0;  // the stochastic rounding of bf16 state: StepHyper::seed
  std::uint64_t step = 1;  // and StepHyper::step (as unsigned)
  // Optional (StepHyper::verdict): device memory holding the sum of squares of the scaled
  // gradients and a non-finite flag, read by each block when it runs. A nonzero flag: the block
  // leaves master and state and writes only param_out = round(master), as launch_param_out.
  // Otherwise grad_scale is replaced by optim::step_grad_scale of the norm,
  // computed in double as optim/spec.cpp does, from loss_scale and max_norm (0: no clipping).
  const float* verdict = nullptr;
  double loss_scale = 1.0;
  double max_norm = 0.0;
};

// One tensor (a Slice). Pointers are aligned to their element size; grad, exp_avg and
// exp_avg_sq are not null; param_out may be null (no copy-out). No two buffers overlap.
struct FusedAdamTensor {
  float* master = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;     // m, in FusedAdamFormats::state
  void* exp_avg_sq = nullptr;  // v, in FusedAdamFormats::state
  void* param_out = nullptr;
  std::size_t count = 0;
  std::uint64_t first_index = 0;  // the index of master[0] in the flat buffer (rounding)
  float step_size = 0.0f;         // lr * lr_scale / (1 - beta1^t), or without the division
  float decay = 1.0f;             // AdamW: 1 - lr * lr_scale * weight_decay; Adam: 1
  float l2 = 0.0f;                // Adam: weight_decay; AdamW: 0
};

// The tensors one kernel launch takes (its by-value argument holds this many descriptions).
// A call with more tensors, or with more chunks than one launch takes, launches again.
inline constexpr std::size_t kFusedAdamMaxTensors = 48;
// Elements per chunk: one CUDA block updates one chunk of one tensor.
inline constexpr std::size_t kFusedAdamChunk = 8192;

// Enqueues the update of `count` tensors on `stream` (asynchronous) and returns
// cudaGetLastError() after the last launch, or the first failing launch's error. Tensors of
// zero elements are skipped. cudaErrorInvalidValue for formats the kernel does not take or a
// pointer not aligned to its element size (nothing is launched then).
cudaError_t launch_fused_adam(const FusedAdamFormats& formats, const FusedAdamStep& step,
                              const FusedAdamTensor* tensors, std::size_t count,
                              cudaStream_t stream) noexcept;

// Enqueues param_out = round(master) (to nearest even, as base/half.h) for `count` tensors
// and writes nothing else; only master, param_out and count are read, and param_out must be
// set. param_out is f16 or bf16. Returns as launch_fused_adam does.
cudaError_t launch_param_out(Format param_out, const FusedAdamTensor* tensors, std::size_t count,
                             cudaStream_t stream) noexcept;

}  // namespace zero::optim::cuda
