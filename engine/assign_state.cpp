// Setting the model state from values that come from outside: the initial values at init, a
// checkpoint, pretrained weights. One walk over the parameters puts each value where this
// rank keeps it (the replicated compute copy at stages 0-2, the compute shard at stage 3, in
// device memory, host memory or params.swap) and each trainable parameter's master and moments
// over its owned range (in device memory, host memory or the optimizer's swap).
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "engine/engine_impl.h"

namespace zero::engine {
namespace {

// Init: rank 0's values (broadcast), the caller's initializer per range, or zeros.
class InitialSource final : public ValueSource {
 public:
  InitialSource(Engine::Impl& e, std::vector<float> from_root, float* staging)
      : e_(e), from_root_(std::move(from_root)), staging_(staging) {}

  void begin(std::size_t p) override {
    broadcast_.clear();
    const InitialValue& initial = e_.initial[p];
    const std::size_t numel = e_.registry.param(p).numel;
    if (initial.initializer || from_root_[p] == 0.0f || numel == 0) return;
    if (e_.rank == 0) e_.device->copy(staging_, initial.values, numel * sizeof(float));
    e_.comm->broadcast(staging_, numel, DType::f32, 0).wait();
    broadcast_.resize(numel);
    e_.device->copy(broadcast_.data(), staging_, numel * sizeof(float));
  }

  void values(std::size_t p, std::uint64_t first, std::size_t count, float* out) override {
    if (count == 0) return;
    const InitialValue& initial = e_.initial[p];
    if (initial.initializer) {
      initial.initializer(first, count, out);
    } else if (!broadcast_.empty()) {
      std::memcpy(out, broadcast_.data() + first, count * sizeof(float));
    } else {
      std::fill(out, out + count, 0.0f);
    }
  }

 private:
  Engine::Impl& e_;
  std::vector<float> from_root_;
  float* staging_;
  std::vector<float> broadcast_;
};

}  // namespace

void Engine::Impl::fill_initial_values() {
  const auto& specs = registry.params();
  // Which parameters rank 0 passed values for: one all-reduce for them all, since every rank
  // takes part in each broadcast whatever it passed.
  std::vector<float> from_root(std::max<std::size_t>(specs.size(), 1), 0.0f);
  for (std::size_t p = 0; p < specs.size(); ++p) {
    if (rank == 0 && !initial[p].initializer && initial[p].values != nullptr) {
      from_root[p] = 1.0f;
    }
  }
  std::size_t largest = 1;
  for (const auto& spec : specs) largest = std::max(largest, spec.numel);
  const std::size_t staging_bytes = std::max(largest, from_root.size()) * sizeof(float);
  auto* staging = static_cast<float*>(device->reserve(Tier::device, staging_bytes));
  try {
    device->copy(staging, from_root.data(), from_root.size() * sizeof(float));
    comm->all_reduce(staging, from_root.size(), DType::f32, ReduceOp::max).wait();
    device->copy(from_root.data(), staging, from_root.size() * sizeof(float));
    InitialSource source(*this, std::move(from_root), staging);
    assign_state(source);
  } catch (...) {
    device->unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device->unreserve(Tier::device, staging, staging_bytes);
  for (InitialValue& value : initial) value = {};
}

void Engine::Impl::assign_state(ValueSource& source) {
  Stream& stream = device->default_stream();
  const auto& specs = registry.params();
  // Host values go through a device-tier staging area (the device's kernels read device memory).
  std::size_t largest = 1;
  for (const auto& spec : specs) largest = std::max(largest, spec.numel);
  const std::size_t staging_bytes = largest * sizeof(float);
  float* staging = static_cast<float*>(device->reserve(Tier::device, staging_bytes));
  auto upload = [&](void* dst, DType dtype, const float* host, std::size_t count) {
    if (count == 0) return;
    device->copy(staging, host, count * sizeof(float));
    device->cast(staging, DType::f32, dst, dtype, count, stream);
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
      const int r = stage == 0 ? 0 : rank;
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
      if (stage <= 2) {
        // The whole parameter, asked for one world shard at a time.
        values.assign(spec.numel, 0.0f);
        for (int q = 0; q < world; ++q) {
          source.values(p, world_shape.begin(q), world_shape.valid(q),
                        values.data() + world_shape.begin(q));
        }
        upload(model_state->full(p), compute, values.data(), spec.numel);
        if (spec.trainable) {
          model_state->put_state(state.flat, values.data() + owned_first, moment_in, owned_count);
        }
        continue;
      }
      const std::size_t count = world_shape.valid(rank);
      values.assign(count, 0.0f);
      source.values(p, world_shape.begin(rank), count, values.data());
      if (spec.trainable) model_state->put_state(state.flat, values.data(), moment_in, count);
      if (model_state->swapped_param(p)) {
        model_state->host_device().cast(values.data(), DType::f32, model_state->param_swap()->staging(p), compute, count,
                           model_state->host_device().default_stream());
        model_state->host_device().default_stream().synchronize();
        model_state->param_swap()->store(p);
      } else if (state.compute_flat != kNone && param_offload) {
        // Host memory: cast on the host.
        model_state->host_device().cast(values.data(), DType::f32,
                           static_cast<char*>(model_state->compute_shard()) +
                               state.compute_flat * dtype_size(compute),
                           compute, count, model_state->host_device().default_stream());
        model_state->host_device().default_stream().synchronize();
      } else if (state.compute_flat != kNone) {
        upload(static_cast<char*>(model_state->compute_shard()) + state.compute_flat * dtype_size(compute),
               compute, values.data(), count);
      }
    }
    model_state->finish_state();
  } catch (...) {
    model_state->abandon_state();
    device->unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device->unreserve(Tier::device, staging, staging_bytes);
}

}  // namespace zero::engine
