// CPU emulation of CUDA (emulator/, docs/emulator.md): the host API of cuda_runtime.h. Device
// memory, streams, the last error and the kernels' attributes, each in a registry of its own, so
// that a pointer, a size, a stream or a launch shape the GPU would refuse is refused here too.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include <sys/mman.h>
#include <unistd.h>

#include "emulator/cuda_runtime.h"

// Streams are only names here: every call has finished when it returns.
struct CUstream_st {
  int unused;
};

namespace emu {
namespace {

// The limits of an sm_80 device (A100), the oldest this project builds for.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 0x7fffffffu, kMaxGridYZ = 65535;
constexpr int kDefaultDynamicShared = 48 << 10;  // without cudaFuncSetAttribute
constexpr int kMaxDynamicShared = 163 << 10;     // sharedMemPerBlockOptin

constexpr std::size_t kAllocationGranule = 256;  // cudaMalloc's alignment and rounding

struct Allocation {
  void* mapping;
  std::size_t mapped_bytes;
  std::size_t bytes;  // as asked
};

std::map<std::uintptr_t, Allocation> allocations;  // by first byte
std::set<cudaStream_t> streams;
std::map<const void*, int> max_dynamic_shared;  // per kernel, once set
cudaError_t last_error = cudaSuccess;
HostMemoryJudge host_memory_judge = nullptr;  // accept_host_memory's
void* host_memory_context = nullptr;

// The allocation holding [p, p + bytes), or null.
const Allocation* allocation_of(const void* p, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  auto at = allocations.upper_bound(address);
  if (at == allocations.begin()) return nullptr;
  --at;
  const std::uintptr_t first = at->first;
  if (address - first > at->second.bytes || bytes > at->second.bytes - (address - first)) {
    return nullptr;
  }
  return &at->second;
}

// Host memory that a test lets stand for device memory (accept_host_memory).
bool accepted_host_memory(const void* p, std::size_t bytes) {
  return host_memory_judge != nullptr && host_memory_judge(p, bytes, host_memory_context);
}

bool is_device(const void* p) {
  return p != nullptr && (allocation_of(p, 1) != nullptr || accepted_host_memory(p, 1));
}

}  // namespace

bool is_device_range(const void* pointer, std::size_t bytes) {
  return pointer != nullptr &&
         (allocation_of(pointer, bytes) != nullptr || accepted_host_memory(pointer, bytes));
}

bool is_stream(cudaStream_t stream) {
  return stream == nullptr || streams.count(stream) != 0;
}

void fail_argument(const char* kernel, std::size_t index, const void* pointer,
                   std::source_location where) {
  char text[256];
  std::snprintf(text, sizeof text,
                "argument %zu of kernel %s is %p, in no device allocation (a host pointer?)", index,
                kernel, pointer);
  fail(text, where);
}

void set_last_error(cudaError_t error) {
  last_error = error;
}

cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (kernel == nullptr || attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return cudaErrorInvalidValue;
  }
  if (value < 0 || value > kMaxDynamicShared) return cudaErrorInvalidValue;
  max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}

cudaError_t check_launch(const void* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                         cudaStream_t stream) {
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockX ||
      block.y > kMaxBlockY || block.z > kMaxBlockZ ||
      static_cast<std::uint64_t>(block.x) * block.y * block.z > kMaxThreadsPerBlock) {
    return cudaErrorInvalidConfiguration;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridX || grid.y > kMaxGridYZ ||
      grid.z > kMaxGridYZ) {
    return cudaErrorInvalidConfiguration;
  }
  const auto set = max_dynamic_shared.find(kernel);
  const int allowed = set != max_dynamic_shared.end() ? set->second : kDefaultDynamicShared;
  if (shared_bytes > static_cast<std::size_t>(allowed)) return cudaErrorInvalidValue;
  if (!is_stream(stream)) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}

}  // namespace emu

cudaError_t cudaGetLastError() {
  const cudaError_t error = emu::last_error;
  emu::last_error = cudaSuccess;
  return error;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidPitchValue:
      return "invalid pitch argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unrecognized error code";
}

// The bytes end where a page ends, and the page after is mapped without access: an access past
// the allocation (beyond the rounding to 256 bytes, which the GPU has too) faults.
cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (pointer == nullptr) return cudaErrorInvalidValue;
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t rounded =
      (bytes + emu::kAllocationGranule - 1) / emu::kAllocationGranule * emu::kAllocationGranule;
  const std::size_t pages = (rounded + page - 1) / page * page;
  void* mapping = mmap(nullptr, pages + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) return cudaErrorMemoryAllocation;
  auto* first = static_cast<unsigned char*>(mapping) + pages - rounded;
  if (mprotect(first + rounded, page, PROT_NONE) != 0) {
    munmap(mapping, pages + page);
    return cudaErrorMemoryAllocation;
  }
  std::memset(first, 0xff, rounded);  // NaN as floats and bf16, -1 as integers: never "zeroed"
  emu::allocations[reinterpret_cast<std::uintptr_t>(first)] = {mapping, pages + page, bytes};
  *pointer = first;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  const auto at = emu::allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (at == emu::allocations.end()) return cudaErrorInvalidDevicePointer;
  munmap(at->second.mapping, at->second.mapped_bytes);  // a use after free faults
  emu::allocations.erase(at);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (to == nullptr || from == nullptr) return cudaErrorInvalidValue;
  bool to_device = false, from_device = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      to_device = true;
      break;
    case cudaMemcpyDeviceToHost:
      from_device = true;
      break;
    case cudaMemcpyDeviceToDevice:
      to_device = from_device = true;
      break;
    case cudaMemcpyDefault:  // either side may be either
      to_device = emu::is_device(to);
      from_device = emu::is_device(from);
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  if (emu::is_device(to) != to_device || emu::is_device(from) != from_device) {
    return cudaErrorInvalidMemcpyDirection;
  }
  // The device side must hold all of it (the host side cannot be checked).
  if ((emu::is_device(to) && !emu::is_device_range(to, bytes)) ||
      (emu::is_device(from) && !emu::is_device_range(from, bytes))) {
    return cudaErrorInvalidValue;
  }
  std::memmove(to, from, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* to, std::size_t to_pitch, const void* from,
                              std::size_t from_pitch, std::size_t width, std::size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (!emu::is_stream(stream)) return cudaErrorInvalidResourceHandle;
  if (height > 0 && (width > to_pitch || width > from_pitch)) return cudaErrorInvalidPitchValue;
  for (std::size_t row = 0; row < height; ++row) {
    const cudaError_t st =
        cudaMemcpy(static_cast<char*>(to) + row * to_pitch,
                   static_cast<const char*>(from) + row * from_pitch, width, kind);
    if (st != cudaSuccess) return st;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (!emu::is_stream(stream)) return cudaErrorInvalidResourceHandle;
  return cudaMemcpy(to, from, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!emu::is_device_range(pointer, bytes)) return cudaErrorInvalidValue;
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream) {
  if (!emu::is_stream(stream)) return cudaErrorInvalidResourceHandle;
  return cudaMemset(pointer, value, bytes);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking) return cudaErrorInvalidValue;
  return cudaStreamCreate(stream);
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return cudaErrorInvalidValue;
  if (device != 0) return cudaErrorInvalidDevice;
  *properties = {};
  std::snprintf(properties->name, sizeof properties->name, "emulated sm_80");
  properties->totalGlobalMem = std::size_t{80} << 30;
  properties->major = 8;
  properties->multiProcessorCount = 1;
  return cudaSuccess;
}

void emu::accept_host_memory(HostMemoryJudge judge, void* context) {
  host_memory_judge = judge;
  host_memory_context = context;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  *stream = new CUstream_st{};
  emu::streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || emu::streams.erase(stream) == 0) return cudaErrorInvalidResourceHandle;
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return emu::is_stream(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}

struct CUevent_st {
  bool timing = true;
  bool recorded = false;
  std::chrono::steady_clock::time_point time{};
};

namespace {

std::set<void*> pinned_blocks;
std::set<cudaEvent_t> events;

}  // namespace

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  if (pointer == nullptr) return cudaErrorInvalidValue;
  *pointer = std::malloc(bytes == 0 ? 1 : bytes);
  if (*pointer == nullptr) return cudaErrorMemoryAllocation;
  pinned_blocks.insert(*pointer);
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  if (pinned_blocks.erase(pointer) == 0) return cudaErrorInvalidValue;
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~cudaEventDisableTiming) != 0) return cudaErrorInvalidValue;
  *event = new CUevent_st{};
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr || events.erase(event) == 0) return cudaErrorInvalidResourceHandle;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (events.count(event) == 0 || !emu::is_stream(stream)) return cudaErrorInvalidResourceHandle;
  event->recorded = true;
  event->time = std::chrono::steady_clock::now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return events.count(event) != 0 ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  if (events.count(start) == 0 || events.count(end) == 0 || !start->timing || !end->timing ||
      !start->recorded || !end->recorded) {
    return cudaErrorInvalidResourceHandle;
  }
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
