// ModelState's NVMe half: the optimizer's masters and moments in step-group regions of a swap
// file (engine/state/optimizer_swap.h moves them) and the groups' gradients beside them
// (engine/gradients/grad_swap.h), the stage-3 compute shards in per-parameter
// regions of another (engine/state/param_swap.h), the I/O engine and the rank's swap directory they
// share, the shards as the ParamFetcher reads them (the ShardStore), and the masters' way out
// for read_param wherever they live.
#include <algorithm>
#include <cstring>
#include <utility>

#include <unistd.h>

#include "base/bytes.h"
#include "base/direct_io.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/state/model_state.h"

namespace zero::engine {

// The swap's pinned buffers: a swapped group's region (its masters and its moments, each
// aligned for direct I/O), and with gradient NVMe its gradient's.
void ModelState::check_swap_buffers() const {
  const config::Config& config = ctx_.config;
  const std::size_t count = plan_.swap_slots;
  const std::size_t largest = plan_.swap_slot_bytes;
  const std::size_t bytes = count * (largest + kDirectIoAlignment) +
                            plan_.grad_slots * (plan_.grad_slot_bytes + kDirectIoAlignment);
  // Refused here, before any memory is taken, with what to set.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  const std::size_t memory =
      pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
  if (memory != 0 && bytes > memory / 2) {
    const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
    const std::size_t per_element =
        4 + static_cast<std::size_t>(config.optimizer.state_buffers()) * state_size +
        (modes_.grad_nvme ? dtype_size(modes_.accum) : 0);
    throw make_error(
        ErrorCategory::config,
        "offload_optimizer: {} buffers of the largest step group's optimizer state ({} each){} "
        "need {} of pinned memory, more than half of this host's {}; lower "
        "zero_optimization.sub_group_size (now {} elements; {} would make them about {} in all) "
        "or offload_optimizer.buffer_count",
        count, format_bytes(largest),
        modes_.grad_nvme
            ? fmt::format(" and of its gradient ({} each)", format_bytes(plan_.grad_slot_bytes))
            : std::string(),
        format_bytes(bytes), format_bytes(memory), config.zero.sub_group_size,
        memory / 8 / count / std::max<std::size_t>(per_element, 1), format_bytes(memory / 8));
  }
}

void ModelState::open_swap_io(const std::string& job_id) {
  if (aio_) return;
  const config::Config& config = ctx_.config;
  offload::AioOptions aio_options;
  aio_options.block_size = static_cast<std::size_t>(config.aio.block_size);
  aio_options.queue_depth = static_cast<int>(config.aio.queue_depth);
  aio_options.intra_op_parallelism = static_cast<int>(config.aio.intra_op_parallelism);
  aio_options.inject = faults_.aio;
  aio_ = offload::AsyncIO::create(aio_options);
  // One directory per rank holds both swap files; the optimizer's nvme_path wins when both
  // are set.
  const std::string& path = modes_.optimizer_nvme ? config.zero.offload_optimizer.nvme_path
                                                  : config.zero.offload_param.nvme_path;
  swap_dir_ = std::make_unique<offload::SwapDirectory>(path, job_id, ctx_.comm.rank());
}

void ModelState::set_up_swap() {
  const Layout& layout = ctx_.layout;
  const config::Config& config = ctx_.config;
  OptimizerSwapOptions swap_options;
  for (std::size_t g = layout.resident_groups; g < layout.step_groups.size(); ++g) {
    swap_options.group_elements.push_back(layout.step_groups[g].block);
  }
  const std::size_t capacity = plan_.nvme.capacity;
  swap_options.state_buffers = config.optimizer.state_buffers();
  swap_options.state_dtype = config.optimizer_state_dtype;
  swap_options.buffer_count = static_cast<std::size_t>(config.zero.offload_optimizer.buffer_count);
  swap_options.pipeline_read = config.zero.offload_optimizer.pipeline_read;
  swap_options.pipeline_write = config.zero.offload_optimizer.pipeline_write;
  if (modes_.grad_nvme) swap_options.grad_dtype = modes_.accum;
  swap_options.second_regions = modes_.speculate;  // super_offload's speculated steps
  nvme_arena_ = std::make_unique<Arena>(nullptr, Tier::nvme, capacity, plan_.nvme.name);
  swap_ = std::make_unique<OptimizerSwap>(std::move(swap_options), *aio_, *swap_dir_,
                                          *offload_arena_, *nvme_arena_);
  log::info("engine: optimizer state of {} step groups swapped to {} ({}), {} kept in memory",
            swap_->groups(), swap_->path(), format_bytes(capacity), layout.resident_groups);
}

void ModelState::set_up_grad_swap() {
  const Layout& layout = ctx_.layout;
  std::vector<std::size_t> lo, elements;
  for (std::size_t g = layout.resident_groups; g < layout.step_groups.size(); ++g) {
    lo.push_back(layout.group_lo[g]);
    elements.push_back(layout.step_groups[g].block);
  }
  grad_swap_ = std::make_unique<GradSwap>(*swap_, *aio_, *offload_arena_, modes_.accum,
                                          plan_.grad_slots, std::move(lo), std::move(elements));
  log::info(
      "engine: the gradients of those {} step groups swapped beside them, through {} "
      "buffers of {}",
      swap_->groups(), plan_.grad_slots, format_bytes(plan_.grad_slot_bytes));
}

const void* ModelState::device_shard(std::size_t param) {
  // With offload_param the shards are in host memory (or on NVMe): copied into place first.
  return modes_.param_offload ? nullptr : shard_source(param);
}

void ModelState::copy_shard(std::size_t param, void* place) {
  const std::size_t bytes = ctx_.layout.params[param].shape.shard * dtype_size(modes_.compute);
  if (bytes == 0) return;
  ctx_.device.copy(place, swapped_param(param) ? param_swap_->read(param) : shard_source(param),
                   bytes);
}

void ModelState::place_shard(std::size_t param, void* place, Stream& stream) {
  const std::size_t bytes = ctx_.layout.params[param].shape.shard * dtype_size(modes_.compute);
  if (bytes == 0) return;
  ctx_.device.copy_async(place, shard_source(param), bytes, stream);
}

offload::Ticket ModelState::start_read(std::size_t param, std::size_t buffer) {
  return param_swap_->start_read(param, buffer);
}

const void* ModelState::finish_read(offload::Ticket ticket, std::size_t buffer) {
  return param_swap_->finish_read(ticket, buffer);
}

std::size_t ModelState::group_at(std::size_t flat) const {
  const auto& group_lo = ctx_.layout.group_lo;
  const auto it = std::upper_bound(group_lo.begin(), group_lo.end(), flat);
  return static_cast<std::size_t>(it - group_lo.begin()) - 1;
}

void ModelState::copy_master(std::size_t flat, std::size_t count, float* out) {
  unify();
  const Layout& layout = ctx_.layout;
  while (count > 0) {
    if (flat < layout.resident_end) {
      const std::size_t n = std::min(count, layout.resident_end - flat);
      ctx_.device.copy(out, master_ + flat, n * sizeof(float));
      flat += n, out += n, count -= n;
      continue;
    }
    const std::size_t g = group_at(flat);
    const GroupView view = swap_->peek(g - layout.resident_groups);
    const std::size_t n = std::min(count, layout.group_lo[g] + layout.step_groups[g].block - flat);
    ctx_.device.copy(out, view.master + (flat - layout.group_lo[g]), n * sizeof(float));
    flat += n, out += n, count -= n;
  }
}

void ModelState::write_master(std::size_t flat, std::size_t count, const float* values) {
  unify();  // the values go to copy 0, the current copy of every group
  const Layout& layout = ctx_.layout;
  Device& resident = modes_.optimizer_offload ? host_device() : ctx_.device;
  bool swapped = false;
  while (count > 0) {
    if (flat < layout.resident_end) {
      const std::size_t n = std::min(count, layout.resident_end - flat);
      resident.copy(master_ + flat, values, n * sizeof(float));
      flat += n, values += n, count -= n;
      continue;
    }
    // The group into a buffer, the range changed there, and the group written back.
    const std::size_t g = group_at(flat);
    const std::size_t s = g - layout.resident_groups;
    const GroupView view = swap_->peek(s);
    const std::size_t n = std::min(count, layout.group_lo[g] + layout.step_groups[g].block - flat);
    std::memcpy(view.master + (flat - layout.group_lo[g]), values, n * sizeof(float));
    swap_->commit(s);
    swapped = true;
    flat += n, values += n, count -= n;
  }
  if (swapped) swap_->finish();  // written before anything reads the groups again
}

}  // namespace zero::engine
