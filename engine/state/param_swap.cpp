// ParamSwap: stage-3 compute shards on NVMe (see param_swap.h).
#include "engine/state/param_swap.h"

#include <cstring>
#include <exception>
#include <utility>

#include "base/bytes.h"
#include "base/direct_io.h"
#include "base/log.h"

namespace zero::engine {

ParamSwap::ParamSwap(const EngineContext& context, const MemoryPlan& plan, offload::AsyncIO& io,
                     offload::SwapDirectory& directory, Arena& host_arena)
    : ctx_(context), io_(io) {
  arena_ =
      std::make_unique<Arena>(nullptr, Tier::nvme, plan.param_nvme.capacity, plan.param_nvme.name);
  const std::size_t params = ctx_.registry.param_count();
  const DType compute = ctx_.layout.modes.compute;
  region_.assign(params, kNone);
  for (std::size_t p = 0; p < params; ++p) {
    if (!swapped(p) || region_bytes(p) == 0) continue;
    const std::size_t shard = ctx_.layout.params[p].shape.shard;
    region_[p] =
        arena_->allocate(MemoryKind::param, shard * dtype_size(compute), kDirectIoAlignment).offset;
  }
  file_ = directory.create("params.swap", arena_->capacity(),
                           "zero_optimization.offload_param.nvme_path");
  const std::size_t largest = plan.param_bounce_bytes;
  for (void*& bounce : bounce_) {
    bounce = host_arena.allocate(MemoryKind::buffer, largest, kDirectIoAlignment).ptr;
  }
  const auto count = static_cast<std::size_t>(ctx_.config.zero.offload_param.buffer_count);
  for (std::size_t b = 0; b < count; ++b) {
    read_buffers_.push_back(
        host_arena.allocate(MemoryKind::buffer, largest, kDirectIoAlignment).ptr);
  }
  log::info("engine: {} of compute shards swapped to {}, {} elements kept in memory",
            format_bytes(arena_->capacity()), file_->path(), ctx_.layout.compute_resident_end);
}

ParamSwap::~ParamSwap() {
  for (auto& ticket : writing_) {
    try {
      if (ticket) file_->wait(io_, *ticket);
    } catch (const std::exception&) {
      // Nothing depends on it any more.
    }
  }
}

bool ParamSwap::swapped(std::size_t param) const {
  const std::size_t compute_flat = ctx_.layout.params[param].compute_flat;
  return ctx_.layout.modes.param_nvme && compute_flat != kNone &&
         compute_flat >= ctx_.layout.compute_resident_end;
}

std::size_t ParamSwap::region_bytes(std::size_t param) const {
  return align_direct(ctx_.layout.params[param].shape.shard *
                      dtype_size(ctx_.layout.modes.compute));
}

const void* ParamSwap::read(std::size_t param) {
  file_->wait(io_, file_->read(io_, region_[param], bounce_[0], region_bytes(param)));
  return bounce_[0];
}

char* ParamSwap::staging(std::size_t param) {
  std::memset(bounce_[0], 0, region_bytes(param));
  return static_cast<char*>(bounce_[0]);
}

void ParamSwap::store(std::size_t param) {
  const std::size_t region = region_bytes(param);
  if (region == 0) return;
  file_->wait(io_, file_->write(io_, region_[param], bounce_[0], region));
}

char* ParamSwap::assemble(std::size_t param) {
  if (assembling_ != param) {
    // The buffer's previous shard must be on disk before it is reused.
    if (writing_[assembly_]) file_->wait(io_, *std::exchange(writing_[assembly_], {}));
    std::memset(bounce_[assembly_], 0, region_bytes(param));
    assembling_ = param;
  }
  return static_cast<char*>(bounce_[assembly_]);
}

void ParamSwap::write_assembled() {
  const std::size_t region = region_bytes(assembling_);
  if (region != 0) {
    writing_[assembly_] = file_->write(io_, region_[assembling_], bounce_[assembly_], region);
  }
  assembling_ = kNone;
  assembly_ = assembly_ == 1 ? 2 : 1;
}

void ParamSwap::finish_writes() {
  for (auto& ticket : writing_) {
    if (ticket) file_->wait(io_, *std::exchange(ticket, {}));
  }
}

offload::Ticket ParamSwap::start_read(std::size_t param, std::size_t buffer) {
  return file_->read(io_, region_[param], read_buffers_[buffer], region_bytes(param));
}

const void* ParamSwap::finish_read(offload::Ticket ticket, std::size_t buffer) {
  file_->wait(io_, ticket);
  return read_buffers_[buffer];
}

}  // namespace zero::engine
