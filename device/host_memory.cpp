// Anonymous and page-locked host mappings (see host_memory.h).
#include "device/host_memory.h"

#include <atomic>
#include <cerrno>
#include <cstring>

#include <sys/mman.h>

#include "base/error.h"
#include "base/log.h"

namespace zero::host_memory {
namespace {

std::atomic<bool> lock_warning_given{false};

int system_mlock(const void* address, std::size_t bytes) {
  return ::mlock(address, bytes);
}

}  // namespace

void* map(std::size_t bytes, Tier tier) {
  if (bytes == 0) return nullptr;
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    throw make_error(ErrorCategory::out_of_memory,
                     "could not reserve {} bytes of {} memory (mmap: {}); lower the buffer "
                     "sizes in the config or free host memory",
                     bytes, tier_name(tier), std::strerror(err));
  }
  return base;
}

void unmap(void* base, std::size_t bytes) noexcept {
  if (base != nullptr && bytes != 0) ::munmap(base, bytes);
}

void* map_pinned(std::size_t bytes, bool* locked, LockFunction lock) {
  if (locked != nullptr) *locked = false;
  void* base = map(bytes, Tier::pinned);
  if (base == nullptr) return nullptr;
  if (lock == nullptr) lock = system_mlock;
  if (lock(base, bytes) == 0) {
    if (locked != nullptr) *locked = true;
    return base;
  }
  const int err = errno;
  if (!lock_warning_given.exchange(true)) {
    log::warn(
        "could not lock {} bytes of pinned host memory (mlock: {}); the memory stays usable "
        "but may be paged out and copies to it run slower. Raise `ulimit -l` or grant "
        "CAP_IPC_LOCK. (Warned once.)",
        bytes, std::strerror(err));
  }
  return base;
}

void unmap_pinned(void* base, std::size_t bytes) noexcept {
  if (base == nullptr || bytes == 0) return;
  ::munlock(base, bytes);  // harmless when the range was never locked
  ::munmap(base, bytes);
}

void reset_lock_warning() {
  lock_warning_given.store(false);
}

}  // namespace zero::host_memory
