// The per-ISA CPU optimizer kernels, as plain function pointers looked up once per optimizer:
// each instruction set's translation unit (kernels_scalar.cpp, kernels_avx2.cpp,
// kernels_avx512.cpp, built with their own flags) fills the same table from one templated
// body (kernel_body.h). The driver (cpu_optimizer.cpp) splits the work into tiles and threads
// and calls these on each piece.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/cpu_isa.h"
#include "base/dtype.h"
#include "optim/spec.h"

namespace zero::optim::cpu {

// 16-bit storage, distinguished by type so the templates pick the right conversions.
struct bf16_t {
  std::uint16_t bits;
};
struct f16_t {
  std::uint16_t bits;
};

// Per-slice constants of one step, computed once in double and rounded to fp32.
struct Coefficients {
  float grad_scale = 1.0f;
  float l2 = 0.0f;     // added to g as l2 * p (Adam, Adagrad, SGD)
  float decay = 1.0f;  // p *= decay before the update (AdamW, Lion)
  float lr = 0.0f;
  float step_size = 0.0f;  // Adam: lr / bc1
  float rbc2 = 1.0f;       // Adam: 1 / sqrt(bc2)
  float eps = 0.0f;
  float beta1 = 0.0f, one_minus_beta1 = 0.0f;
  float beta2 = 0.0f, one_minus_beta2 = 0.0f;
  float momentum = 0.0f, one_minus_dampening = 0.0f;  // SGD
  bool first_step = false;                            // SGD: buf = g
  bool nesterov = false;                              // SGD
  std::uint32_t rounding_key = 0;  // for the elements of this piece (one 2^32 block of indices)
};

// One piece of a slice: pointers already advanced to the piece's first element. The step
// reads the master and states at the `*_in` pointers and writes them at the others (the same
// pointers for a step in place; otherwise buffers that do not overlap them).
struct Piece {
  float* master;
  const void* grad;
  void* state0;
  void* state1;
  void* param_out;  // null: no copy-out (the kernel was chosen without one)
  std::size_t count;
  std::uint32_t first_index_low;  // low 32 bits of master[0]'s index (same 2^32 block for all)
  const float* master_in;
  const void* state0_in;
  const void* state1_in;
  // The master and state stores bypass the caches (non-temporal, where the ISA has them and
  // the buffers' alignment allows): for a step into another copy, whose lines nothing reads
  // soon, so that a line written is not first read into the cache. The kernel fences them.
  bool stream;
};

using Kernel = void (*)(const Piece& piece, const Coefficients& c);

enum class Mode {
  step,      // the optimizer's update
  floor,     // AdamW's loads and stores (fp32 master, grad, two states, optional copy-out)
             // with trivial arithmetic: the memory-bandwidth floor of the step
  copy_out,  // param_out = round(master) and nothing else (grad and state are not touched)
};

// The kernel of `isa` for this mode, algorithm and dtypes; `copy_out` says whether it writes
// Formats::param_out. Formats must have passed validate(). Never null.
Kernel find_kernel(CpuIsa isa, Mode mode, OptimizerType type, const Formats& formats,
                   bool copy_out);

// The per-ISA tables (each defined in its own translation unit; the AVX ones exist only on
// x86-64 and are called only when the CPU supports them). out: 0 none, 1 bf16, 2 fp16.
Kernel scalar_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out);
Kernel avx2_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out);
Kernel avx512_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out);

}  // namespace zero::optim::cpu
