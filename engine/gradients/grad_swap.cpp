// GradSwap: the swapped step groups' gradients on NVMe (see grad_swap.h).
#include "engine/gradients/grad_swap.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/bytes.h"
#include "base/direct_io.h"
#include "base/error.h"
#include "base/log.h"
#include "device/host_kernels.h"
#include "offload/swap.h"

namespace zero::engine {

GradSwap::GradSwap(OptimizerSwap& swap, offload::AsyncIO& io, Arena& pinned, DType dtype,
                   std::size_t slots, std::vector<std::size_t> group_lo,
                   std::vector<std::size_t> group_elements)
    : swap_(swap),
      io_(io),
      dtype_(dtype),
      lo_(std::move(group_lo)),
      elements_(std::move(group_elements)),
      pinned_(pinned) {
  ZERO_CHECK(lo_.size() == elements_.size() && lo_.size() == swap_.groups(),
             "{} group offsets, {} group sizes, {} swapped groups", lo_.size(), elements_.size(),
             swap_.groups());
  groups_.resize(lo_.size());
  std::size_t largest = 0;
  for (std::size_t g = 0; g < lo_.size(); ++g) largest = std::max(largest, bytes_of(g));
  if (largest == 0) return;
  // One filling, one being written out, one for a block that spans two groups.
  ZERO_CHECK(slots >= 3, "{} gradient swap buffers", slots);
  slots_.resize(slots);
  for (Slot& slot : slots_) {
    const Block block = pinned_.allocate(MemoryKind::buffer, largest, kDirectIoAlignment);
    blocks_.push_back(block);
    slot.data = block.ptr;
  }
  log::debug("gradient swap: {} groups through {} buffers of {}", lo_.size(), slots,
             format_bytes(largest));
}

GradSwap::~GradSwap() {
  for (Slot& slot : slots_) {
    try {
      settle(slot);
    } catch (...) {
      // Failing I/O at destruction: the run has ended; the error was or will be seen.
    }
  }
}

std::size_t GradSwap::bytes_of(std::size_t group) const {
  return swap_.grad_region(group).bytes;
}

std::size_t GradSwap::group_of(std::size_t flat) const {
  const auto it = std::upper_bound(lo_.begin(), lo_.end(), flat);
  ZERO_CHECK(it != lo_.begin(), "owned offset {} before the first swapped group at {}", flat,
             lo_.empty() ? 0 : lo_.front());
  return static_cast<std::size_t>(it - lo_.begin()) - 1;
}

void GradSwap::settle(Slot& slot) {
  if (!slot.busy) return;
  slot.busy = slot.reading = false;
  swap_.file().wait(io_, slot.ticket);
}

void GradSwap::write_out(Slot& slot) {
  settle(slot);
  ZERO_CHECK(!slot.held, "gradient group {} written out while held", slot.group);
  Group& group = groups_[slot.group];
  if (slot.dirty) {
    if (!group.known) know(slot.group, slot.data);
    const OptimizerSwap::GradRegion region = swap_.grad_region(slot.group);
    slot.ticket = swap_.file().write(io_, region.offset, slot.data, region.bytes);
    slot.busy = true;
    slot.io_group = slot.group;
    group.on_disk = true;
  }
  group.place = group.on_disk ? Place::disk : Place::zero;
  slot.group = kNoGroup;
  slot.dirty = false;
}

void GradSwap::know(std::size_t group, const void* data) {
  Group& g = groups_[group];
  g.sum_squares = host::sum_squares(data, dtype_, elements_[group]);
  g.nonfinite = host::any_nonfinite(data, dtype_, elements_[group]);
  g.known = true;
}

GradSwap::Slot* GradSwap::least_recent(const Slot* except) {
  Slot* oldest = nullptr;
  for (Slot& slot : slots_) {
    if (&slot != except && !slot.held && (oldest == nullptr || slot.used < oldest->used))
      oldest = &slot;
  }
  return oldest;
}

GradSwap::Slot& GradSwap::free_slot() {
  for (Slot& slot : slots_) {
    if (slot.group == kNoGroup && !slot.busy) return slot;
  }
  for (Slot& slot : slots_) {
    if (slot.group == kNoGroup) {
      settle(slot);  // a write out: its group's bytes are on disk once it ends
      return slot;
    }
  }
  // None free: the least recently used group goes out, and its write is waited for.
  Slot* oldest = least_recent(nullptr);
  ZERO_CHECK(oldest != nullptr, "no gradient swap buffer to free: every one is held");
  write_out(*oldest);
  settle(*oldest);
  return *oldest;
}

void GradSwap::wait_written(std::size_t group) {
  for (Slot& slot : slots_) {
    if (slot.busy && !slot.reading && slot.io_group == group) settle(slot);
  }
}

GradSwap::Slot& GradSwap::bring(std::size_t group) {
  Group& g = groups_[group];
  if (g.place == Place::slot) {
    Slot& slot = slots_[g.slot];
    settle(slot);  // a read ahead
    slot.used = ++clock_;
    return slot;
  }
  Slot& slot = free_slot();
  if (g.place == Place::zero) {
    std::memset(slot.data, 0, elements_[group] * dtype_size(dtype_));
  } else {
    wait_written(group);
    const OptimizerSwap::GradRegion region = swap_.grad_region(group);
    slot.ticket = swap_.file().read(io_, region.offset, slot.data, region.bytes);
    slot.busy = slot.reading = true;
    slot.io_group = group;
    settle(slot);
  }
  slot.group = group;
  slot.dirty = false;
  slot.used = ++clock_;
  g.place = Place::slot;
  g.slot = static_cast<std::size_t>(&slot - slots_.data());
  return slot;
}

void GradSwap::add(std::size_t flat, const void* src, DType src_dtype, std::size_t count,
                   float factor) noexcept {
  std::lock_guard lock(mutex_);
  if (failure_) return;
  try {
    const char* from = static_cast<const char*>(src);
    const std::size_t src_size = dtype_size(src_dtype), size = dtype_size(dtype_);
    while (count > 0) {
      const std::size_t group = group_of(flat);
      const std::size_t at = flat - lo_[group];
      ZERO_CHECK(at < elements_[group], "owned offset {} past swapped group {} ({} + {})", flat,
                 group, lo_[group], elements_[group]);
      const std::size_t n = std::min(count, elements_[group] - at);
      Slot& slot = bring(group);
      host::accumulate(from, src_dtype, static_cast<char*>(slot.data) + at * size, dtype_, n,
                       factor);
      slot.dirty = true;
      groups_[group].known = false;
      // Writes behind: with no buffer left free, the least recently used other group starts
      // out now, so the next group to come in finds its buffer.
      const bool none_free = std::none_of(slots_.begin(), slots_.end(),
                                          [](const Slot& s) { return s.group == kNoGroup; });
      if (none_free) {
        if (Slot* oldest = least_recent(&slot); oldest != nullptr) write_out(*oldest);
      }
      from += n * src_size, flat += n, count -= n;
    }
  } catch (...) {
    failure_ = std::current_exception();
  }
}

void GradSwap::rethrow() {
  std::lock_guard lock(mutex_);
  rethrow_locked();
}

void GradSwap::rethrow_locked() {
  if (failure_) std::rethrow_exception(failure_);
}

void GradSwap::finish_adds() {
  std::lock_guard lock(mutex_);
  rethrow_locked();
  try {
    for (Slot& slot : slots_) {
      if (slot.busy && !slot.reading) settle(slot);
    }
  } catch (...) {
    failure_ = std::current_exception();
    throw;
  }
}

double GradSwap::sum_squares() {
  std::lock_guard lock(mutex_);
  rethrow_locked();
  double sum = 0.0;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    if (group.place == Place::zero) continue;
    if (!group.known) {  // in a buffer, added to since its statistics were taken
      Slot& slot = slots_[group.slot];
      settle(slot);
      know(g, slot.data);
    }
    sum += group.sum_squares;
  }
  return sum;
}

bool GradSwap::any_nonfinite() {
  std::lock_guard lock(mutex_);
  rethrow_locked();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    if (group.place == Place::zero) continue;
    if (!group.known) {
      Slot& slot = slots_[group.slot];
      settle(slot);
      know(g, slot.data);
    }
    if (group.nonfinite) return true;
  }
  return false;
}

void GradSwap::read_ahead(std::size_t after) {
  for (std::size_t h = after + 1; h < groups_.size(); ++h) {
    Group& group = groups_[h];
    if (group.place != Place::disk) continue;
    const auto idle = std::find_if(slots_.begin(), slots_.end(),
                                   [](const Slot& s) { return s.group == kNoGroup && !s.busy; });
    if (idle == slots_.end()) return;
    wait_written(h);
    const OptimizerSwap::GradRegion region = swap_.grad_region(h);
    idle->ticket = swap_.file().read(io_, region.offset, idle->data, region.bytes);
    idle->busy = idle->reading = true;
    idle->io_group = h;
    idle->group = h;
    idle->dirty = false;
    idle->used = ++clock_;
    group.place = Place::slot;
    group.slot = static_cast<std::size_t>(idle - slots_.begin());
  }
}

const void* GradSwap::acquire(std::size_t group) {
  std::lock_guard lock(mutex_);
  rethrow_locked();
  ZERO_CHECK(group < groups_.size(), "gradient group {} of {}", group, groups_.size());
  if (elements_[group] == 0) return nullptr;
  Slot& slot = bring(group);
  read_ahead(group);
  return slot.data;
}

void GradSwap::release(std::size_t group) {
  std::lock_guard lock(mutex_);
  Group& g = groups_[group];
  if (g.place == Place::slot) {
    Slot& slot = slots_[g.slot];
    settle(slot);
    slot.group = kNoGroup;
    slot.dirty = false;
    slot.held = false;
  }
  g = Group{};
}

void GradSwap::zero() {
  std::lock_guard lock(mutex_);
  for (Slot& slot : slots_) {
    settle(slot);
    slot.group = kNoGroup;
    slot.dirty = false;
    slot.held = false;
  }
  for (Group& group : groups_) group = Group{};
}

const void* GradSwap::hold(std::size_t group) {
  void* data = nullptr;
  {
    std::lock_guard lock(mutex_);
    rethrow_locked();
    ZERO_CHECK(group < groups_.size(), "gradient group {} of {}", group, groups_.size());
    if (elements_[group] == 0) return nullptr;
    Slot& slot = bring(group);
    slot.held = true;
    if (groups_[group].known) return slot.data;
    data = slot.data;
  }
  // Final, and in a buffer nothing else takes: its statistics without the lock, so the
  // epilogue's adds go on meanwhile.
  const double sum = host::sum_squares(data, dtype_, elements_[group]);
  const bool nonfinite = host::any_nonfinite(data, dtype_, elements_[group]);
  std::lock_guard lock(mutex_);
  Group& g = groups_[group];
  g.sum_squares = sum;
  g.nonfinite = nonfinite;
  g.known = true;
  return data;
}

void GradSwap::unhold(std::size_t group) {
  std::lock_guard lock(mutex_);
  const Group& g = groups_.at(group);
  if (g.place == Place::slot) slots_[g.slot].held = false;
}

}  // namespace zero::engine
