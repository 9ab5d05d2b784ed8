#include "engine/state/optimizer_swap.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace zero::engine {
namespace {

std::size_t align_up(std::size_t bytes, std::size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

OptimizerSwap::OptimizerSwap(OptimizerSwapOptions options, offload::AsyncIO& io,
                             offload::SwapDirectory& directory, Arena& pinned, Arena& nvme)
    : options_(std::move(options)), io_(io), pinned_(pinned) {
  // One read ahead, one stepping, one writing: the config's reading refuses fewer.
  ZERO_CHECK(options_.buffer_count >= 3, "{} swap buffers", options_.buffer_count);
  // Lay the regions out with the nvme arena, at the strictest direct-I/O alignment any disk
  // asks (4096), so the file can be created before its own alignment is known.
  constexpr std::size_t kAlign = 4096;
  std::size_t largest = 0;
  for (std::size_t elements : options_.group_elements) {
    Region region;
    region.elements = elements;
    if (elements != 0) {
      region.offsets[0] = place_state(region, nvme, kAlign);
      if (options_.second_regions) {
        const Region first = region;
        region.offsets[1] = place_state(region, nvme, kAlign);
        ZERO_CHECK(region.bytes == first.bytes && region.state_offset[0] == first.state_offset[0] &&
                       region.state_offset[1] == first.state_offset[1],
                   "a group's second state region is laid out unlike its first");
      }
      if (options_.grad_dtype) {
        const std::size_t bytes = elements * dtype_size(*options_.grad_dtype);
        const Block grad = nvme.allocate(MemoryKind::grad, bytes, kAlign);
        blocks_.push_back(grad);
        region.grad = {grad.offset, align_up(bytes, kAlign)};  // written whole, aligned
      }
    }
    largest = std::max(largest, region.bytes);
    regions_.push_back(region);
  }
  file_ = directory.create("optimizer.swap", nvme.capacity(),
                           "zero_optimization.offload_optimizer.nvme_path");
  slots_.resize(options_.buffer_count);
  std::vector<std::pair<void*, std::size_t>> buffers;
  for (Slot& slot : slots_) {
    if (largest == 0) break;
    const Block block = pinned_.allocate(MemoryKind::buffer, largest, kAlign);
    blocks_.push_back(block);
    slot.data = block.ptr;
    buffers.emplace_back(slot.data, largest);
  }
  // Registered buffers spare the kernel pinning their pages on every request.
  const bool registered = !buffers.empty() && io_.register_buffers(buffers);
  log::debug("optimizer swap: {} buffers of {}{}", buffers.size(), format_bytes(largest),
             registered ? ", registered with io_uring" : "");
}

std::uint64_t OptimizerSwap::place_state(Region& region, Arena& nvme, std::size_t alignment) {
  const std::size_t elements = region.elements;
  const std::size_t state_size = dtype_size(options_.state_dtype);
  const Block master = nvme.allocate(MemoryKind::master, elements * 4, alignment);
  blocks_.push_back(master);
  std::uint64_t end = master.offset + align_up(elements * 4, alignment);
  for (int k = 0; k < options_.state_buffers; ++k) {
    const Block moment = nvme.allocate(MemoryKind::moment, elements * state_size, alignment);
    blocks_.push_back(moment);
    region.state_offset[k] = static_cast<std::size_t>(moment.offset - master.offset);
    end = moment.offset + align_up(elements * state_size, alignment);
  }
  region.bytes = static_cast<std::size_t>(end - master.offset);
  return master.offset;
}

OptimizerSwap::~OptimizerSwap() {
  for (Slot& slot : slots_) {
    if (!slot.reading && !slot.writing) continue;
    try {
      settle(slot);
    } catch (...) {
      // Failing I/O at destruction: nothing left to protect; the error was or will be seen.
    }
  }
}

const std::string& OptimizerSwap::path() const noexcept {
  return file_->path();
}

GroupView OptimizerSwap::view(const Slot& slot, const Region& region) const {
  GroupView v;
  v.master = static_cast<float*>(slot.data);
  for (int k = 0; k < options_.state_buffers; ++k) {
    v.state[k] = static_cast<char*>(slot.data) + region.state_offset[k];
  }
  return v;
}

void OptimizerSwap::settle(Slot& slot) {
  if (!slot.reading && !slot.writing) return;
  const offload::Ticket ticket = slot.ticket;
  slot.reading = slot.writing = false;
  file_->wait(io_, ticket);
}

void OptimizerSwap::read_into(Slot& slot, std::size_t group) {
  settle(slot);  // the group that had this buffer is written out first
  const Region& region = regions_[group];
  slot.group = group;
  if (region.bytes == 0) return;
  slot.ticket = file_->read(io_, offset(region), slot.data, region.bytes);
  slot.reading = true;
}

void OptimizerSwap::write_from(Slot& slot, std::uint64_t at, std::size_t bytes) {
  if (bytes == 0) return;
  slot.ticket = file_->write(io_, at, slot.data, bytes);
  slot.writing = true;
  if (!options_.pipeline_write) settle(slot);
}

std::size_t OptimizerSwap::reads_ahead() const {
  // With pipeline_read as far as the buffers allow while one write is still in flight, else
  // none.
  return options_.pipeline_read ? slots_.size() - 2 : 0;
}

GroupView OptimizerSwap::acquire(std::size_t group) {
  if (group >= regions_.size()) {
    throw make_error(ErrorCategory::internal, "OptimizerSwap::acquire({}) of {} groups", group,
                     regions_.size());
  }
  const std::size_t last = std::min(regions_.size() - 1, group + reads_ahead());
  next_read_ = std::max(next_read_, group);
  for (; next_read_ <= last; ++next_read_) read_into(slot_of(next_read_), next_read_);
  Slot& slot = slot_of(group);
  settle(slot);
  return view(slot, regions_[group]);
}

void OptimizerSwap::release(std::size_t group) {
  const Region& region = regions_[group];
  write_from(slot_of(group), offset(region), region.bytes);
}

void OptimizerSwap::finish() {
  for (Slot& slot : slots_) settle(slot);
  next_read_ = 0;
}

GroupView OptimizerSwap::fill(std::size_t group) {
  Slot& slot = slot_of(group);
  settle(slot);
  slot.group = group;
  const Region& region = regions_[group];
  if (region.bytes != 0) std::memset(slot.data, 0, region.bytes);
  return view(slot, region);
}

GroupView OptimizerSwap::filled(std::size_t group) {
  return view(slot_of(group), regions_[group]);
}

void OptimizerSwap::commit(std::size_t group) {
  release(group);
}

GroupView OptimizerSwap::peek(std::size_t group) {
  finish();
  read_into(slot_of(group), group);
  Slot& slot = slot_of(group);
  settle(slot);
  return view(slot, regions_[group]);
}

void OptimizerSwap::begin_speculation(std::vector<std::size_t> order) {
  if (!options_.second_regions) {
    throw make_error(ErrorCategory::internal,
                     "OptimizerSwap::begin_speculation without second regions");
  }
  finish();  // the slots hold nothing in flight: their order is the speculation's now
  for (Slot& slot : slots_) slot.group.reset();
  position_.assign(regions_.size(), kNotSpeculated);
  for (std::size_t p = 0; p < order.size(); ++p) {
    ZERO_CHECK(order[p] < regions_.size() && position_[order[p]] == kNotSpeculated,
               "speculation order: group {} out of range or given twice", order[p]);
    position_[order[p]] = p;
  }
  order_ = std::move(order);
  written_other_.assign(regions_.size(), false);
  next_speculated_read_ = 0;
  speculating_ = true;
}

GroupView OptimizerSwap::acquire_speculated(std::size_t group) {
  ZERO_CHECK(speculating_ && group < regions_.size() && position_[group] != kNotSpeculated,
             "acquire_speculated({}) outside the speculation's order", group);
  const std::size_t position = position_[group];
  const std::size_t last = std::min(order_.size() - 1, position + reads_ahead());
  next_speculated_read_ = std::max(next_speculated_read_, position);
  for (; next_speculated_read_ <= last; ++next_speculated_read_) {
    read_into(slot_at(next_speculated_read_), order_[next_speculated_read_]);
  }
  Slot& slot = slot_at(position);
  // Groups taken out of the order given (a bucket that did not report) find their buffer
  // holding another: read again.
  if (slot.group != group) read_into(slot, group);
  settle(slot);
  return view(slot, regions_[group]);
}

void OptimizerSwap::release_speculated(std::size_t group) {
  ZERO_CHECK(speculating_ && group < regions_.size() && position_[group] != kNotSpeculated,
             "release_speculated({}) outside the speculation's order", group);
  const Region& region = regions_[group];
  written_other_[group] = true;
  write_from(slot_at(position_[group]), region.offsets[1 - region.current], region.bytes);
}

void OptimizerSwap::end_speculation(bool keep) {
  if (!speculating_) return;
  speculating_ = false;
  for (Slot& slot : slots_) {
    settle(slot);
    slot.group.reset();  // the slots' contents are the speculation's, not the current state's
  }
  if (keep) {
    for (std::size_t g = 0; g < regions_.size(); ++g) {
      if (written_other_[g]) regions_[g].current = 1 - regions_[g].current;
    }
  }
  next_read_ = 0;
}

}  // namespace zero::engine
