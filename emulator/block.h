// CPU emulation of CUDA (emulator/, docs/emulator.md): the threads of a block and what they meet
// at. A launch runs its blocks one after another on the calling host thread; a block's threads are
// fibers (fiber.h, one stack each) that the scheduler switches between only where a CUDA thread
// would wait for others: __syncthreads, a warp shuffle, a warp's mma. Between those points a
// thread runs alone to its next one: threads start in rank order, leave a __syncthreads in the
// order they reached it, and a warp leaves a shuffle or mma ahead of every other warp. So a read
// that a missing barrier should have ordered after another thread's write sees the old (or
// poisoned) value, and a warp overwrites shared memory before slower warps have read it.
//
// The scheduler holds the kernels to what CUDA promises rather than to what usually works, and
// aborts with the kernel, its launch site, the block and the thread when they break it:
//   - every thread of the block reaches each __syncthreads, the same call in the same phase
//     (not one in each branch of an if), and none has returned before or while others wait;
//   - every lane of a warp takes part in each shuffle and mma (full masks only), the same
//     intrinsic in the same phase, and none has returned before or while its warp-mates wait;
//   - a block whose threads all wait and cannot go on (a deadlock) is reported, not hung;
//   - a thread has waited for every asynchronous copy it issued (cp.async) before it returns.
// A fault (a read past a device allocation, a fiber stack overflow) prints the same context
// before the process's own handler runs. What it cannot see: races that only another order of
// threads would expose (one order runs, the one above), what a block reads of another block's
// writes in the same launch (blocks run in order, so it is always there), shared memory left
// from the previous block in __shared__ arrays (they are statics; dynamic shared memory is
// poisoned per block), and anything about timing, occupancy or concurrency between streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>

#include "emulator/vector_types.h"

// The built-in variables, as globals: only one fiber runs at a time, and the scheduler sets
// threadIdx before it switches to a thread. (So one launch runs at a time, process-wide.)
inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

namespace emu {

// What a launch runs: body(closure) once per thread of every block.
struct Kernel {
  const char* name;            // as written at the launch, e.g. "forward_kernel<D>"
  std::source_location where;  // the launch
  void (*body)(const void* closure);
  const void* closure;
};

// Runs every block of `grid` in order, blockDim threads each, with `shared_bytes` of dynamic
// shared memory (filled with 0xff, NaN as floats and bf16, before each block). The caller has
// checked the shape against the device's limits.
void run_grid(const Kernel& kernel, dim3 grid, dim3 block, std::size_t shared_bytes);

// Within a kernel: the block's dynamic shared memory (16-byte aligned).
unsigned char* dynamic_shared();

// __syncthreads: waits until every thread of the block has arrived at the same call.
void sync_block(std::source_location where);

// What one lane hands to a warp collective (in) and gets back (out); each collective lays out
// its own words.
struct LaneWords {
  std::uint32_t in[12];
  std::uint32_t out[4];
};
struct WarpWords {
  LaneWords lane[32];
};

// The calling thread's lane (0..31) and its warp's words.
unsigned lane_id();
WarpWords& warp_words();

// A warp collective: the calling lane, having written its `in` words, waits until all 32 lanes
// of its warp have arrived with the same `what` and `mask` (0xffffffff only); the last to arrive
// runs complete(words), which fills every lane's `out`, and then all go on. A lane reads its
// `out` before its next collective, which cannot complete without it.
void sync_warp(const char* what, unsigned mask, void (*complete)(WarpWords&),
               std::source_location where);

// Whether [p, p + bytes) lies within the block's dynamic shared memory (the only shared memory
// the emulator tells apart: __shared__ arrays are host statics).
bool in_dynamic_shared(const void* p, std::size_t bytes);

// cp.async (async_copy_emu.h), per thread as on the GPU: `copy_async` queues a copy of `bytes`
// to `to` in dynamic shared memory, of which the first `read_bytes` come from `from` and the rest
// are zeros, and fills the destination with 0xff bytes at once; the copy lands only when the
// thread waits for its group. `commit_copies` closes the thread's open group; `wait_copies(n)`
// lands every committed group but the n most recent. So a read of a destination before its wait
// (or before the __syncthreads that follows other threads' waits) sees NaN, and a thread that
// returns with copies not landed is reported.
void copy_async(void* to, const void* from, unsigned bytes, unsigned read_bytes,
                std::source_location where);
void commit_copies(std::source_location where);
void wait_copies(unsigned pending, std::source_location where);

// Prints "emulated CUDA: " and the message, the kernel, block and thread when in one, and
// `where` unless it is empty (line 0), to stderr and aborts: the kernel broke a rule of CUDA's
// that the emulator checks.
[[noreturn]] void fail(const char* message, std::source_location where);

}  // namespace emu
