// Large host reservations for arenas: anonymous mappings (page-aligned, returned to the system
// when unmapped), and page-locked ("pinned") mappings for the CPU device. Pinning uses mlock;
// when the lock limit refuses, one warning says so and the memory stays usable, unlocked. A
// mapping of 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages
// (MADV_HUGEPAGE), which the system's setting grants or not.
#pragma once

#include <cstddef>

#include "device/memory.h"

namespace zero::host_memory {

// Maps `bytes` of zeroed memory; throws an out_of_memory Error naming `tier` and the size.
void* map(std::size_t bytes, Tier tier);
void unmap(void* base, std::size_t bytes) noexcept;

// The page-locking call, replaceable in tests: returns 0 or -1 with errno set, like mlock.
using LockFunction = int (*)(const void* address, std::size_t bytes);

// map() then lock; a refused lock logs one warning per process and is otherwise ignored.
// Returns whether the memory is locked through *locked when given.
void* map_pinned(std::size_t bytes, bool* locked = nullptr, LockFunction lock = nullptr);
void unmap_pinned(void* base, std::size_t bytes) noexcept;

// Lets the next refused lock warn again (for tests of the warning).
void reset_lock_warning();

}  // namespace zero::host_memory
