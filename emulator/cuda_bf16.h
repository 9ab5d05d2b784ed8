// CPU emulation of CUDA (emulator/, docs/emulator.md): the bfloat16 of CUDA's cuda_bf16.h that the
// layers use.
// __nv_bfloat16 holds the 16 bits as CUDA's does (2 bytes, 2-byte aligned, member __x); the
// conversions round as the GPU's do: to float exactly, from float to nearest even, a NaN staying
// a quiet NaN. Not here: arithmetic operators and the implicit conversions of CUDA's class
// (the layers convert explicitly), the packed __nv_bfloat162 and its intrinsics.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t word = static_cast<std::uint32_t>(h.__x) << 16;
  float f;
  std::memcpy(&f, &word, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t word;
  std::memcpy(&word, &f, sizeof word);
  if ((word & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign and top bits, make it quiet
    return {static_cast<unsigned short>((word >> 16) | 0x40u)};
  }
  word += 0x7fffu + ((word >> 16) & 1u);
  return {static_cast<unsigned short>(word >> 16)};
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
  return h.__x;
}

inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  return {bits};
}
