// The emulator's own check kernels (emulator_kernels.h), in CUDA as the layers are written, so
// that they go through rewrite.py too: a launch without arguments, template-free and
// multi-line launches, `extern __shared__` and the mma.cuh and async_copy.cuh includes.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "emulator_kernels.h"
#include "models/cuda/async_copy.cuh"
#include "models/cuda/mma.cuh"

namespace emu_check {
namespace {

__global__ void mma_kernel(const std::uint32_t* a, const std::uint32_t* b, float* d, int calls) {
  const unsigned total = gridDim.x * blockDim.x;
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = d[t * 4 + i];
  for (int call = 0; call < calls; ++call) {
    const std::size_t at = static_cast<std::size_t>(call) * total + t;
    const std::uint32_t ar[4] = {a[at * 4], a[at * 4 + 1], a[at * 4 + 2], a[at * 4 + 3]};
    const std::uint32_t br[2] = {b[at * 2], b[at * 2 + 1]};
    zero::cuda_layers::mma_bf16_16816(acc, ar, br);
  }
  for (int i = 0; i < 4; ++i) d[t * 4 + i] = acc[i];
}

// One warp: the rows to shared memory, then each lane gives the address of row row_of[lane].
__global__ void ldmatrix_kernel(const std::uint16_t* rows, int count, const int* row_of,
                                std::uint32_t* out) {
  extern __shared__ std::uint16_t tile[];
  for (int e = threadIdx.x; e < count * 8; e += 32) tile[e] = rows[e];
  __syncthreads();
  std::uint32_t r[4];
  zero::cuda_layers::load_matrices_x4_trans(r, tile + 8 * row_of[threadIdx.x]);
  for (int i = 0; i < 4; ++i) out[threadIdx.x * 4 + i] = r[i];
}

// Thread t copies 16 bytes to each of two regions of shared memory, one group each (reading the
// source for t % 3 != 0, zeros else), and records words of them as it waits (async_copies in
// emulator_kernels.h).
__global__ void async_copy_kernel(const std::uint32_t* from, std::uint32_t* out) {
  extern __shared__ std::uint32_t regions[];
  const unsigned t = threadIdx.x, n = blockDim.x, next = (t + 1) % n;
  std::uint32_t* first = regions;
  std::uint32_t* second = regions + 4 * n;
  const bool read = t % 3 != 0;
  zero::cuda_layers::copy_async<16>(first + 4 * t, from + 4 * t, read);
  zero::cuda_layers::commit_copies();
  zero::cuda_layers::copy_async<16>(second + 4 * t, from + 4 * (n + t), read);
  zero::cuda_layers::commit_copies();
  std::uint32_t* mine = out + 6 * t;
  mine[0] = first[4 * t];
  zero::cuda_layers::wait_copies<1>();
  mine[1] = first[4 * t + 3];
  mine[2] = second[4 * t];
  __syncthreads();
  mine[3] = first[4 * next];
  zero::cuda_layers::wait_copies<0>();
  mine[4] = second[4 * next];  // the neighbour has not waited (no barrier since)
  __syncthreads();
  mine[5] = second[4 * next + 1];
}

__global__ void copy_without_wait_kernel(const std::uint32_t* from) {
  extern __shared__ std::uint32_t region[];
  zero::cuda_layers::copy_async<4>(region + threadIdx.x, from + threadIdx.x, true);
  zero::cuda_layers::commit_copies();
}

__global__ void shuffle_kernel(const float* in, float* out_xor, float* out_down, int lane_mask,
                               unsigned delta) {
  const unsigned t = threadIdx.x;
  out_xor[t] = __shfl_xor_sync(0xffffffffu, in[t], lane_mask);
  out_down[t] = __shfl_down_sync(0xffffffffu, in[t], delta);
}

__global__ void neighbour_kernel(float* out, bool barrier) {
  extern __shared__ float cells[];
  cells[threadIdx.x] = static_cast<float>(1 + threadIdx.x + 1000 * blockIdx.x);
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = cells[(threadIdx.x + 1) % blockDim.x];
}

__global__ void touch_kernel(int* flag) {
  if (threadIdx.x == 0 && blockIdx.x == 0) flag[0] = 1;
}

__global__ void barrier_in_both_branches_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void barrier_after_return_kernel() {
  if (threadIdx.x >= 32) return;
  __syncthreads();
}

__global__ void shuffle_after_lanes_return_kernel() {
  if (threadIdx.x % 32 >= 16) return;
  const float v = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  (void)v;
}

__global__ void shuffle_against_barrier_kernel() {
  if (threadIdx.x < 16) {
    const float v = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    (void)v;
  } else {
    __syncthreads();
  }
}

// 256 bytes past the end: past cudaMalloc's rounding, whatever n.
__global__ void read_past_the_end_kernel(const float* p, std::size_t n, float* sink) {
  sink[0] = p[n + 64];
}

}  // namespace

cudaError_t mma(const std::uint32_t* a, const std::uint32_t* b, float* d, int calls, int blocks,
                int threads) {
  mma_kernel<<<blocks, threads>>>(a, b, d, calls);
  return cudaGetLastError();
}

cudaError_t ldmatrix_x4_trans(const std::uint16_t* rows, int count, const int* row_of,
                              std::uint32_t* out) {
  ldmatrix_kernel<<<1, 32, static_cast<std::size_t>(count) * 16>>>(rows, count, row_of, out);
  return cudaGetLastError();
}

cudaError_t async_copies(const std::uint32_t* from, std::uint32_t* out, int threads) {
  const std::size_t bytes = static_cast<std::size_t>(threads) * 32;
  async_copy_kernel<<<1, threads, bytes>>>(from, out);
  return cudaGetLastError();
}

cudaError_t copy_without_wait(const std::uint32_t* from) {
  copy_without_wait_kernel<<<1, 32, 32 * sizeof(std::uint32_t)>>>(from);
  return cudaGetLastError();
}

cudaError_t shuffles(const float* in, float* out_xor, float* out_down, int lane_mask,
                     unsigned delta, int threads) {
  shuffle_kernel<<<1, threads>>>(in, out_xor, out_down, lane_mask, delta);
  return cudaGetLastError();
}

cudaError_t neighbours(float* out, bool barrier, int blocks, int threads) {
  const std::size_t cells = static_cast<std::size_t>(threads) * sizeof(float);
  neighbour_kernel<<<blocks, threads, cells>>>(out, barrier);
  return cudaGetLastError();
}

cudaError_t touch(int* flag, dim3 grid, dim3 block, std::size_t shared_bytes, int max_shared,
                  cudaStream_t stream) {
  if (max_shared >= 0) {
    const cudaError_t set =
        cudaFuncSetAttribute(touch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_shared);
    if (set != cudaSuccess) return set;
  }
  touch_kernel<<<grid, block, shared_bytes, stream>>>(flag);
  return cudaGetLastError();
}

cudaError_t barrier_in_both_branches() {
  barrier_in_both_branches_kernel<<<1, 32>>>();
  return cudaGetLastError();
}

cudaError_t barrier_after_return() {
  barrier_after_return_kernel<<<1, 64>>>();
  return cudaGetLastError();
}

cudaError_t shuffle_after_lanes_return() {
  shuffle_after_lanes_return_kernel<<<1, 64>>>();
  return cudaGetLastError();
}

cudaError_t shuffle_against_barrier() {
  shuffle_against_barrier_kernel<<<1, 32>>>();
  return cudaGetLastError();
}

cudaError_t read_past_the_end(const float* p, std::size_t n) {
  float* sink = nullptr;
  const cudaError_t allocated = cudaMalloc(&sink, sizeof(float));
  if (allocated != cudaSuccess) return allocated;
  read_past_the_end_kernel<<<1, 1>>>(p, n, sink);
  const cudaError_t launched = cudaGetLastError();
  cudaFree(sink);
  return launched;
}

}  // namespace emu_check
