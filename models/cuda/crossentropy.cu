// The output layer's fused softmax, cross-entropy and its backward, and its forward alone for
// evaluation (layers.h), on rows of logits of any stride (a padded vocabulary), and the bias
// gradient's column sums that matmul.cpp (host C++, no kernels of its own) launches through
// internal.h. Every reduction runs in a fixed order (per-thread sums in index order, then a
// fixed tree): runs repeat bit for bit, with no atomics.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/internal.h"
#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ bf16 store(float x) {
  return __float2bfloat16_rn(x);
}

cudaStream_t as_stream(Stream stream) {
  return static_cast<cudaStream_t>(stream);
}

// ---- Cross-entropy: one block per row ----

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / 32;

// The maximum and the sum over the block, the same value (and the same bits: one fixed order)
// in every thread. `partial` holds kRowWarps floats; it is free again on return.
__device__ float block_max(float v, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = partial[0];
  for (int w = 1; w < kRowWarps; ++w) r = fmaxf(r, partial[w]);
  __syncthreads();
  return r;
}

// A butterfly: lane i adds x_i + x_{i^k} and lane i^k adds x_{i^k} + x_i, the same float, so
// every lane ends with the same sum.
__device__ float block_sum(float v, float* partial) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float r = partial[0];
  for (int w = 1; w < kRowWarps; ++w) r += partial[w];
  __syncthreads();
  return r;
}

// A row's max and sum of exp(z - max) over its V logits z, the same bits in every thread, and
// its loss written by thread 0: log(sum) + max - z[target] (NaN for a target >= V). Each thread
// reads only its own columns (v = tid + k * kRowThreads), and z[target] is read (by thread 0)
// before the reductions' barriers, so a caller may overwrite its own columns afterwards.
struct RowSoftmax {
  float max, sum;
};

__device__ RowSoftmax row_softmax(const bf16* z, int target, int V, float* loss, float* partial) {
  const float z_target = (threadIdx.x == 0 && target < V) ? load(z[target]) : 0.0f;
  float max = -INFINITY;
  for (int v = threadIdx.x; v < V; v += kRowThreads) max = fmaxf(max, load(z[v]));
  max = block_max(max, partial);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += kRowThreads) sum += expf(load(z[v]) - max);
  sum = block_sum(sum, partial);
  if (threadIdx.x == 0) *loss = target < V ? (max + logf(sum)) - z_target : NAN;
  return {max, sum};
}

// Row blockIdx.x, `ld` elements from the previous one: its loss, and its V logits overwritten
// with (softmax - onehot) * dloss (row_softmax: the in-place write races with nothing). The
// columns V..ld are neither read nor written.
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_kernel(bf16* __restrict__ logits, std::size_t ld, float* __restrict__ losses,
                        const std::int32_t* __restrict__ targets, float dloss, int V) {
  __shared__ float partial[kRowWarps];
  const std::size_t row = blockIdx.x;
  bf16* z = logits + row * ld;
  const int target = targets[row];
  if (target < 0) {  // no loss here: the whole block leaves together
    for (int v = threadIdx.x; v < V; v += kRowThreads) z[v] = store(0.0f);
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  const RowSoftmax softmax = row_softmax(z, target, V, &losses[row], partial);
  const float inverse = 1.0f / softmax.sum;
  for (int v = threadIdx.x; v < V; v += kRowThreads) {
    const float p = expf(load(z[v]) - softmax.max) * inverse;
    z[v] = store((v == target ? p - 1.0f : p) * dloss);
  }
}

// The same losses (the same bits) without the backward: the logits are only read.
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_forward_kernel(const bf16* __restrict__ logits, std::size_t ld,
                                float* __restrict__ losses,
                                const std::int32_t* __restrict__ targets, int V) {
  __shared__ float partial[kRowWarps];
  const std::size_t row = blockIdx.x;
  const int target = targets[row];
  if (target < 0) {
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  row_softmax(logits + row * ld, target, V, &losses[row], partial);
}

// ---- Column sums for the bias gradient ----

constexpr int kSumColumns = 64;  // columns per block, one per thread of a row lane
constexpr int kSumLanes = 4;     // row lanes: thread (x, y) sums rows y, y + 4, ... of column x
constexpr int kSumThreads = kSumColumns * kSumLanes;
constexpr int kRowsPerChunk = 256;  // the rows a chunk aims at (fewer chunks when scratch is short)
constexpr int kMaxChunks = 256;
constexpr int kFinishThreads = 256;

// Block (column tile blockIdx.x, chunk blockIdx.y) sums rows [chunk * rows_per_chunk, + rows)
// of its 64 columns (rows `ld` elements apart); with `dst` set (a single chunk) it adds the sums
// into dst, else it writes them to partials[chunk, c].
__global__ void __launch_bounds__(kSumThreads)
    column_partials_kernel(const bf16* __restrict__ src, int N, int C, std::size_t ld,
                           int rows_per_chunk, float* __restrict__ partials,
                           bf16* __restrict__ dst) {
  __shared__ float lanes[kSumLanes][kSumColumns];
  const int x = threadIdx.x % kSumColumns;
  const int y = threadIdx.x / kSumColumns;
  const int c = blockIdx.x * kSumColumns + x;
  const int chunk = blockIdx.y;
  const int first = chunk * rows_per_chunk;
  const int end = first + min(rows_per_chunk, N - first);
  float sum = 0.0f;
  if (c < C) {
    for (int i = first + y; i < end; i += kSumLanes) {
      sum += load(src[static_cast<std::size_t>(i) * ld + c]);
    }
  }
  lanes[y][x] = sum;
  __syncthreads();
  if (y != 0 || c >= C) return;
  float total = lanes[0][x];
  for (int lane = 1; lane < kSumLanes; ++lane) total += lanes[lane][x];
  if (dst != nullptr) {
    dst[c] = store(load(dst[c]) + total);
  } else {
    partials[static_cast<std::size_t>(chunk) * C + c] = total;
  }
}

// dst[c] += sum of partials[0..chunks, c], chunks in order.
__global__ void __launch_bounds__(kFinishThreads)
    column_finish_kernel(bf16* __restrict__ dst, const float* __restrict__ partials, int chunks,
                         int C) {
  const int c = blockIdx.x * kFinishThreads + threadIdx.x;
  if (c >= C) return;
  float total = 0.0f;
  for (int r = 0; r < chunks; ++r) total += partials[static_cast<std::size_t>(r) * C + c];
  dst[c] = store(load(dst[c]) + total);
}

}  // namespace

int crossentropy_fused(Bf16* logits, int ld, float* losses, const std::int32_t* targets,
                       float dloss, int N, int V, Stream stream) {
  if (N <= 0 || V <= 0) return 0;
  if (ld < V) return cudaErrorInvalidValue;
  crossentropy_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, as_stream(stream)>>>(
      reinterpret_cast<bf16*>(logits), static_cast<std::size_t>(ld), losses, targets, dloss, V);
  return static_cast<int>(cudaGetLastError());
}

int crossentropy_forward(const Bf16* logits, int ld, float* losses, const std::int32_t* targets,
                         int N, int V, Stream stream) {
  if (N <= 0 || V <= 0) return 0;
  if (ld < V) return cudaErrorInvalidValue;
  crossentropy_forward_kernel<<<static_cast<unsigned>(N), kRowThreads, 0, as_stream(stream)>>>(
      reinterpret_cast<const bf16*>(logits), static_cast<std::size_t>(ld), losses, targets, V);
  return static_cast<int>(cudaGetLastError());
}

namespace internal {

int column_sums_add(Bf16* dst, const Bf16* src, int N, int C, int ld, float* scratch,
                    std::size_t scratch_floats, Stream stream) {
  if (N <= 0 || C <= 0) return 0;
  if (ld < C) return cudaErrorInvalidValue;
  const auto stride = static_cast<std::size_t>(ld);
  // Chunks of about kRowsPerChunk rows, as many as scratch holds (at most kMaxChunks); the
  // count is recomputed from the rows per chunk so that no chunk is empty.
  std::size_t chunks = (static_cast<std::size_t>(N) + kRowsPerChunk - 1) / kRowsPerChunk;
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  const std::size_t room = scratch == nullptr ? 0 : scratch_floats / static_cast<std::size_t>(C);
  if (chunks > room) chunks = room;
  if (chunks < 2) chunks = 1;
  const int rows_per_chunk = static_cast<int>((static_cast<std::size_t>(N) + chunks - 1) / chunks);
  chunks = (static_cast<std::size_t>(N) + rows_per_chunk - 1) / rows_per_chunk;
  const dim3 grid((C + kSumColumns - 1) / kSumColumns, static_cast<unsigned>(chunks));
  const cudaStream_t s = as_stream(stream);
  bf16* out = reinterpret_cast<bf16*>(dst);
  const bf16* in = reinterpret_cast<const bf16*>(src);
  if (chunks == 1) {
    column_partials_kernel<<<grid, kSumThreads, 0, s>>>(in, N, C, stride, rows_per_chunk, nullptr,
                                                        out);
    return static_cast<int>(cudaGetLastError());
  }
  column_partials_kernel<<<grid, kSumThreads, 0, s>>>(in, N, C, stride, rows_per_chunk, scratch,
                                                      nullptr);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) return static_cast<int>(launched);
  column_finish_kernel<<<(C + kFinishThreads - 1) / kFinishThreads, kFinishThreads, 0, s>>>(
      out, scratch, static_cast<int>(chunks), C);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace internal
}  // namespace zero::cuda_layers
