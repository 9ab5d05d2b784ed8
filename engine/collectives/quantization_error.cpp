// QuantizationError: ZeRO++'s error against exact collectives (see quantization_error.h).
#include "engine/collectives/quantization_error.h"

#include <algorithm>
#include <cmath>

namespace zero::engine {

QuantizationError::QuantizationError(Device& device, std::size_t round_trip_bytes,
                                     std::size_t exact_buffers, std::size_t exact_bytes)
    : device_(device) {
  const auto aligned = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
  const std::size_t scratch = kScratch * sizeof(float);
  const std::size_t round_trip = aligned(round_trip_bytes);
  bytes_ = 256 + 2 * scratch + round_trip + exact_buffers * aligned(exact_bytes);
  base_ = static_cast<char*>(device_.reserve(Tier::device, bytes_));
  sums_ = reinterpret_cast<float*>(base_);
  scratch_[0] = reinterpret_cast<float*>(base_ + 256);
  scratch_[1] = reinterpret_cast<float*>(base_ + 256 + scratch);
  round_trip_ = round_trip != 0 ? base_ + 256 + 2 * scratch : nullptr;
  for (std::size_t i = 0; i < exact_buffers; ++i) {
    exact_.push_back(base_ + 256 + 2 * scratch + round_trip + i * aligned(exact_bytes));
  }
  device_.fill(sums_, DType::f32, 4, 0.0f, device_.default_stream());
  device_.default_stream().synchronize();
}

QuantizationError::~QuantizationError() {
  device_.unreserve(Tier::device, base_, bytes_);
}

void QuantizationError::add(Kind kind, const void* exact, const void* approx, DType dtype,
                            std::size_t count, Stream& stream) {
  float* norm = sums_ + 2 * kind;
  float* error = norm + 1;
  float* diff = scratch_[kind];
  const std::size_t size = dtype_size(dtype);
  for (std::size_t at = 0; at < count; at += kScratch) {
    const std::size_t n = std::min(kScratch, count - at);
    const char* e = static_cast<const char*>(exact) + at * size;
    const char* a = static_cast<const char*>(approx) + at * size;
    if (dtype == DType::f32) {
      device_.copy_async(diff, a, n * sizeof(float), stream);
    } else {
      device_.cast(a, dtype, diff, DType::f32, n, stream);
    }
    device_.accumulate(e, dtype, diff, DType::f32, n, -1.0f, stream);
    device_.sum_squares(e, dtype, n, norm, stream);
    device_.sum_squares(diff, DType::f32, n, error, stream);
  }
}

std::array<double, 2> QuantizationError::take(Agreement& agreement) {
  float host[4];
  device_.synchronize();
  device_.copy(host, sums_, sizeof host);
  device_.fill(sums_, DType::f32, 4, 0.0f, device_.default_stream());
  device_.default_stream().synchronize();
  // The mean over the ranks is the sum over a world's size: the ratio is the same.
  double values[4] = {host[0], host[1], host[2], host[3]};
  agreement.mean(values, 4);
  std::array<double, 2> relative{};
  for (int kind = 0; kind < 2; ++kind) {
    const double norm = values[2 * kind];
    relative[kind] = norm > 0 ? std::sqrt(values[2 * kind + 1] / norm) : -1.0;
  }
  return relative;
}

}  // namespace zero::engine
