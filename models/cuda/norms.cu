// The CUDA norm layers (layers.h): LayerNorm and RMSNorm, forward and backward, on bf16 rows
// with fp32 statistics and accumulation, as the CPU layers (models/gpt/kernels.cpp,
// models/llama/kernels.cpp).
//
// Forward and input gradient: one block of kRowThreads per row. Thread j takes the channels
// j, j + kRowThreads, ... (coalesced), sums its share in channel order, and the block adds the
// shares in a fixed tree (warp shuffles, then the warp totals in warp order), so every run
// repeats bit for bit. Rows are re-read from global memory (L1/L2) rather than staged.
//
// Parameter gradients (no atomics): the rows are split into R blocks of consecutive rows
// (R from reduction_scratch_floats). A first kernel, one thread per (channel, row block), sums
// its rows in order into scratch[R, C] (LayerNorm's bias after the weight's, scratch[R + r, C]);
// a second, one thread per channel, sums the R partials in row-block order and adds the total to
// the bf16 gradient, rounding once.
//
// The forwards may first add a residual (residual_layernorm_forward, residual_rmsnorm_forward):
// each thread writes its channels of res = inp + add, rounded to bf16 as residual_forward does,
// and its later passes read them back (its own writes, from L1/L2): the same bits as the two
// kernels, one launch and one pass less over the rows.
//
// out, dinp and the gradients must not overlap the inputs (a backward's dresidual may be dinp;
// a forward's res may be its inp or add).
#include <cstddef>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kRowThreads = 256;  // one block per row
constexpr int kWarps = kRowThreads / 32;
constexpr int kChannelThreads = 256;  // parameter-gradient kernels: one thread per channel
constexpr float kLayerNormEps = 1e-5f;

__device__ __forceinline__ float load(const bf16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}

// The 32 lanes' values summed in a fixed tree; the total is valid in lane 0.
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The block's values summed in a fixed order (each warp's tree, then the warps in order); every
// thread gets the total. All kRowThreads threads must call it; `shared` holds kWarps floats.
__device__ float block_sum(float value, float* shared) {
  value = warp_sum(value);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) total += shared[w];
  __syncthreads();  // `shared` is free for the next sum
  return total;
}

// Row `row` of the norm's input: inp's, or with `add` the row of res = inp + add (bf16), which
// this thread writes for its channels first (res may be inp or add: each element is read before
// it is written, by the thread that writes it).
__device__ __forceinline__ const bf16* row_input(bf16* res, const bf16* inp, const bf16* add,
                                                 std::size_t row, int C) {
  const std::size_t first = row * C;
  if (add == nullptr) return inp + first;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    res[first + c] = __float2bfloat16_rn(load(inp, first + c) + load(add, first + c));
  }
  return res + first;
}

__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ mean,
                             float* __restrict__ rstd, bf16* res, const bf16* inp, const bf16* add,
                             const bf16* __restrict__ weight, const bf16* __restrict__ bias,
                             int C) {
  __shared__ float shared[kWarps];
  const std::size_t row = blockIdx.x;
  const bf16* x = row_input(res, inp, add, row, C);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < C; c += kRowThreads) sum += load(x, c);
  const float m = block_sum(sum, shared) / static_cast<float>(C);
  float squares = 0.0f;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    const float d = load(x, c) - m;
    squares += d * d;
  }
  const float variance = block_sum(squares, shared) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(variance + kLayerNormEps);
  bf16* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    o[c] = __float2bfloat16_rn((load(x, c) - m) * s * load(weight, c) + load(bias, c));
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = s;
  }
}

// dinp = base + (dn - mean(dn) - xhat * mean(dn * xhat)) * rstd, dn = weight * dout; base is
// dinp itself (added to), another buffer (the residual's gradient, which may be dinp) or null
// (zeros): so dinp and base are not restrict.
__global__ void __launch_bounds__(kRowThreads)
    layernorm_backward_input_kernel(bf16* dinp, const bf16* base, const bf16* __restrict__ dout,
                                    const bf16* __restrict__ inp, const bf16* __restrict__ weight,
                                    const float* __restrict__ mean, const float* __restrict__ rstd,
                                    int C) {
  __shared__ float shared[kWarps];
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* g = dout + row * C;
  const float m = mean[row];
  const float s = rstd[row];
  float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    const float xhat = (load(x, c) - m) * s;
    const float dn = load(weight, c) * load(g, c);
    sum_dn += dn;
    sum_dn_xhat += dn * xhat;
  }
  const float mean_dn = block_sum(sum_dn, shared) / static_cast<float>(C);
  const float mean_dn_xhat = block_sum(sum_dn_xhat, shared) / static_cast<float>(C);
  bf16* d = dinp + row * C;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    const float xhat = (load(x, c) - m) * s;
    const float dn = load(weight, c) * load(g, c);
    const float grad = (dn - mean_dn - xhat * mean_dn_xhat) * s;
    d[c] = __float2bfloat16_rn((base != nullptr ? load(base + row * C, c) : 0.0f) + grad);
  }
}

// out = x * rstd * weight, rounded once.
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_forward_kernel(bf16* __restrict__ out, float* __restrict__ rstd, bf16* res,
                           const bf16* inp, const bf16* add, const bf16* __restrict__ weight, int C,
                           float eps) {
  __shared__ float shared[kWarps];
  const std::size_t row = blockIdx.x;
  const bf16* x = row_input(res, inp, add, row, C);
  float squares = 0.0f;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    const float v = load(x, c);
    squares += v * v;
  }
  const float mean_square = block_sum(squares, shared) / static_cast<float>(C);
  const float s = 1.0f / sqrtf(mean_square + eps);
  bf16* o = out + row * C;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    o[c] = __float2bfloat16_rn(load(x, c) * s * load(weight, c));
  }
  if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = s;
}

// dinp = base + rstd * dn - x * rstd^3 * mean(dn * x), dn = weight * dout; base as LayerNorm's.
__global__ void __launch_bounds__(kRowThreads)
    rmsnorm_backward_input_kernel(bf16* dinp, const bf16* base, const bf16* __restrict__ dout,
                                  const bf16* __restrict__ inp, const bf16* __restrict__ weight,
                                  const float* __restrict__ rstd, int C) {
  __shared__ float shared[kWarps];
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* g = dout + row * C;
  const float s = rstd[row];
  float sum_dn_x = 0.0f;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    sum_dn_x += load(weight, c) * load(g, c) * load(x, c);
  }
  const float mean_dn_x = block_sum(sum_dn_x, shared) / static_cast<float>(C);
  bf16* d = dinp + row * C;
  for (int c = threadIdx.x; c < C; c += kRowThreads) {
    const float xc = load(x, c);
    const float dn = load(weight, c) * load(g, c);
    const float grad = s * dn - xc * s * s * s * mean_dn_x;
    d[c] = __float2bfloat16_rn((base != nullptr ? load(base + row * C, c) : 0.0f) + grad);
  }
}

// One thread per (channel, row block blockIdx.y of rows_per_block rows): the sums over its rows,
// in row order, of the weight's gradient terms into partials[blockIdx.y, C] and (LayerNorm) of
// the bias's into partials[gridDim.y + blockIdx.y, C]. LayerNorm's weight term is
// xhat * dout, RMSNorm's x * rstd * dout. A row block past the last row writes zeros.
template <bool kLayerNorm>
__global__ void __launch_bounds__(kChannelThreads)
    norm_partials_kernel(float* __restrict__ partials, const bf16* __restrict__ dout,
                         const bf16* __restrict__ inp, const float* __restrict__ mean,
                         const float* __restrict__ rstd, int N, int C, int rows_per_block) {
  const int c = blockIdx.x * kChannelThreads + threadIdx.x;
  if (c >= C) return;
  const int first = blockIdx.y * rows_per_block;
  const int last = min(N, first + rows_per_block);
  float dw = 0.0f, db = 0.0f;
  for (int i = first; i < last; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * C + c;
    const float g = load(dout, at);
    if constexpr (kLayerNorm) {
      dw += (load(inp, at) - mean[i]) * rstd[i] * g;
      db += g;
    } else {
      dw += load(inp, at) * rstd[i] * g;
    }
  }
  partials[static_cast<std::size_t>(blockIdx.y) * C + c] = dw;
  if constexpr (kLayerNorm) {
    partials[(static_cast<std::size_t>(gridDim.y) + blockIdx.y) * C + c] = db;
  }
}

// dweight[c] += the sum of partials[0 .. blocks, c] in order (dbias from the second half when
// not null), one thread per channel.
__global__ void __launch_bounds__(kChannelThreads)
    norm_finish_kernel(bf16* __restrict__ dweight, bf16* __restrict__ dbias,
                       const float* __restrict__ partials, int blocks, int C) {
  const int c = blockIdx.x * kChannelThreads + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f;
  for (int b = 0; b < blocks; ++b) dw += partials[static_cast<std::size_t>(b) * C + c];
  dweight[c] = __float2bfloat16_rn(load(dweight, c) + dw);
  if (dbias != nullptr) {
    float db = 0.0f;
    for (int b = 0; b < blocks; ++b) {
      db += partials[(static_cast<std::size_t>(blocks) + b) * C + c];
    }
    dbias[c] = __float2bfloat16_rn(load(dbias, c) + db);
  }
}

const bf16* as_bf16(const Bf16* p) {
  return reinterpret_cast<const bf16*>(p);
}
bf16* as_bf16(Bf16* p) {
  return reinterpret_cast<bf16*>(p);
}

unsigned channel_blocks(int C) {
  return static_cast<unsigned>((C + kChannelThreads - 1) / kChannelThreads);
}

// The parameter gradients of either norm (dbias null for RMSNorm, mean unused there): partials
// over the row blocks that reduction_scratch_floats(N, C) makes room for, then the sums.
template <bool kLayerNorm>
cudaError_t reduce_parameter_gradients(bf16* dweight, bf16* dbias, const bf16* dout,
                                       const bf16* inp, const float* mean, const float* rstd, int N,
                                       int C, float* scratch, cudaStream_t stream) {
  const int blocks =
      static_cast<int>(reduction_scratch_floats(N, C) / (2 * static_cast<std::size_t>(C)));
  const int rows_per_block = (N + blocks - 1) / blocks;
  const dim3 grid(channel_blocks(C), static_cast<unsigned>(blocks));
  norm_partials_kernel<kLayerNorm>
      <<<grid, kChannelThreads, 0, stream>>>(scratch, dout, inp, mean, rstd, N, C, rows_per_block);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  norm_finish_kernel<<<channel_blocks(C), kChannelThreads, 0, stream>>>(dweight, dbias, scratch,
                                                                        blocks, C);
  return cudaGetLastError();
}

}  // namespace

int layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* inp, const Bf16* weight,
                      const Bf16* bias, int N, int C, Stream stream) {
  return residual_layernorm_forward(nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C,
                                    stream);
}

int residual_layernorm_forward(Bf16* res, Bf16* out, float* mean, float* rstd, const Bf16* a,
                               const Bf16* b, const Bf16* weight, const Bf16* bias, int N, int C,
                               Stream stream) {
  if (N <= 0 || C <= 0) return 0;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(
      as_bf16(out), mean, rstd, as_bf16(res), as_bf16(a), as_bf16(b), as_bf16(weight),
      as_bf16(bias), C);
  return static_cast<int>(cudaGetLastError());
}

int layernorm_backward(Bf16* dinp, Bf16* dweight, Bf16* dbias, const Bf16* dout, const Bf16* inp,
                       const Bf16* weight, const float* mean, const float* rstd, int N, int C,
                       float* scratch, Stream stream, Into into, const Bf16* dresidual) {
  if (N <= 0 || C <= 0) return 0;
  if (into == Into::add && dresidual != nullptr) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  layernorm_backward_input_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, s>>>(
      as_bf16(dinp), as_bf16(into == Into::add ? dinp : dresidual), as_bf16(dout), as_bf16(inp),
      as_bf16(weight), mean, rstd, C);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return static_cast<int>(status);
  return static_cast<int>(reduce_parameter_gradients<true>(
      as_bf16(dweight), as_bf16(dbias), as_bf16(dout), as_bf16(inp), mean, rstd, N, C, scratch, s));
}

int rmsnorm_forward(Bf16* out, float* rstd, const Bf16* inp, const Bf16* weight, int N, int C,
                    float eps, Stream stream) {
  return residual_rmsnorm_forward(nullptr, out, rstd, inp, nullptr, weight, N, C, eps, stream);
}

int residual_rmsnorm_forward(Bf16* res, Bf16* out, float* rstd, const Bf16* a, const Bf16* b,
                             const Bf16* weight, int N, int C, float eps, Stream stream) {
  if (N <= 0 || C <= 0) return 0;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(
      as_bf16(out), rstd, as_bf16(res), as_bf16(a), as_bf16(b), as_bf16(weight), C, eps);
  return static_cast<int>(cudaGetLastError());
}

int rmsnorm_backward(Bf16* dinp, Bf16* dweight, const Bf16* dout, const Bf16* inp,
                     const Bf16* weight, const float* rstd, int N, int C, float* scratch,
                     Stream stream, Into into, const Bf16* dresidual) {
  if (N <= 0 || C <= 0) return 0;
  if (into == Into::add && dresidual != nullptr) return cudaErrorInvalidValue;
  const auto s = static_cast<cudaStream_t>(stream);
  rmsnorm_backward_input_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, s>>>(
      as_bf16(dinp), as_bf16(into == Into::add ? dinp : dresidual), as_bf16(dout), as_bf16(inp),
      as_bf16(weight), rstd, C);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return static_cast<int>(status);
  return static_cast<int>(reduce_parameter_gradients<false>(
      as_bf16(dweight), nullptr, as_bf16(dout), as_bf16(inp), nullptr, rstd, N, C, scratch, s));
}

}  // namespace zero::cuda_layers
