// Picks a kernel from the table of the chosen ISA.
#include "base/error.h"
#include "optim/cpu/kernels.h"

namespace zero::optim::cpu {

Kernel find_kernel(CpuIsa isa, Mode mode, OptimizerType type, const Formats& formats,
                   bool copy_out) {
  const int out = !copy_out ? 0 : formats.param_out == DType::f16 ? 2 : 1;
  Kernel kernel = nullptr;
  switch (isa) {
    case CpuIsa::avx512:
      kernel = avx512_kernel(mode, type, formats.grad, formats.state, out);
      break;
    case CpuIsa::avx2:
      kernel = avx2_kernel(mode, type, formats.grad, formats.state, out);
      break;
    case CpuIsa::scalar:
      kernel = scalar_kernel(mode, type, formats.grad, formats.state, out);
      break;
  }
  ZERO_CHECK(kernel != nullptr, "no {} kernel for optimizer type {}", cpu_isa_name(isa),
             static_cast<int>(type));
  return kernel;
}

}  // namespace zero::optim::cpu
