// Stochastic rounding of fp32 to bf16 for optimizer state, and the counter-based random bits
// it uses. Round-to-nearest bf16 state stalls: with beta2 = 0.999 a step changes v by 0.1%,
// under half a bf16 ulp (1/256 relative), so v rounds back to itself and stops decaying.
// Rounding up with probability equal to the discarded fraction keeps the expected value
// exact, so the moments follow their fp32 course on average.
//
// The bits for element i come from a hash of (seed, step, i): no RNG state, the same result
// however the buffer is tiled or threaded, and vector code computes them lane by lane. One
// 32-bit hash serves both state buffers (low 16 bits for the first, high 16 for the second).
#pragma once

#include <bit>
#include <cstdint>

namespace zero::optim {

// A 32-bit key for one step of one run, for elements whose index has the given high 32 bits.
inline std::uint32_t rounding_key(std::uint64_t seed, std::int64_t step,
                                  std::uint32_t index_high) noexcept {
  std::uint64_t x =
      seed ^ (static_cast<std::uint64_t>(step) * 0x9e3779b97f4a7c15ull) ^
      (static_cast<std::uint64_t>(index_high) << 32 | index_high) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<std::uint32_t>(x ^ (x >> 32));
}

// The random bits of element `index_low` (the low 32 bits of its index) under `key`: murmur3's
// 32-bit finaliser over index * golden ratio ^ key. Vector code repeats these exact steps.
inline std::uint32_t rounding_bits(std::uint32_t key, std::uint32_t index_low) noexcept {
  std::uint32_t x = (index_low * 0x9e3779b1u) ^ key;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

// fp32 -> bf16, rounding away from zero with probability (dropped bits) / 2^16. NaN and
// infinity keep their class; a finite value may round up to infinity only from within one
// bf16 ulp of the largest float.
inline std::uint16_t float_to_bf16_stochastic(float f, std::uint32_t random16) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + (random16 & 0xffffu)) >> 16);
}

}  // namespace zero::optim
