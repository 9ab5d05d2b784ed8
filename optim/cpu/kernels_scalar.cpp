// The optimizer kernels for any CPU: portable C++, one element at a time, built with the
// baseline flags. Also the reference the vector policies mirror.
#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "optim/cpu/kernels.h"
#include "optim/rounding.h"

namespace zero::optim::cpu {
namespace scalar_isa {

struct Vec {
  using F = float;
  using U = std::uint32_t;
  static constexpr std::size_t W = 1;

  static F set(float x) { return x; }
  static U setu(std::uint32_t x) { return x; }
  static F add(F a, F b) { return a + b; }
  static F sub(F a, F b) { return a - b; }
  static F mul(F a, F b) { return a * b; }
  static F div(F a, F b) { return a / b; }
  static F sqrt(F a) { return __builtin_sqrtf(a); }
  static F fma(F a, F b, F c) { return a * b + c; }
  static F sign(F x) { return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f; }

  static F load(const float* p) {
    float x;
    std::memcpy(&x, p, sizeof x);
    return x;
  }
  static F load(const bf16_t* p) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_float(h);
  }
  static F load(const f16_t* p) {
    std::uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_float(h);
  }
  static void store(float* p, F x) { std::memcpy(p, &x, sizeof x); }
  static void store(bf16_t* p, F x) {
    const std::uint16_t h = float_to_bf16(x);
    std::memcpy(p, &h, 2);
  }
  static void store(f16_t* p, F x) {
    const std::uint16_t h = float_to_fp16(x);
    std::memcpy(p, &h, 2);
  }
  static void store_truncated(float* p, F x) { store(p, x); }
  static void store_truncated(bf16_t* p, F x) {
    const std::uint16_t h = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x) >> 16);
    std::memcpy(p, &h, 2);
  }
  static void store_stochastic(bf16_t* p, F x, U random16) {
    const std::uint16_t h = float_to_bf16_stochastic(x, random16);
    std::memcpy(p, &h, 2);
  }
  // One lane: never streamed (for_each_vector streams vectors only), so these are stores.
  static void stream(float* p, F x) { store(p, x); }
  static void stream_stochastic(bf16_t* p, F x, U random16) { store_stochastic(p, x, random16); }
  static void fence() {}
  static U lanes(std::uint32_t first) { return first; }
  static U hash(U key, U index) { return rounding_bits(key, index); }
  static U low16(U r) { return r & 0xffffu; }
  static U high16(U r) { return r >> 16; }
};

#include "optim/cpu/kernel_body.h"

}  // namespace scalar_isa

Kernel scalar_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  return scalar_isa::pick_kernel<scalar_isa::Vec>(mode, type, grad, state, out);
}

}  // namespace zero::optim::cpu
