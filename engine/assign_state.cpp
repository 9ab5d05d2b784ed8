// ModelState's values in: one walk over the parameters puts each value from a ValueSource (the
// initial values at init, a checkpoint, pretrained weights) where this rank keeps it (the
// replicated compute copy at stages 0-2, the compute shard at stage 3, in device memory, host
// memory or params.swap) and each trainable parameter's master and moments over its owned range
// (in device memory, host memory or the optimizer's swap).
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/model_state.h"

namespace zero::engine {

void ModelState::assign(ValueSource& source) {
  Device& device = ctx_.device;
  const config::Config& config = ctx_.config;
  const Registry& registry = ctx_.registry;
  const Layout& layout = ctx_.layout;
  const int rank = rank_, world = layout.world;
  Stream& stream = device.default_stream();
  const auto& specs = registry.params();
  // Host values go through a device-tier staging area (the device's kernels read device memory).
  std::size_t largest = 1;
  for (const auto& spec : specs) largest = std::max(largest, spec.numel);
  const std::size_t staging_bytes = largest * sizeof(float);
  float* staging = static_cast<float*>(device.reserve(Tier::device, staging_bytes));
  auto upload = [&](void* dst, DType dtype, const float* host, std::size_t count) {
    if (count == 0) return;
    device.copy(staging, host, count * sizeof(float));
    device.cast(staging, DType::f32, dst, dtype, count, stream);
    stream.synchronize();
  };
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
        upload(full(p), modes_.compute, values.data(), spec.numel);
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
      if (swapped_param(p)) {
        host_device().cast(values.data(), DType::f32, param_swap()->staging(p), modes_.compute,
                           count, host_device().default_stream());
        host_device().default_stream().synchronize();
        param_swap()->store(p);
      } else if (state.compute_flat != kNone && modes_.param_offload) {
        // Host memory: cast on the host.
        host_device().cast(
            values.data(), DType::f32,
            static_cast<char*>(compute_shard()) + state.compute_flat * dtype_size(modes_.compute),
            modes_.compute, count, host_device().default_stream());
        host_device().default_stream().synchronize();
      } else if (state.compute_flat != kNone) {
        upload(
            static_cast<char*>(compute_shard()) + state.compute_flat * dtype_size(modes_.compute),
            modes_.compute, values.data(), count);
      }
    }
    finish_state();
  } catch (...) {
    abandon_state();
    device.unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device.unreserve(Tier::device, staging, staging_bytes);
}

}  // namespace zero::engine
