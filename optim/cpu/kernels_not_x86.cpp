// On CPUs other than x86-64 there are no AVX tables; cpu_features() reports no AVX there, so
// these are never chosen, and they answer with the portable kernels if they were.
#include "optim/cpu/kernels.h"

namespace zero::optim::cpu {

Kernel avx2_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  return scalar_kernel(mode, type, grad, state, out);
}

Kernel avx512_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  return scalar_kernel(mode, type, grad, state, out);
}

}  // namespace zero::optim::cpu
