// The CUDA embedding layers (layers.h): token (and, for the GPT, position) embeddings forward and
// backward, bf16 with fp32 sums, as the CPU layers (gpt::encoder_*, llama::embedding_*).
//
// Forward: one block per row (position), threads over the channels. Backward without atomics:
// dwte takes one block per distinct token (TokenGroups from group_positions), each thread one
// channel at a time, summing the token's positions in their group order; dwpe one block per
// position t, summing b = 0 .. B - 1 in order. Each gradient element is owned by one thread, so
// runs repeat bit for bit.
#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const bf16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}

// out[row, :] = wte[tokens[row], :] (+ wpe[row % T, :]); without wpe a copy of the bits.
__global__ void __launch_bounds__(kThreads)
    embedding_forward_kernel(bf16* __restrict__ out, const std::int32_t* __restrict__ tokens,
                             const bf16* __restrict__ wte, const bf16* __restrict__ wpe, int T,
                             int C) {
  const std::size_t row = blockIdx.x;
  const bf16* e = wte + static_cast<std::size_t>(tokens[row]) * C;
  bf16* o = out + row * C;
  if (wpe == nullptr) {
    for (int c = threadIdx.x; c < C; c += kThreads) o[c] = e[c];
  } else {
    const bf16* p = wpe + (row % static_cast<std::size_t>(T)) * C;
    for (int c = threadIdx.x; c < C; c += kThreads) {
      o[c] = __float2bfloat16_rn(load(e, c) + load(p, c));
    }
  }
}

// Block g: dwte[tokens[g], c] += the sum of dout[positions[p], c] for p in starts[g] ..
// starts[g + 1], in that order.
__global__ void __launch_bounds__(kThreads)
    embedding_backward_wte_kernel(bf16* __restrict__ dwte, const bf16* __restrict__ dout,
                                  const std::int32_t* __restrict__ positions,
                                  const std::int32_t* __restrict__ starts,
                                  const std::int32_t* __restrict__ tokens, int C) {
  const int group = blockIdx.x;
  const int first = starts[group];
  const int last = starts[group + 1];
  bf16* d = dwte + static_cast<std::size_t>(tokens[group]) * C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    float sum = 0.0f;
    for (int p = first; p < last; ++p) {
      sum += load(dout, static_cast<std::size_t>(positions[p]) * C + c);
    }
    d[c] = __float2bfloat16_rn(load(d, c) + sum);
  }
}

// Block t: dwpe[t, c] += the sum of dout[b * T + t, c] over b = 0 .. B - 1, in that order.
__global__ void __launch_bounds__(kThreads)
    embedding_backward_wpe_kernel(bf16* __restrict__ dwpe, const bf16* __restrict__ dout, int B,
                                  int T, int C) {
  const std::size_t t = blockIdx.x;
  bf16* d = dwpe + t * C;
  for (int c = threadIdx.x; c < C; c += kThreads) {
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) {
      sum += load(dout, (static_cast<std::size_t>(b) * T + t) * C + c);
    }
    d[c] = __float2bfloat16_rn(load(d, c) + sum);
  }
}

const bf16* as_bf16(const Bf16* p) {
  return reinterpret_cast<const bf16*>(p);
}
bf16* as_bf16(Bf16* p) {
  return reinterpret_cast<bf16*>(p);
}

}  // namespace

int embedding_forward(Bf16* out, const std::int32_t* tokens, const Bf16* wte, const Bf16* wpe,
                      int B, int T, int C, Stream stream) {
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  const auto rows = static_cast<unsigned>(B) * static_cast<unsigned>(T);
  embedding_forward_kernel<<<rows, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(out), tokens, as_bf16(wte), as_bf16(wpe), T, C);
  return static_cast<int>(cudaGetLastError());
}

// The scratch is not needed: every gradient element has one owner.
int embedding_backward(Bf16* dwte, Bf16* dwpe, const Bf16* dout, const std::int32_t* positions,
                       const std::int32_t* starts, const std::int32_t* tokens, int groups, int B,
                       int T, int C, float* /*scratch*/, Stream stream) {
  if (B <= 0 || T <= 0 || C <= 0) return 0;
  const auto s = static_cast<cudaStream_t>(stream);
  if (groups > 0) {
    embedding_backward_wte_kernel<<<static_cast<unsigned>(groups), kThreads, 0, s>>>(
        as_bf16(dwte), as_bf16(dout), positions, starts, tokens, C);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return static_cast<int>(status);
  }
  if (dwpe != nullptr) {
    embedding_backward_wpe_kernel<<<static_cast<unsigned>(T), kThreads, 0, s>>>(
        as_bf16(dwpe), as_bf16(dout), B, T, C);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace zero::cuda_layers
