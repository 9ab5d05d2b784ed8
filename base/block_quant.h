// Block int8 quantization: the format of ZeRO++'s quantized weights and gradients on the wire.
//
// `count` values become one packed chunk of block_quant_bytes(count) bytes: first one fp32
// scale per block of kQuantBlock consecutive values (the last block may be short), then the
// int8 values, padded with zeros to a multiple of 4 bytes so that chunks laid end to end keep
// their scales aligned. Symmetric, per block:
//   amax  = the largest |x| of the block (x read as fp32),
//   scale = amax / 127 in fp32 (0 for a block of zeros, or whose amax is below 127 times the
//           least subnormal; NaN when the block holds a NaN or an infinity),
//   q     = round-half-even(x / scale), clamped to [-127, 127] (0 where scale is 0 or NaN),
//   x'    = float(q) * scale, rounded to the destination's dtype.
// So a non-finite value makes its whole block NaN after the round trip, which the overflow
// check of mixed precision sees. The largest error of a value is scale / 2 = amax / 254.
#pragma once

#include <cstddef>

namespace zero {

inline constexpr std::size_t kQuantBlock = 256;

constexpr std::size_t block_quant_blocks(std::size_t count) noexcept {
  return (count + kQuantBlock - 1) / kQuantBlock;
}

// The bytes of one packed chunk of `count` values.
constexpr std::size_t block_quant_bytes(std::size_t count) noexcept {
  return 4 * block_quant_blocks(count) + (count + 3) / 4 * 4;
}

}  // namespace zero
