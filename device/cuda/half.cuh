// fp32 <-> bf16/fp16 conversions in CUDA device code, bit for bit as base/half.h: round to
// nearest with ties to even, NaN kept quiet with its sign and top payload, fp16 overflow to
// infinity, fp16 subnormals exact. Written on raw bits (CUDA C++17 cannot include
// base/half.h), and shared by every kernel that converts: the device's casts
// (cuda_kernels.cu) and the optimizer's copy-out and state (optim/cuda/fused_adam.cu).
#pragma once

namespace zero::cuda {

__device__ __forceinline__ float bf16_to_float(unsigned short h) {
  return __uint_as_float(static_cast<unsigned int>(h) << 16);
}

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
  unsigned int bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet
    return static_cast<unsigned short>((bits >> 16) | 0x0040u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<unsigned short>(bits >> 16);
}

__device__ __forceinline__ float fp16_to_float(unsigned short h) {
  const unsigned int half = h;
  const unsigned int sign = (half & 0x8000u) << 16;
  const unsigned int exponent = (half >> 10) & 0x1fu;
  const unsigned int mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) {  // infinity, or NaN made quiet with its payload kept (as x86 does)
    const unsigned int quiet = mantissa != 0 ? 0x400000u : 0u;
    return __uint_as_float(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return __uint_as_float(sign);
    // Subnormal: mantissa * 2^-24, exact in fp32.
    const float magnitude = __fmul_rn(__uint2float_rn(mantissa), 5.9604644775390625e-8f);
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ __forceinline__ unsigned short float_to_fp16(float f) {
  const unsigned int bits = __float_as_uint(f);
  const unsigned int sign = (bits >> 16) & 0x8000u;
  const unsigned int magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: keep the top payload bits, force quiet
    return static_cast<unsigned short>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) {  // rounds to >= 65520: infinity (also for fp32 infinity)
    return static_cast<unsigned short>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (magnitude < 0x33000000u)
      return static_cast<unsigned short>(sign);  // below 2^-25 (tie) -> 0
    const unsigned int exponent = magnitude >> 23;
    const unsigned int mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const unsigned int shift = 126u - exponent;  // in units of 2^-24: mantissa >> (126 - exponent)
    unsigned int result = mantissa >> shift;
    const unsigned int remainder = mantissa & ((1u << shift) - 1u);
    const unsigned int halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return static_cast<unsigned short>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  unsigned int value = magnitude - 0x38000000u;
  value += 0xfffu + ((value >> 13) & 1u);
  return static_cast<unsigned short>(sign | (value >> 13));
}

}  // namespace zero::cuda
