// What an optimizer is (its algorithm and DeepSpeed's fixed parameters), what changes per step,
// and the flat views it updates. The engine owns every buffer; an optimizer only reads and
// writes the memory a Slice points at, so its state can live in pinned memory, on a GPU, or in
// buffers streamed from NVMe.
//
// The update, per element, with g = grad * grad_scale (+ weight_decay * p for L2 decay) and
// lr = hyper.lr * slice.lr_scale (all in fp32 on the CPU and GPU, in double in the oracle):
//   Adam/AdamW  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²
//               p = p (1 - lr wd [AdamW]) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
//               bc1 = 1 - b1^t, bc2 = 1 - b2^t with bias correction, else 1
//   Adagrad     v = v + g²;  p = p - lr g / (sqrt(v) + eps)                      (L2 decay)
//   Lion        c = b1 m + (1-b1) g;  p = p (1 - lr wd) - lr sign(c);  m = b2 m + (1-b2) g
//   SGD         with momentum μ: buf = g at t = 1, else μ buf + (1-dampening) g;
//               d = g + μ buf (Nesterov) or buf;  p = p - lr d                (L2 decay)
// (t is hyper.step.) The state buffers hold, in order: Adam m, v; Adagrad v; Lion m; SGD buf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/dtype.h"

namespace zero::optim {

enum class OptimizerType { adam, adamw, adagrad, lion, sgd };

std::string_view optimizer_type_name(OptimizerType type) noexcept;  // "Adam (L2 weight decay)"...
// The type's short name: "adam", "adamw", "adagrad", "lion", "sgd".
std::string_view optimizer_key(OptimizerType type) noexcept;
// The name of moment `k` (0 or 1) as PyTorch's optimizers call it in their state: Adam's
// "exp_avg" and "exp_avg_sq", Adagrad's "sum", Lion's "exp_avg", SGD's "momentum_buffer".
std::string_view state_name(OptimizerType type, int k) noexcept;

// DeepSpeed's optimizer.params, resolved (config reads them into this).
struct OptimizerSpec {
  OptimizerType type = OptimizerType::adamw;
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  double momentum = 0.0;   // SGD
  double dampening = 0.0;  // SGD
  bool nesterov = false;   // SGD

  bool has_betas() const noexcept {
    return type != OptimizerType::adagrad && type != OptimizerType::sgd;
  }
  // The number of state buffers per element: Adam/AdamW 2, Adagrad 1, Lion 1, SGD 1 with
  // momentum and 0 without.
  int state_buffers() const noexcept;
};

// The dtypes of the buffers an optimizer reads and writes; masters are always fp32.
struct Formats {
  DType grad = DType::f32;        // f32, bf16 or f16
  DType state = DType::f32;       // f32, or bf16 (stochastically rounded: see README)
  DType param_out = DType::bf16;  // bf16 or f16: the copy written when Slice::param_out is set
  bool copy_out = true;           // false: no slice sets param_out (fp32 training)
};

// What may change every step. The engine fills it from the LR schedule (OneCycle cycles beta1),
// the loss scaler and the clipping coefficient.
struct StepHyper {
  std::int64_t step = 1;  // this step's number, from 1 (bias correction, SGD's first step)
  double lr = 1e-3;       // before the slice's lr_scale
  double beta1 = 0.9;
  double beta2 = 0.999;
  double grad_scale = 1.0;  // multiplies every gradient on load: unscaling and clipping
  std::uint64_t seed = 0;   // the stochastic-rounding stream of bf16 state (fixed per run)
  // Optional: the step's verdict where the device wrote it, read when the step runs instead of
  // when it is queued, so that the host does not wait for the gradients' norm. verdict[0] is
  // the sum of squares of the scaled gradients over every rank, verdict[1] nonzero where one
  // of them was not finite. A nonzero flag makes the step leave the masters and the state as
  // they are and write only param_out from the masters (write_param_out's copy: where param_out
  // is staging, such as stages 1-2's all-gather block, it then holds the values); otherwise
  // grad_scale is replaced by step_grad_scale(unscaled_norm(verdict[0], loss_scale),
  // loss_scale, max_norm). Memory the step's stream reads (device memory for the CUDA
  // optimizer).
  const float* verdict = nullptr;
  double loss_scale = 1.0;  // with a verdict: the scale the gradients carry
  double max_norm = 0.0;    // with a verdict: gradient_clipping (0: none)
};

// The global norm of the unscaled gradients from the sum of squares of the scaled ones.
double unscaled_norm(float sum_squares, double loss_scale);
// A step's gradient scale: 1 / loss_scale, divided by DeepSpeed's clip coefficient
// (norm + 1e-6) / max_norm where max_norm > 0 and the coefficient exceeds 1. The CUDA
// optimizer restates it in double for a verdict on the device (optim/cuda/fused_adam.cu).
double step_grad_scale(double norm, double loss_scale, double max_norm);
// `hyper` with its verdict (read from host-addressable memory) applied: grad_scale set and no
// verdict left, or false where the verdict skips the step. True, unchanged, without one.
bool apply_verdict(StepHyper& hyper);

// One contiguous run of the flat buffers, with its parameter group's settings.
struct Slice {
  float* master = nullptr;              // fp32, updated in place
  const void* grad = nullptr;           // Formats::grad
  void* state[2] = {nullptr, nullptr};  // Formats::state, state_buffers() of them
  void* param_out = nullptr;            // optional: the updated parameter as Formats::param_out
  std::size_t count = 0;
  double weight_decay = 0.0;  // the group's (0 for a no-decay group)
  double lr_scale = 1.0;      // the group's
  // The position of master[0] in a numbering of all the elements stepped (the engine uses the
  // element's index in the model): stochastic rounding depends on it (and on seed and step)
  // only, so results do not depend on how the buffer is sliced, tiled, threaded or sharded.
  std::uint64_t first_index = 0;
  // Optional (the CPU optimizer only): where the step reads the master and state values it
  // updates, writing the results to master and state[] instead of in place, element for
  // element (super_offload's speculated steps: the copy read stays as it was, for a verdict
  // that undoes the step). Both or neither; buffers that do not overlap master and state[].
  // The results' stores bypass the caches where the ISA has non-temporal stores, so the step
  // moves the bytes of a step in place. Null: in place.
  const float* master_from = nullptr;
  const void* state_from[2] = {nullptr, nullptr};
};

// Throws a config Error naming the buffer and dtype when `formats` has a dtype the optimizers
// cannot take (gradients fp32/bf16/fp16, state fp32/bf16, copy-out bf16/fp16).
void validate(const OptimizerSpec& spec, const Formats& formats);

}  // namespace zero::optim
