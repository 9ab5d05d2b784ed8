// What the CUDA layer tests (test_model_layers_pointwise.cpp, test_model_layers_products.cpp)
// share, on a GPU and on the CPU emulation of CUDA (tests/emu) alike: CUDA calls that must
// succeed, bf16 values on the host, random bf16 inputs from one generator, the comparison with the
// double reference within a tolerance per element, and device memory and a stream that free
// themselves.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "base/half.h"
#include "models/cuda/layers.h"

namespace zero::test {

using Vec = std::vector<double>;
using Bits = std::vector<cuda_layers::Bf16>;

constexpr double kBf16Unit = 0x1p-8;  // bf16: 8 significant bits, rounded to nearest even
constexpr double kF32Unit = 0x1p-24;  // fp32: 24

#define REQUIRE_CUDA(call)                              \
  do {                                                  \
    const cudaError_t status_ = (call);                 \
    INFO(#call << ": " << cudaGetErrorString(status_)); \
    REQUIRE(status_ == cudaSuccess);                    \
  } while (false)

// The launchers return a cudaError_t as an int.
#define REQUIRE_LAUNCH(call) REQUIRE_CUDA(static_cast<cudaError_t>(call))

// ---- bf16 on the host (base/half.h converts) ----

inline Vec to_double(const Bits& bits) {
  Vec values(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) values[i] = bf16_to_float(bits[i]);
  return values;
}

inline Vec to_double(const std::vector<float>& floats) {
  return Vec(floats.begin(), floats.end());
}

inline Vec magnitudes(const Vec& values) {
  Vec out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = std::fabs(values[i]);
  return out;
}

// ---- Inputs: one generator, a hash of (seed, index) with no state, so that each input is
// named by its own seed and does not depend on what was drawn before it ----

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of stream `seed`: uniform in [0, 1), 53 bits.
inline double random_unit(std::uint64_t seed, std::size_t i) {
  return static_cast<double>(mix(mix(seed) ^ i) >> 11) * 0x1p-53;
}

// n bf16 values uniform in [lo, hi), rounded to nearest.
inline Bits random_bf16(std::size_t n, std::uint64_t seed, double lo, double hi) {
  Bits bits(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = float_to_bf16(static_cast<float>(lo + (hi - lo) * random_unit(seed, i)));
  }
  return bits;
}

// n integers uniform in [lo, hi].
inline std::vector<std::int32_t> random_ints(std::size_t n, std::uint64_t seed, int lo, int hi) {
  std::vector<std::int32_t> values(n);
  const double span = static_cast<double>(hi) - lo + 1;
  for (std::size_t i = 0; i < n; ++i) {
    values[i] = lo + static_cast<std::int32_t>(std::floor(span * random_unit(seed, i)));
  }
  return values;
}

// n multiples of 1/8 in [-2, 2] (exact in bf16, and their sums in fp32 up to 2^21).
inline Bits random_eighths(std::size_t n, std::uint64_t seed) {
  const std::vector<std::int32_t> eighths = random_ints(n, seed, -16, 16);
  Bits bits(n);
  for (std::size_t i = 0; i < n; ++i)
    bits[i] = float_to_bf16(static_cast<float>(eighths[i]) / 8.0f);
  return bits;
}

// ---- Comparison ----

// "" when |got[i] - want[i]| <= tolerance[i] everywhere (a NaN never is); else how many are not,
// the first few, and the worst (by error over tolerance).
inline std::string mismatches(const Vec& got, const Vec& want, const Vec& tolerance) {
  if (got.size() != want.size() || tolerance.size() != want.size()) return "sizes differ";
  std::size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  std::ostringstream first;
  first.precision(9);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double error = std::fabs(got[i] - want[i]);
    if (error <= tolerance[i]) continue;
    if (bad < 5) {
      first << "\n  [" << i << "] got " << got[i] << ", want " << want[i] << " +- " << tolerance[i];
    }
    ++bad;
    const double ratio = std::isnan(error) || tolerance[i] == 0 ? HUGE_VAL : error / tolerance[i];
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad == 0) return "";
  std::ostringstream text;
  text << bad << " of " << want.size() << " off; worst at " << worst << ": " << got[worst]
       << " for " << want[worst] << " (tolerance " << tolerance[worst] << ")" << first.str();
  return text.str();
}

// Requires no mismatch (bf16 or fp32 results against the double reference), naming `what`.
template <class Got>
void require_close(const std::string& what, const std::vector<Got>& got, const Vec& want,
                   const Vec& tolerance) {
  INFO(what);
  REQUIRE(mismatches(to_double(got), want, tolerance) == "");
}

// ---- Device memory and a stream that free themselves ----

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t n) : size_(n) {
    void* p = nullptr;
    REQUIRE_CUDA(cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)));
    data_ = static_cast<T*>(p);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  // Synchronous: the device holds the values when it returns.
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == size_);
    if (size_ == 0) return;
    REQUIRE_CUDA(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
    REQUIRE_CUDA(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_ == 0) return host;
    REQUIRE_CUDA(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t size_;
};

class TestStream {
 public:
  TestStream() { REQUIRE_CUDA(cudaStreamCreate(&stream_)); }
  ~TestStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cuda_layers::Stream get() const { return stream_; }
  void synchronize() const { REQUIRE_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace zero::test
