// Model state on NVMe: the optimizer's masters and moments in step-group regions of a swap file
// (engine/optimizer_swap.h moves them), the stage-3 compute shards in per-parameter regions of
// another (engine/param_swap.h), the I/O engine and the rank's swap directory they share, the
// shards as the ParamFetcher reads them (its ShardStore), and the masters' way out for
// read_param wherever they live. The layout and allocation are model_state.cpp's.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "engine/engine_impl.h"

namespace zero::engine {
namespace {

constexpr std::size_t kDirectAlign = 4096;  // the strictest direct-I/O alignment

}  // namespace

// A swapped group's region: its masters and its moments, each aligned for direct I/O.
void Engine::Impl::check_swap_buffers() const {
  const std::size_t count = memory_plan.swap_slots;
  const std::size_t largest = memory_plan.swap_slot_bytes;
  const std::size_t bytes = count * (largest + kDirectAlign);
  // Refused here, before any memory is taken, with what to set.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  const std::size_t memory = pages > 0 && page > 0 ? static_cast<std::size_t>(pages) *
                                                         static_cast<std::size_t>(page)
                                                   : 0;
  if (memory != 0 && bytes > memory / 2) {
    const std::size_t state_size = dtype_size(config.optimizer_state_dtype);
    const std::size_t per_element =
        4 + static_cast<std::size_t>(config.optimizer.state_buffers()) * state_size;
    throw make_error(
        ErrorCategory::config,
        "offload_optimizer: {} buffers of the largest step group's optimizer state ({} each) "
        "need {} of pinned memory, more than half of this host's {}; lower "
        "zero_optimization.sub_group_size (now {} elements; {} would make them about {} in all) "
        "or offload_optimizer.buffer_count",
        count, format_bytes(largest), format_bytes(bytes), format_bytes(memory),
        config.zero.sub_group_size, memory / 8 / count / std::max<std::size_t>(per_element, 1),
        format_bytes(memory / 8));
  }
}

void Engine::Impl::open_swap_io() {
  if (aio) return;
  // A job id every rank shares: rank 0's process id and clock.
  auto* scratch = reinterpret_cast<std::int64_t*>(scalars) + 8;
  scratch[0] = rank == 0 ? (static_cast<std::int64_t>(getpid()) << 32) ^
                               static_cast<std::int64_t>(std::time(nullptr))
                         : 0;
  comm->broadcast(scratch, 1, DType::i64, 0).wait();
  const std::string job = fmt::format("{:x}", static_cast<std::uint64_t>(scratch[0]));

  offload::AioOptions aio_options;
  aio_options.block_size = static_cast<std::size_t>(config.aio.block_size);
  aio_options.queue_depth = static_cast<int>(config.aio.queue_depth);
  aio_options.intra_op_parallelism = static_cast<int>(config.aio.intra_op_parallelism);
  aio_options.inject = options.aio_inject;
  aio = offload::AsyncIO::create(aio_options);
  // One directory per rank holds both swap files; the optimizer's nvme_path wins when both
  // are set.
  const std::string& path = nvme ? config.zero.offload_optimizer.nvme_path
                                 : config.zero.offload_param.nvme_path;
  swap_dir = std::make_unique<offload::SwapDirectory>(path, job, rank);
}

void Engine::Impl::set_up_swap() {
  open_swap_io();
  OptimizerSwapOptions swap_options;
  for (std::size_t g = resident_groups; g < step_groups.size(); ++g) {
    swap_options.group_elements.push_back(step_groups[g].block);
  }
  const std::size_t capacity = memory_plan.nvme.capacity;
  swap_options.state_buffers = config.optimizer.state_buffers();
  swap_options.state_dtype = config.optimizer_state_dtype;
  swap_options.buffer_count = static_cast<std::size_t>(config.zero.offload_optimizer.buffer_count);
  swap_options.pipeline_read = config.zero.offload_optimizer.pipeline_read;
  swap_options.pipeline_write = config.zero.offload_optimizer.pipeline_write;
  nvme_arena = std::make_unique<Arena>(nullptr, Tier::nvme, capacity, memory_plan.nvme.name);
  swap = std::make_unique<OptimizerSwap>(std::move(swap_options), *aio, *swap_dir,
                                         *offload_arena, *nvme_arena);
  log::info("engine: optimizer state of {} step groups swapped to {} ({}), {} kept in memory",
            swap->groups(), swap->path(), format_bytes(capacity), resident_groups);
}

const void* Engine::Impl::device_shard(std::size_t param) {
  // With offload_param the shards are in host memory (or on NVMe): copied into place first.
  return param_offload ? nullptr : shard_source(param);
}

void Engine::Impl::copy_shard(std::size_t param, void* place) {
  const std::size_t bytes = shard_shape(registry.param(param).numel, world).shard *
                            dtype_size(compute);
  if (bytes == 0) return;
  device->copy(place, swapped_param(param) ? param_swap->read(param) : shard_source(param),
               bytes);
}

offload::Ticket Engine::Impl::start_read(std::size_t param, std::size_t buffer) {
  return param_swap->start_read(param, buffer);
}

const void* Engine::Impl::finish_read(offload::Ticket ticket, std::size_t buffer) {
  return param_swap->finish_read(ticket, buffer);
}

std::size_t Engine::Impl::group_at(std::size_t flat) const {
  const auto it = std::upper_bound(group_lo.begin(), group_lo.end(), flat);
  return static_cast<std::size_t>(it - group_lo.begin()) - 1;
}

void Engine::Impl::copy_master(std::size_t flat, std::size_t count, float* out) {
  while (count > 0) {
    if (flat < resident_end) {
      const std::size_t n = std::min(count, resident_end - flat);
      device->copy(out, master + flat, n * sizeof(float));
      flat += n, out += n, count -= n;
      continue;
    }
    const std::size_t g = group_at(flat);
    const GroupView view = swap->peek(g - resident_groups);
    const std::size_t n = std::min(count, group_lo[g] + step_groups[g].block - flat);
    device->copy(out, view.master + (flat - group_lo[g]), n * sizeof(float));
    flat += n, out += n, count -= n;
  }
}

}  // namespace zero::engine
