// GuardedMemory: the guarded CPU device's device tier. Each reservation is one memory file
// mapped twice: the window (the address the engine and the model are given) and the backing
// (the address device work uses, through translate()). While guarded, every window is
// PROT_NONE, so host code that touches device memory faults, as it would on a GPU; a SIGSEGV
// handler names the address and its reservation, then lets the fault end the process.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace zero::cpu {

class GuardedMemory {
 public:
  GuardedMemory() = default;
  ~GuardedMemory();
  GuardedMemory(const GuardedMemory&) = delete;
  GuardedMemory& operator=(const GuardedMemory&) = delete;

  // `bytes` of zeroed memory; returns the window. Throws an out_of_memory Error.
  void* reserve(std::size_t bytes);
  void unreserve(void* window, std::size_t bytes) noexcept;
  // The backing address of a pointer inside a window; any other pointer unchanged.
  void* translate(const void* pointer) const noexcept;
  // Guarded while the count of guard(true) exceeds that of guard(false).
  void guard(bool guarded) noexcept;

 private:
  struct Region {
    char* window = nullptr;
    char* backing = nullptr;
    std::size_t bytes = 0;
  };
  void protect(const Region& region, bool guarded) const noexcept;

  mutable std::mutex mutex_;
  std::vector<Region> regions_;
  int depth_ = 0;
};

}  // namespace zero::cpu
