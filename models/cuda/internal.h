// Launchers the CUDA layers share among their own files and nothing else includes: kernels that
// host-only C++ files (matmul.cpp, compiled without nvcc) need launched for them. Plain C++, as
// layers.h. Same conventions: asynchronous on `stream`, nothing launched for empty sizes, the
// cudaError_t of the launches returned as an int (0: none).
#pragma once

#include <cstddef>

#include "models/cuda/layers.h"

namespace zero::cuda_layers::internal {

// dst[c] += sum over the N rows of src[N, C] (rows `ld` >= C elements apart) of src[i, c], for
// the bias gradient of a matrix product (Matmul::backward). Deterministic, no atomics: the rows
// are split into R fixed chunks whose per-column partial sums (fp32, rows in order within a
// thread, threads in a fixed tree) go to scratch[R, C], then one pass sums each column's R
// partials in chunk order, adds dst and rounds once to bf16. R depends only on (N, C,
// scratch_floats): R * C <= scratch_floats, and R = 1 (no scratch used; scratch may then be
// null) when scratch holds fewer than 2 * C floats. ld < C is refused (cudaErrorInvalidValue).
int column_sums_add(Bf16* dst, const Bf16* src, int N, int C, int ld, float* scratch,
                    std::size_t scratch_floats, Stream stream);

}  // namespace zero::cuda_layers::internal
