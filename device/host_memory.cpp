// Anonymous and page-locked host mappings (see host_memory.h).
#include "device/host_memory.h"

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <sys/mman.h>

#include "base/error.h"
#include "base/log.h"

namespace zero::host_memory {
namespace {

std::atomic<bool> lock_warning_given{false};

constexpr std::size_t kHugePage = std::size_t{2} << 20;  // x86-64's and arm64's (4 KiB granule)

int system_mlock(const void* address, std::size_t bytes) {
  return ::mlock(address, bytes);
}

}  // namespace

void* map(std::size_t bytes, Tier tier) {
  if (bytes == 0) return nullptr;
  // At least a huge page: mapped a huge page longer, the ends trimmed so that it starts on one.
  const bool huge = bytes >= kHugePage;
  const std::size_t mapped = huge ? bytes + kHugePage : bytes;
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    throw make_error(ErrorCategory::out_of_memory,
                     "could not reserve {} bytes of {} memory (mmap: {}); lower the buffer "
                     "sizes in the config or free host memory",
                     bytes, tier_name(tier), std::strerror(err));
  }
  if (!huge) return base;
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  const std::uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) ::munmap(base, aligned - start);
  if (const std::size_t tail = start + mapped - (aligned + bytes); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  }
  void* out = reinterpret_cast<void*>(aligned);
  // Transparent huge pages where the system lends them (its setting `madvise` or `always`; a
  // no-op under `never`): the optimizer's and the host adds' streams over hundreds of MB miss
  // the TLB every 4 KiB otherwise. Refused (a kernel without them), the pages stay small.
  ::madvise(out, bytes, MADV_HUGEPAGE);
  return out;
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
