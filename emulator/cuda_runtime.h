// CPU emulation of CUDA (emulator/, docs/emulator.md): the part of the CUDA runtime that the
// models' CUDA layers (models/cuda) and their tests (tests/gpu/test_model_layers_*.cpp) use, so
// that the same sources compile with g++ and run on the CPU. emulator/rewrite.py turns a .cu file
// into C++ this header compiles: launches `k<<<grid, block, smem, stream>>>(args)` become
// `emu::Launch("k", grid, block, smem, stream).run(k, args)`, `extern __shared__` arrays become
// the block's dynamic shared memory, and the inline PTX of mma.cuh and async_copy.cuh becomes
// mma_emu.h and async_copy_emu.h.
//
// What it is: kernels run when launched, synchronously, each block's threads as fibers on the
// launching thread, blocks one after another (block.h: what the scheduler checks and what it
// cannot see). Device memory is host memory with a guard page after each allocation (a read
// past its end, rounded up to 256 bytes as on the GPU, faults), filled with 0xff (NaN) when
// allocated. The launch shape, dynamic shared memory (against cudaFuncSetAttribute) and
// streams are checked against an sm_80 device, the least this project builds for, and a bad
// launch is refused with the error a GPU gives, through cudaGetLastError. A kernel's pointer
// arguments must point into device memory, and cudaMemcpy's pointers and size lie where its
// kind says.
//
// Its limits: one device; every call synchronous, so streams never run concurrently and a
// missing synchronisation cannot show; one host thread at a time calls it; only full-warp
// masks and width 32 in shuffles; no atomics, no cooperative groups, no __launch_bounds__ or
// register limits (the macro is dropped), no timing.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include <math.h>  // the C math functions kernels call unqualified: expf, fmaxf, ...

#include "emulator/block.h"
#include "emulator/vector_types.h"

// ---- Qualifiers: host C++ has no address spaces; __shared__ is one object per kernel ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one at a time, so one instance serves each in turn

// Device code's min and max (CUDA declares them globally).
using std::max;
using std::min;

// ---- Errors (the values of CUDA's driver_types.h) ----

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999,
};
using cudaError_t = cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct CUstream_st;
using cudaStream_t = CUstream_st*;

// ---- The host API ----

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);

cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind);
// `height` rows of `width` bytes, `to_pitch` and `from_pitch` bytes apart, each row as cudaMemcpy
// (synchronous, as every call here; the stream must exist).
cudaError_t cudaMemcpy2DAsync(void* to, std::size_t to_pitch, const void* from,
                              std::size_t from_pitch, std::size_t width, std::size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream);

// As cudaMemcpy (synchronous, as every call here; the stream must exist).
cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
// `bytes` of device memory set to the byte `value`; the range must be device memory.
cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes,
                            cudaStream_t stream = nullptr);

constexpr unsigned cudaStreamDefault = 0x00;
constexpr unsigned cudaStreamNonBlocking = 0x01;
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();

// Pinned host memory: host memory from malloc (copies to and from it check it is not device
// memory, as with any host pointer); cudaFreeHost takes only what cudaMallocHost gave.
cudaError_t cudaMallocHost(void** pointer, std::size_t bytes);
cudaError_t cudaFreeHost(void* pointer);

// Events are handles, as streams are: every call here completes the work it queues, so an
// event is complete once recorded, at the host's time then. Recording checks the stream,
// synchronizing checks the event; the elapsed time needs two recorded timing events.
struct CUevent_st;
using cudaEvent_t = CUevent_st*;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventDisableTiming = 0x02;
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// One device, 0: cudaSetDevice accepts it alone; its properties name it "emulated sm_80".
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
};
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);

namespace emu {
// Host memory that stands for device memory: a CPU engine's buffers, which the CUDA models read
// and write as a GPU engine's (tests/emu/cuda_side_emulated.cpp). A pointer in no device
// allocation passes the checks device memory passes (kernel arguments, copies, the fake
// cuBLASLt) when `judge` says that [pointer, pointer + bytes) is such memory now; null ends it.
using HostMemoryJudge = bool (*)(const void* pointer, std::size_t bytes, void* context);
void accept_host_memory(HostMemoryJudge judge, void* context);
}  // namespace emu

namespace emu {
cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value);
}
template <class T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attribute, int value) {
  return emu::set_function_attribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

// ---- Launches ----

namespace emu {

// cudaSuccess when `kernel` may be launched so on the emulated sm_80, else the error a GPU
// reports for it.
cudaError_t check_launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                         cudaStream_t stream);
void set_last_error(cudaError_t error);

// Whether [pointer, pointer + bytes) lies within one live device allocation; whether `stream`
// is the default stream (null) or one created and not destroyed. For the fake cuBLASLt.
bool is_device_range(const void* pointer, std::size_t bytes);
bool is_stream(cudaStream_t stream);

// A kernel's pointer arguments must be null or point into (or just past) device memory: a GPU
// faults on a host pointer, which here would work like any other.
[[noreturn]] void fail_argument(const char* kernel, std::size_t index, const void* pointer,
                                std::source_location where);
template <class T>
void check_argument(const char* kernel, std::size_t index, const T& value,
                    std::source_location where) {
  if constexpr (std::is_pointer_v<T>) {
    if (value != nullptr && !is_device_range(value, 0)) {
      fail_argument(kernel, index, value, where);
    }
  }
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), as rewrite.py writes it:
// Launch("kernel", grid, block, shared_bytes, stream).run(kernel, args...). The arguments are
// converted to the kernel's parameter types once, as by the launch, and every thread gets its
// own copies.
class Launch {
 public:
  Launch(const char* name, dim3 grid, dim3 block, std::size_t shared_bytes = 0,
         cudaStream_t stream = nullptr,
         std::source_location where = std::source_location::current())
      : name_(name),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream),
        where_(where) {}

  template <class... P, class... A>
  void run(void (*kernel)(P...), A&&... args) const {
    static_assert(sizeof...(P) == sizeof...(A), "a launch passes every parameter of the kernel");
    const cudaError_t checked =
        check_launch(reinterpret_cast<const void*>(kernel), grid_, block_, shared_bytes_, stream_);
    if (checked != cudaSuccess) {
      set_last_error(checked);
      return;
    }
    struct Closure {
      void (*kernel)(P...);
      std::tuple<std::decay_t<P>...> params;
    };
    const Closure closure{kernel, std::tuple<std::decay_t<P>...>(std::forward<A>(args)...)};
    std::apply(
        [&](const auto&... param) {
          std::size_t index = 0;
          (check_argument(name_, index++, param, where_), ...);
        },
        closure.params);
    const Kernel body{name_, where_,
                      [](const void* c) {
                        const Closure& cl = *static_cast<const Closure*>(c);
                        std::apply(cl.kernel, cl.params);  // by value: each thread's copies
                      },
                      &closure};
    run_grid(body, grid_, block_, shared_bytes_);
  }

 private:
  const char* name_;
  dim3 grid_, block_;
  std::size_t shared_bytes_;
  cudaStream_t stream_;
  std::source_location where_;
};

}  // namespace emu

// ---- Device functions ----

inline void __syncthreads(std::source_location where = std::source_location::current()) {
  emu::sync_block(where);
}

namespace emu {

// Lane i's result is the value of lane in[2] (its source), words in[0..1].
inline void complete_shuffle(WarpWords& warp) {
  for (LaneWords& lane : warp.lane) {
    const LaneWords& source = warp.lane[lane.in[2]];
    lane.out[0] = source.in[0];
    lane.out[1] = source.in[1];
  }
}

// The calling lane's part of a shuffle: it offers `value` and takes the value of lane `source`
// (its own where `source` lies outside the warp, as CUDA does).
template <class T>
T shuffle(const char* what, unsigned mask, T value, long source, int width,
          std::source_location where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move 4 or 8 bytes");
  if (width != warpSize) fail("a shuffle with width other than 32 (not emulated)", where);
  const unsigned lane = lane_id();
  LaneWords& mine = warp_words().lane[lane];
  mine.in[0] = mine.in[1] = 0;
  std::memcpy(mine.in, &value, sizeof(T));
  mine.in[2] = source >= 0 && source < warpSize ? static_cast<std::uint32_t>(source) : lane;
  sync_warp(what, mask, complete_shuffle, where);
  T result;
  std::memcpy(&result, mine.out, sizeof(T));
  return result;
}

}  // namespace emu

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize,
                  std::source_location where = std::source_location::current()) {
  const long source = static_cast<long>(emu::lane_id() ^ static_cast<unsigned>(lane_mask));
  return emu::shuffle("__shfl_xor_sync", mask, value, source, width, where);
}

template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize,
                   std::source_location where = std::source_location::current()) {
  const long source = static_cast<long>(emu::lane_id()) + static_cast<long>(delta);
  return emu::shuffle("__shfl_down_sync", mask, value, source, width, where);
}
