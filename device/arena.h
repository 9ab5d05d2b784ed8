// An arena: one reservation of a tier's memory (or, for nvme, of a file's byte range), made
// once, out of which blocks are handed out and back without touching the system allocator,
// cudaMalloc or the file system. Each block is tagged with the kind of state it holds, and the
// arena counts live and peak bytes per kind, exactly to the byte of what was asked, so that a
// test can check the memory model and zero-mem can predict it.
//
// Thread-safe: allocate and release may be called from several threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/bytes.h"  // format_bytes, which arena messages use
#include "device/memory.h"

namespace zero {

class Device;

struct Block {
  void* ptr = nullptr;       // address in memory tiers; nullptr for nvme and empty blocks
  std::uint64_t offset = 0;  // offset from the start of the arena
  std::size_t bytes = 0;     // the size asked for
  MemoryKind kind = MemoryKind::buffer;

  bool empty() const noexcept { return bytes == 0; }
};

struct KindUsage {
  std::size_t live = 0;
  std::size_t peak = 0;
};

class Arena {
 public:
  static constexpr std::size_t kDefaultAlignment = 256;

  // Reserves `capacity` bytes of `tier` from `device`. For Tier::nvme no memory is reserved
  // (`device` may be null): the arena only places blocks within [0, capacity) of a file.
  Arena(Device* device, Tier tier, std::size_t capacity, std::string name = {});
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A block of `bytes` (0 gives an empty block) at an offset that is a multiple of
  // `alignment` (a power of two, at most 4096). Throws an out_of_memory Error naming the
  // arena, tier, kind, size asked and what is in use when no free range fits.
  Block allocate(MemoryKind kind, std::size_t bytes, std::size_t alignment = kDefaultAlignment);
  // Returns a block; a block not live in this arena is a usage Error.
  void release(const Block& block);

  Tier tier() const noexcept { return tier_; }
  const std::string& name() const noexcept { return name_; }
  std::size_t capacity() const noexcept { return capacity_; }
  void* base() const noexcept { return base_; }

  // Bytes asked for by live blocks, and the most there ever were at once.
  std::size_t live_bytes() const;
  std::size_t peak_bytes() const;
  KindUsage usage(MemoryKind kind) const;
  std::size_t live_blocks() const;
  std::size_t largest_free_range() const;

  // A few lines: the arena, capacity, live and peak, then each kind with bytes in use or peak.
  std::string breakdown() const;

 private:
  struct Range {
    std::uint64_t offset;
    std::size_t bytes;
  };
  struct LiveBlock {
    std::uint64_t offset;
    std::size_t bytes;
    MemoryKind kind;
  };

  std::string describe_usage_locked() const;
  std::size_t largest_free_range_locked() const;
  void insert_free_locked(Range range);

  Device* device_;
  Tier tier_;
  std::size_t capacity_;
  std::string name_;
  void* base_ = nullptr;

  mutable std::mutex mutex_;
  std::vector<Range> free_;      // sorted by offset, never adjacent (merged on release)
  std::vector<LiveBlock> live_;  // sorted by offset
  std::array<KindUsage, kAllMemoryKinds.size()> kinds_{};
  std::size_t live_bytes_ = 0;
  std::size_t peak_bytes_ = 0;
};

}  // namespace zero
