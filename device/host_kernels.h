// Kernels over host memory, run on the calling thread: the CPU device's kernels (what its
// streams run), and what the engine computes on state it keeps in host memory whatever the
// device (the gradient swap's and super_offload's norms and non-finite checks, the offloaded
// step's sum of squares). Written so the compiler vectorises them (simd reductions with several
// accumulators; bit-level half conversions from base/half.h). Results match
// device/reference.h: bit for bit for casts, scale and fill; within summation-order rounding for
// the sum of squares.
#pragma once

#include <cstddef>

#include "base/dtype.h"

namespace zero::host {

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count);
void scale(void* data, DType dtype, std::size_t count, float factor);
void fill(void* data, DType dtype, std::size_t count, float value);
void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                float factor);
// accumulate() onto zeros, dst not read: dst[i] = round(0.0f + float(src[i]) * factor).
void accumulate_onto_zero(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                          std::size_t count, float factor);
// The sum of squares is taken in blocks of kSquaresBlock elements from data[0], each block's in
// double (sum_squares_block), the blocks' sums added in order from 0.0: so a caller that takes
// the blocks of a span apart, at different times, and adds their sums in order gets the bits
// sum_squares gives over the whole span (super_offload takes them as step groups become final).
inline constexpr std::size_t kSquaresBlock = std::size_t{1} << 16;
double sum_squares(const void* data, DType dtype, std::size_t count);
// One block's sum (count at most kSquaresBlock; data at a block's start).
double sum_squares_block(const void* data, DType dtype, std::size_t count);
bool any_nonfinite(const void* data, DType dtype, std::size_t count);

// Block int8 quantization (base/block_quant.h), bit for bit as device/reference.h: `parts`
// chunks of `count` values, source chunk k at element k * count, packed chunk k at byte
// k * block_quant_bytes(count).
void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed);
void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype);
void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                    DType dtype);

}  // namespace zero::host
