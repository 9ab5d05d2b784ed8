// CPU emulation of CUDA (emulator/, docs/emulator.md): the asynchronous global-to-shared copies
// that models/cuda/async_copy.cuh wraps in inline PTX (cp.async, cp.async.commit_group,
// cp.async.wait_group); rewrite.py includes this header in its place, and it defines the same
// zero::cuda_layers functions.
//
// As the PTX ISA has them ("Data Movement and Conversion Instructions: cp.async"): each thread's
// copies are its own; a copy belongs to the thread's open group until cp.async.commit_group
// closes it; cp.async.wait_group N returns once every committed group of the thread but the N
// most recent has landed; the copied bytes are not defined before then, and other threads see
// them only after a barrier that follows the wait. The emulator makes the undefined visible
// (block.h): the destination turns to 0xff bytes (NaN) when the copy is issued, and the bytes
// land when the issuing thread waits for the group, so a missing wait or barrier reads NaN. A
// copy reads `bytes` (4, 8 or 16) from global memory when `read` is true, else none and writes
// zeros (the src-size operand 0); both addresses must be aligned to `bytes`, the source within
// one device allocation, the destination within the block's dynamic shared memory.
#pragma once

#include <cstdint>
#include <source_location>

#include <cuda_runtime.h>

namespace zero::cuda_layers {

template <int Bytes>
inline void copy_async(void* to_shared, const void* from_global, bool read,
                       std::source_location where = std::source_location::current()) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async moves 4, 8 or 16 bytes");
  const auto aligned = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % Bytes == 0;
  };
  if (!aligned(to_shared) || (read && !aligned(from_global))) {
    emu::fail("cp.async with an address not aligned to its size", where);
  }
  if (read && !emu::is_device_range(from_global, Bytes)) {
    emu::fail("cp.async from an address outside every device allocation", where);
  }
  emu::copy_async(to_shared, from_global, Bytes, read ? Bytes : 0, where);
}

inline void commit_copies(std::source_location where = std::source_location::current()) {
  emu::commit_copies(where);
}

template <int Pending>
inline void wait_copies(std::source_location where = std::source_location::current()) {
  static_assert(Pending >= 0, "a count of groups");
  emu::wait_copies(static_cast<unsigned>(Pending), where);
}

}  // namespace zero::cuda_layers
