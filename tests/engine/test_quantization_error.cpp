// QuantizationError alone (engine/collectives/quantization_error.h), on one rank of the local
// communicator and the CPU device: the relative L2 error it reports for each kind equals
// sqrt(sum (approx - exact)^2 / sum exact^2) computed here in double, over pieces larger than its
// scratch, in fp32 and bf16, summed over several adds; the kinds are kept apart; a kind with
// nothing added is -1; take() starts the sums again; its buffers are where it says.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/half.h"
#include "comm/backends.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/quantization_error.h"
#include "tests/engine/one_rank.h"

namespace zero::engine {
namespace {

// One rank, with device memory for the values it measures (freed with it).
struct QuantRank : testing::OneRank {
  const void* on_device(const void* values, std::size_t bytes) {
    void* p = device->reserve(Tier::device, bytes);
    device->copy(p, values, bytes);
    held.push_back({p, bytes});
    return p;
  }
  ~QuantRank() {
    for (const auto& [p, bytes] : held) device->unreserve(Tier::device, p, bytes);
  }
  std::vector<std::pair<void*, std::size_t>> held;
};

// Exact values and an approximation of them off by a relative `noise`.
void noisy_pair(std::size_t n, double noise, std::uint32_t seed, std::vector<float>& exact,
                std::vector<float>& approx) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  exact.resize(n);
  approx.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    exact[i] = normal(rng);
    approx[i] = exact[i] * (1.0f + static_cast<float>(noise) * normal(rng));
  }
}

double relative_l2(const std::vector<float>& exact, const std::vector<float>& approx) {
  double norm = 0, error = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    norm += double(exact[i]) * exact[i];
    error += (double(approx[i]) - exact[i]) * (double(approx[i]) - exact[i]);
  }
  return std::sqrt(error / norm);
}

}  // namespace

TEST_CASE("quantization error: nothing measured is -1, and take() starts again",
          "[engine][quant]") {
  QuantRank r;
  QuantizationError q(*r.device, 0, 0, 0);
  CHECK(q.round_trip() == nullptr);
  CHECK(q.exact_buffers().empty());
  const auto none = q.take(r.agreement);
  CHECK(none[QuantizationError::weights] == -1.0);
  CHECK(none[QuantizationError::gradients] == -1.0);
  std::vector<float> exact, approx;
  noisy_pair(1000, 0.01, 1, exact, approx);
  q.add(QuantizationError::weights, r.on_device(exact.data(), 4000),
        r.on_device(approx.data(), 4000), DType::f32, 1000, r.device->default_stream());
  const auto once = q.take(r.agreement);
  CHECK(once[QuantizationError::weights] == Approx(relative_l2(exact, approx)).epsilon(1e-5));
  CHECK(once[QuantizationError::gradients] == -1.0);  // kept apart
  const auto after = q.take(r.agreement);
  CHECK(after[QuantizationError::weights] == -1.0);
}

TEST_CASE("quantization error: fp32 and bf16 over pieces past the scratch, summed over adds",
          "[engine][quant]") {
  QuantRank r;
  QuantizationError q(*r.device, 1000, 3, 5000);
  // Two adds of odd sizes, the first past the 2^18-value scratch, into the gradients' sums.
  std::vector<float> e1, a1, e2, a2;
  noisy_pair(300007, 0.004, 2, e1, a1);
  noisy_pair(77, 0.2, 3, e2, a2);
  Stream& stream = r.device->default_stream();
  q.add(QuantizationError::gradients, r.on_device(e1.data(), e1.size() * 4),
        r.on_device(a1.data(), a1.size() * 4), DType::f32, e1.size(), stream);
  q.add(QuantizationError::gradients, r.on_device(e2.data(), e2.size() * 4),
        r.on_device(a2.data(), a2.size() * 4), DType::f32, e2.size(), stream);
  std::vector<float> exact = e1, approx = a1;
  exact.insert(exact.end(), e2.begin(), e2.end());
  approx.insert(approx.end(), a2.begin(), a2.end());
  // bf16 values into the weights' sums: the reference sees the same rounded values.
  std::vector<float> ew, aw;
  noisy_pair(4099, 0.05, 4, ew, aw);
  std::vector<std::uint16_t> eb(ew.size()), ab(aw.size());
  for (std::size_t i = 0; i < ew.size(); ++i) {
    eb[i] = float_to_bf16(ew[i]);
    ab[i] = float_to_bf16(aw[i]);
    ew[i] = bf16_to_float(eb[i]);
    aw[i] = bf16_to_float(ab[i]);
  }
  q.add(QuantizationError::weights, r.on_device(eb.data(), eb.size() * 2),
        r.on_device(ab.data(), ab.size() * 2), DType::bf16, eb.size(), stream);
  const auto got = q.take(r.agreement);
  CHECK(got[QuantizationError::gradients] == Approx(relative_l2(exact, approx)).epsilon(1e-4));
  CHECK(got[QuantizationError::weights] == Approx(relative_l2(ew, aw)).epsilon(1e-4));
  // The buffers: a round trip, three exact blocks of 5000 bytes, apart and aligned.
  REQUIRE(q.round_trip() != nullptr);
  const std::vector<void*> blocks = q.exact_buffers();
  REQUIRE(blocks.size() == 3);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHECK(reinterpret_cast<std::uintptr_t>(blocks[i]) % 256 == 0);
    if (i > 0) CHECK(static_cast<char*>(blocks[i]) - static_cast<char*>(blocks[i - 1]) >= 5000);
  }
  CHECK(static_cast<char*>(blocks[0]) - static_cast<char*>(q.round_trip()) >= 1000);
}

}  // namespace zero::engine
