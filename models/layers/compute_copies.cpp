// ComputeCopies (compute_copies.h): the fp32 views, their conversions and the flush.
#include "models/layers/compute_copies.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace zero::layers {

float ComputeCopies::load(const void* data, zero_dtype dtype, std::size_t i) noexcept {
  switch (dtype) {
    case ZERO_FP32:
      return static_cast<const float*>(data)[i];
    case ZERO_BF16:
      return std::bit_cast<float>(
          static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(data)[i]) << 16);
    case ZERO_FP16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const std::uint16_t*>(data) + i, 2);
      return static_cast<float>(h);
    }
  }
  return 0.0f;
}

void ComputeCopies::store(void* data, zero_dtype dtype, std::size_t i, float value) noexcept {
  switch (dtype) {
    case ZERO_FP32:
      static_cast<float*>(data)[i] = value;
      return;
    case ZERO_BF16: {
      std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
      std::uint16_t out;
      if ((bits & 0x7fffffffu) > 0x7f800000u) {
        out = static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // NaN, kept quiet
      } else {
        bits += 0x7fffu + ((bits >> 16) & 1u);
        out = static_cast<std::uint16_t>(bits >> 16);
      }
      static_cast<std::uint16_t*>(data)[i] = out;
      return;
    }
    case ZERO_FP16: {
      const _Float16 h = static_cast<_Float16>(value);  // round to nearest even
      std::memcpy(static_cast<std::uint16_t*>(data) + i, &h, 2);
      return;
    }
  }
}

float* ComputeCopies::param(int id, void* data) {
  if (dtype_ == ZERO_FP32) return static_cast<float*>(data);
  const auto p = static_cast<std::size_t>(id);
  if (params_.size() <= p) params_.resize(p + 1);
  std::vector<float>& copy = params_[p];
  copy.resize(numel_[p]);
  for (std::size_t i = 0; i < copy.size(); ++i) copy[i] = load(data, dtype_, i);
  return copy.data();
}

float* ComputeCopies::grad(int id, void* data) {
  if (dtype_ == ZERO_FP32) return static_cast<float*>(data);
  const auto p = static_cast<std::size_t>(id);
  if (grads_.size() <= p) grads_.resize(p + 1);
  std::vector<float>& buffer = grads_[p];
  const bool waiting =
      std::any_of(pending_.begin(), pending_.end(), [&](const Pending& q) { return q.id == id; });
  if (!waiting) {
    buffer.assign(numel_[p], 0.0f);
    pending_.push_back({id, data});
  }
  return buffer.data();
}

void ComputeCopies::flush() {
  for (const Pending& q : pending_) {
    std::vector<float>& buffer = grads_[static_cast<std::size_t>(q.id)];
    for (std::size_t i = 0; i < buffer.size(); ++i) {
      store(q.data, dtype_, i, load(q.data, dtype_, i) + buffer[i]);
    }
    std::vector<float>().swap(buffer);
  }
  pending_.clear();
}

void ComputeCopies::end_module() {
  flush();
  for (std::vector<float>& copy : params_) std::vector<float>().swap(copy);
}

std::uint64_t ComputeCopies::held_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const std::vector<float>& copy : params_) n += copy.capacity() * sizeof(float);
  for (const std::vector<float>& buffer : grads_) n += buffer.capacity() * sizeof(float);
  return n;
}

}  // namespace zero::layers
