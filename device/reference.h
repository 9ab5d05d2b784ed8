// Plain scalar references of the device kernels: one element at a time, sums in double. The
// test oracle for every backend's kernels; never used on a hot path.
#pragma once

#include <cstddef>

#include "base/dtype.h"

namespace zero::reference {

// Reads element i of a floating buffer as float (f32, f16 or bf16).
float load(const void* data, DType dtype, std::size_t i);
// Writes value, rounded to nearest even, as element i.
void store(void* data, DType dtype, std::size_t i, float value);

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count);
void scale(void* data, DType dtype, std::size_t count, float factor);
void fill(void* data, DType dtype, std::size_t count, float value);
void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                float factor);
double sum_squares(const void* data, DType dtype, std::size_t count);
bool all_finite(const void* data, DType dtype, std::size_t count);

// Block int8 quantization (base/block_quant.h), `parts` chunks of `count` values each: source
// chunk k at element k * count, packed chunk k at byte k * block_quant_bytes(count).
void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed);
// Destination chunk k (at element k * count) = packed chunk k, dequantized.
void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype);
// dst[i] = round(fp32 sum, in order k = 0, 1, ..., of packed chunk k's value i dequantized):
// one multiplication then one addition per chunk, never fused.
void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                    DType dtype);

}  // namespace zero::reference
