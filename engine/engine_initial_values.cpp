// The parameters' first values at init: rank 0's values (broadcast), the caller's initializer
// per range, or zeros, put where this rank keeps them by ModelState::assign.
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
    model_state->assign(source);
  } catch (...) {
    device->unreserve(Tier::device, staging, staging_bytes);
    throw;
  }
  device->unreserve(Tier::device, staging, staging_bytes);
  for (InitialValue& value : initial) value = {};
}

}  // namespace zero::engine
