// Arena: best-fit placement over a sorted free list, merged on release; exact accounting.
#include "device/arena.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/error.h"
#include "base/log.h"
#include "device/device.h"

namespace zero {
namespace {

std::size_t index_of(MemoryKind kind) {
  return static_cast<std::size_t>(kind);
}

std::uint64_t align_up(std::uint64_t value, std::size_t alignment) {
  return (value + alignment - 1) & ~static_cast<std::uint64_t>(alignment - 1);
}

}  // namespace

Arena::Arena(Device* device, Tier tier, std::size_t capacity, std::string name)
    : device_(device), tier_(tier), capacity_(capacity), name_(std::move(name)) {
  if (name_.empty()) name_ = std::string(tier_name(tier));
  if (tier != Tier::nvme && capacity > 0) {
    if (device_ == nullptr) {
      throw make_error(ErrorCategory::usage, "arena '{}': a {} arena needs a device", name_,
                       tier_name(tier));
    }
    base_ = device_->reserve(tier, capacity);
  }
  free_.reserve(256);
  live_.reserve(256);
  if (capacity > 0) free_.push_back({0, capacity});
}

Arena::~Arena() {
  if (!live_.empty()) {
    log::debug("arena '{}' destroyed with {} live blocks ({} bytes)", name_, live_.size(),
               live_bytes_);
  }
  if (base_ != nullptr) device_->unreserve(tier_, base_, capacity_);
}

Block Arena::allocate(MemoryKind kind, std::size_t bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096) {
    throw make_error(ErrorCategory::usage,
                     "arena '{}': alignment {} is not a power of two no larger than 4096", name_,
                     alignment);
  }
  if (bytes == 0) return Block{nullptr, 0, 0, kind};

  std::lock_guard lock(mutex_);
  // Best fit: the smallest free range that holds the aligned block.
  std::size_t best = free_.size();
  std::size_t best_size = 0;
  for (std::size_t i = 0; i < free_.size(); ++i) {
    const Range& range = free_[i];
    const std::uint64_t start = align_up(range.offset, alignment);
    if (start + bytes > range.offset + range.bytes) continue;
    if (best == free_.size() || range.bytes < best_size) {
      best = i;
      best_size = range.bytes;
    }
  }
  if (best == free_.size()) {
    throw make_error(ErrorCategory::out_of_memory,
                     "arena '{}' ({} tier) cannot fit {} ({} bytes) of {}: {}. Raise the {} "
                     "arena's size or lower the buffer sizes in the config.",
                     name_, tier_name(tier_), format_bytes(bytes), bytes, memory_kind_name(kind),
                     describe_usage_locked(), tier_name(tier_));
  }

  const Range range = free_[best];
  const std::uint64_t start = align_up(range.offset, alignment);
  const std::uint64_t end = start + bytes;
  free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  if (start > range.offset) insert_free_locked({range.offset, start - range.offset});
  if (end < range.offset + range.bytes) {
    insert_free_locked({end, range.offset + range.bytes - end});
  }

  const auto at =
      std::lower_bound(live_.begin(), live_.end(), start,
                       [](const LiveBlock& b, std::uint64_t o) { return b.offset < o; });
  live_.insert(at, LiveBlock{start, bytes, kind});

  KindUsage& usage = kinds_[index_of(kind)];
  usage.live += bytes;
  usage.peak = std::max(usage.peak, usage.live);
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);

  void* ptr = base_ == nullptr ? nullptr : static_cast<char*>(base_) + start;
  return Block{ptr, start, bytes, kind};
}

void Arena::release(const Block& block) {
  if (block.empty()) return;
  std::lock_guard lock(mutex_);
  const auto it =
      std::lower_bound(live_.begin(), live_.end(), block.offset,
                       [](const LiveBlock& b, std::uint64_t o) { return b.offset < o; });
  if (it == live_.end() || it->offset != block.offset || it->bytes != block.bytes ||
      it->kind != block.kind) {
    throw make_error(ErrorCategory::usage,
                     "arena '{}': released a block ({} bytes of {} at offset {}) that is not "
                     "live here (released twice, or from another arena)",
                     name_, block.bytes, memory_kind_name(block.kind), block.offset);
  }
  live_.erase(it);
  kinds_[index_of(block.kind)].live -= block.bytes;
  live_bytes_ -= block.bytes;
  insert_free_locked({block.offset, block.bytes});
}

void Arena::insert_free_locked(Range range) {
  auto it = std::lower_bound(free_.begin(), free_.end(), range.offset,
                             [](const Range& r, std::uint64_t o) { return r.offset < o; });
  // Merge with the following range, then with the preceding one.
  if (it != free_.end() && range.offset + range.bytes == it->offset) {
    range.bytes += it->bytes;
    it = free_.erase(it);
  }
  if (it != free_.begin()) {
    auto previous = std::prev(it);
    if (previous->offset + previous->bytes == range.offset) {
      previous->bytes += range.bytes;
      return;
    }
  }
  free_.insert(it, range);
}

std::size_t Arena::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_bytes_;
}

std::size_t Arena::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_bytes_;
}

KindUsage Arena::usage(MemoryKind kind) const {
  std::lock_guard lock(mutex_);
  return kinds_[index_of(kind)];
}

std::size_t Arena::live_blocks() const {
  std::lock_guard lock(mutex_);
  return live_.size();
}

std::size_t Arena::largest_free_range() const {
  std::lock_guard lock(mutex_);
  return largest_free_range_locked();
}

std::size_t Arena::largest_free_range_locked() const {
  std::size_t largest = 0;
  for (const Range& range : free_) largest = std::max(largest, range.bytes);
  return largest;
}

std::string Arena::describe_usage_locked() const {
  std::string kinds;
  for (MemoryKind kind : kAllMemoryKinds) {
    const KindUsage& usage = kinds_[index_of(kind)];
    if (usage.live == 0) continue;
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", memory_kind_name(kind),
                         format_bytes(usage.live));
  }
  return fmt::format("capacity {}, in use {} in {} blocks ({}), largest free range {}",
                     format_bytes(capacity_), format_bytes(live_bytes_), live_.size(),
                     kinds.empty() ? "nothing" : kinds, format_bytes(largest_free_range_locked()));
}

std::string Arena::breakdown() const {
  std::lock_guard lock(mutex_);
  std::string out =
      fmt::format("{} ({} tier): capacity {}, live {}, peak {}\n", name_, tier_name(tier_),
                  format_bytes(capacity_), format_bytes(live_bytes_), format_bytes(peak_bytes_));
  for (MemoryKind kind : kAllMemoryKinds) {
    const KindUsage& usage = kinds_[index_of(kind)];
    if (usage.live == 0 && usage.peak == 0) continue;
    out += fmt::format("  {:<7} live {:>12} ({} B)  peak {:>12} ({} B)\n", memory_kind_name(kind),
                       format_bytes(usage.live), usage.live, format_bytes(usage.peak), usage.peak);
  }
  return out;
}

}  // namespace zero
