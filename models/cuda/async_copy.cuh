// Asynchronous copies from global to shared memory (sm_80 and later): a thread issues copies
// that move while it computes, and waits for them by groups, so that a tile's loads overlap the
// products of the tile before (double buffering).
//
// Per the PTX ISA (cp.async, cp.async.commit_group, cp.async.wait_group): a thread's copies are
// its own; each joins the thread's open group until commit_copies closes it; wait_copies<N>()
// returns once every committed group of the thread but the N most recent has landed. The
// destination is undefined until then, and other threads may read it only after a
// __syncthreads that follows their waits. A copy with `read` false reads nothing and writes
// zeros (its src-size operand is 0): the tiles' rows past T and channels past hd.
#pragma once

#include <cstdint>

namespace zero::cuda_layers {

// Bytes (4, 8 or 16) from global `from_global` to shared `to_shared`, both aligned to Bytes.
// 16-byte copies bypass L1 (.cg), as tiles are read once per block.
template <int Bytes>
__device__ __forceinline__ void copy_async(void* to_shared, const void* from_global, bool read) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async moves 4, 8 or 16 bytes");
  const auto to = static_cast<std::uint32_t>(__cvta_generic_to_shared(to_shared));
  const int read_bytes = read ? Bytes : 0;
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from_global),
                 "r"(read_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(to), "l"(from_global),
                 "n"(Bytes), "r"(read_bytes)
                 : "memory");
  }
}

// Closes the thread's open group of copies.
__device__ __forceinline__ void commit_copies() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most Pending of the thread's committed groups are still in flight.
template <int Pending>
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

}  // namespace zero::cuda_layers
