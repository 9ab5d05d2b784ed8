// Scalar conversions between fp32 and the two 16-bit float formats, rounding to nearest with
// ties to even. These are the reference semantics every vectorised or CUDA cast must match
// bit for bit: NaN stays NaN (quiet, sign kept), values past the largest finite half become
// infinity, and fp16 subnormals are produced and read exactly.
#pragma once

#include <bit>
#include <cstdint>

namespace zero {

inline float bf16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

inline std::uint16_t float_to_bf16(float f) noexcept {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float fp16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {  // infinity, or NaN made quiet with its payload kept (as x86 does)
    const std::uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal: value = mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t float_to_fp16(float f) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) {  // rounds to >= 65520: infinity (also for fp32 infinity)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (magnitude < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 is a tie to 0)
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent-150); in units of 2^-24 that is mantissa >> (126-exponent).
    const std::uint32_t shift = 126u - exponent;
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  std::uint32_t value = magnitude - 0x38000000u;  // exponent - 112, in place
  value += 0xfffu + ((value >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (value >> 13));
}

}  // namespace zero
