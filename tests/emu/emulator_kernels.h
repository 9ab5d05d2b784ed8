// Kernels that check the CPU emulation of CUDA itself (emulator_kernels.cu, rewritten by
// rewrite.py as the layers are; test_emulator.cpp runs them). Each launcher launches on the
// default stream unless given one and returns cudaGetLastError() after its launch.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace emu_check {

// Per thread t of `blocks` x `threads`: calls times d[4t..4t+3] = mma(a regs, b regs, d) with
// the call's registers a[(call * T + t) * 4 ..], b[(call * T + t) * 2 ..], T = blocks * threads.
cudaError_t mma(const std::uint32_t* a, const std::uint32_t* b, float* d, int calls, int blocks,
                int threads);

// One warp's ldmatrix .x4 .trans (mma.cuh) from `count` rows of 8 bf16 copied to shared memory:
// lane l gives the address of row row_of[l]; out[4 l + i] = its register i.
cudaError_t ldmatrix_x4_trans(const std::uint16_t* rows, int count, const int* row_of,
                              std::uint32_t* out);

// cp.async (async_copy.cuh) in one block of `threads`: thread t copies from[4t .. 4t + 3] to the
// first region of shared memory (group 0) and from[4 (threads + t) ..] to the second (group 1),
// reading the source where t % 3 != 0 and writing zeros elsewhere; then out[6t ..] = word 0 of its
// first copy before any wait, word 3 of it and word 0 of its second after waiting for all but
// one group, word 0 of its neighbour's first after a __syncthreads, word 0 of its neighbour's
// second after waiting for all (no barrier), word 1 of it after a __syncthreads.
cudaError_t async_copies(const std::uint32_t* from, std::uint32_t* out, int threads);

// out_xor[t] = __shfl_xor_sync(in, lane_mask), out_down[t] = __shfl_down_sync(in, delta).
cudaError_t shuffles(const float* in, float* out_xor, float* out_down, int lane_mask,
                     unsigned delta, int threads);

// Each thread writes its cell of dynamic shared memory, then (with `barrier`) __syncthreads,
// then out[t] = its right neighbour's cell (the last thread: the first's). Cells hold
// 1 + rank + 1000 * block.
cudaError_t neighbours(float* out, bool barrier, int blocks, int threads);

// flag[0] = 1 from thread 0, launched with this shape and dynamic shared memory; max_shared >= 0
// sets the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize first (that error, if any, is
// returned without a launch).
cudaError_t touch(int* flag, dim3 grid, dim3 block, std::size_t shared_bytes, int max_shared,
                  cudaStream_t stream);

// Kernels that break CUDA's rules, each its own way; the emulator must abort naming the rule.
cudaError_t barrier_in_both_branches();    // __syncthreads in an if and in its else
cudaError_t barrier_after_return();        // half the block returns, half waits
cudaError_t shuffle_after_lanes_return();  // half of each warp returns before a shuffle
cudaError_t shuffle_against_barrier();     // half a warp shuffles, half waits at a barrier
cudaError_t read_past_the_end(const float* p, std::size_t n);  // reads p[n + 64]
cudaError_t copy_without_wait(const std::uint32_t* from);      // cp.async, commit, no wait: returns

}  // namespace emu_check
