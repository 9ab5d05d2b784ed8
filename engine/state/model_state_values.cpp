// ModelState's values in: one walk over the parameters puts each value from a ValueSource (the
// initial values at init, a checkpoint, pretrained weights) where this rank keeps it (the
// replicated compute copy at stages 0-2, the compute shard at stage 3, in device memory, host
// memory or params.swap) and each trainable parameter's master and moments over its owned range
// (in device memory, host memory or the optimizer's swap); and one parameter's value set in
// place of the one it had, its moments kept (write_param).
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/state/model_state.h"

namespace zero::engine {

void ModelState::assign(ValueSource& source) {
  Device& device = ctx_.device;
  const config::Config& config = ctx_.config;
  const Registry& registry = ctx_.registry;
  const Layout& layout = ctx_.layout;
  const int rank = rank_, world = layout.world;
  const auto& specs = registry.params();
  // Host values go through a device-tier staging area (the device's kernels read device memory).
  std::size_t largest = 1;
  for (const auto& spec : specs) largest = std::max(largest, spec.numel);
  const std::size_t staging_bytes = largest * sizeof(float);
  float* staging = static_cast<float*>(device.reserve(Tier::device, staging_bytes));
  const int moment_count = config.optimizer.state_buffers();
  const std::size_t state_size = dtype_size(config.optimizer_state_dtype);

  try {
    std::vector<float> values;
    std::vector<char> moment_bytes[2];
    for (std::size_t p = 0; p < specs.size(); ++p) {
      const ParamSpec& spec = specs[p];
      const ParamPlacement& state = layout.params[p];
      source.begin(p);
      // The owned range of a trainable parameter: all of it at stage 0, shard `rank` after.
      const int r = modes_.stage == 0 ? 0 : rank;
      const std::uint64_t owned_first = state.shape.begin(r);
      const std::size_t owned_count = state.shape.valid(r);
      const void* moment_in[2] = {nullptr, nullptr};
      if (spec.trainable) {
        for (int m = 0; m < moment_count; ++m) {
          moment_bytes[m].resize(owned_count * state_size);
          if (source.moment(p, m, owned_first, owned_count, config.optimizer_state_dtype,
                            moment_bytes[m].data())) {
            moment_in[m] = moment_bytes[m].data();
          }
        }
      }
      const ShardShape world_shape = shard_shape(spec.numel, world);
      if (modes_.stage <= 2) {
        // The whole parameter, asked for one world shard at a time.
        values.assign(spec.numel, 0.0f);
        for (int q = 0; q < world; ++q) {
          source.values(p, world_shape.begin(q), world_shape.valid(q),
                        values.data() + world_shape.begin(q));
        }
        put_compute(p, values.data(), staging);
        if (spec.trainable) {
          put_state(state.flat, values.data() + owned_first, moment_in, owned_count);
        }
        continue;
      }
      // Stage 3: this rank's shard over its shard group.
      const std::size_t count = state.shape.valid(rank);
      values.assign(count, 0.0f);
      source.values(p, state.shape.begin(rank), count, values.data());
      if (spec.trainable) put_state(state.flat, values.data(), moment_in, count);
      put_compute(p, values.data(), staging);
    }
    finish_state();
  } catch (...) {
    abandon_state();
    device.unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device.unreserve(Tier::device, staging, staging_bytes);
}

void ModelState::put_compute(std::size_t p, const float* values, float* staging) {
  const ParamPlacement& state = ctx_.layout.params[p];
  Device& device = ctx_.device;
  Stream& stream = device.default_stream();
  auto upload = [&](void* dst, const float* host, std::size_t count) {
    if (count == 0) return;
    device.copy(staging, host, count * sizeof(float));
    device.cast(staging, DType::f32, dst, modes_.compute, count, stream);
    stream.synchronize();
  };
  if (modes_.stage <= 2) {
    upload(full(p), values, ctx_.registry.param(p).numel);
    return;
  }
  const std::size_t count = state.shape.valid(rank_);
  char* shard = state.compute_flat == kNone ? nullptr
                                            : static_cast<char*>(compute_shard()) +
                                                  state.compute_flat * dtype_size(modes_.compute);
  if (swapped_param(p)) {
    host_device().cast(values, DType::f32, param_swap()->staging(p), modes_.compute, count,
                       host_device().default_stream());
    host_device().default_stream().synchronize();
    param_swap()->store(p);
  } else if (shard != nullptr && modes_.param_offload) {
    // Host memory: cast on the host.
    host_device().cast(values, DType::f32, shard, modes_.compute, count,
                       host_device().default_stream());
    host_device().default_stream().synchronize();
  } else if (shard != nullptr) {
    upload(shard, values, count);
  }
}

void ModelState::write_param(std::size_t p, const float* values) {
  const ParamSpec& spec = ctx_.registry.param(p);
  const ParamPlacement& state = ctx_.layout.params[p];
  if (spec.trainable && !master_is_param()) {
    const int r = modes_.stage == 0 ? 0 : rank_;
    write_master(state.flat, state.shape.valid(r), values + state.shape.begin(r));
  }
  Device& device = ctx_.device;
  const std::size_t staging_bytes = std::max<std::size_t>(spec.numel, 1) * sizeof(float);
  float* staging = static_cast<float*>(device.reserve(Tier::device, staging_bytes));
  try {
    put_compute(p, modes_.stage <= 2 ? values : values + state.shape.begin(rank_), staging);
  } catch (...) {
    device.unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device.unreserve(Tier::device, staging, staging_bytes);
}

}  // namespace zero::engine
