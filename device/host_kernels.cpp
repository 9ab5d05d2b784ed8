// Kernels over host memory (see host_kernels.h). Compiled with -fopenmp-simd so the `omp simd`
// reductions vectorise without OpenMP threads.
#include "device/host_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/block_quant.h"
#include "base/error.h"
#include "base/half.h"

namespace zero::host {
namespace {

using u16 = std::uint16_t;
using u32 = std::uint32_t;

[[noreturn]] void not_floating(DType dtype) {
  throw make_error(ErrorCategory::usage, "device kernels take fp32, fp16 or bf16, not {}",
                   dtype_name(dtype));
}

// Applies `op(float) -> float` in place over a buffer of any floating dtype.
template <typename Op>
void map_in_place(void* data, DType dtype, std::size_t count, Op op) {
  switch (dtype) {
    case DType::f32: {
      float* x = static_cast<float*>(data);
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) x[i] = op(x[i]);
      return;
    }
    case DType::bf16: {
      u16* x = static_cast<u16*>(data);
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) x[i] = float_to_bf16(op(bf16_to_float(x[i])));
      return;
    }
    case DType::f16: {
      u16* x = static_cast<u16*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] = float_to_fp16(op(fp16_to_float(x[i])));
      return;
    }
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

template <typename Load>
double sum_squares_with(std::size_t count, Load load) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (std::size_t i = 0; i < count; ++i) {
    const double x = load(i);
    sum += x * x;
  }
  return sum;
}

// Element i of a floating buffer as fp32, and a value stored rounded to nearest even.
float load_at(const void* data, DType dtype, std::size_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(data)[i];
    case DType::bf16:
      return bf16_to_float(static_cast<const u16*>(data)[i]);
    case DType::f16:
      return fp16_to_float(static_cast<const u16*>(data)[i]);
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

// `n` values from `x` into data[at, at + n).
void store_run(void* data, DType dtype, std::size_t at, const float* x, std::size_t n) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(static_cast<float*>(data) + at, x, n * sizeof(float));
      return;
    case DType::bf16: {
      u16* out = static_cast<u16*>(data) + at;
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
      return;
    }
    case DType::f16: {
      u16* out = static_cast<u16*>(data) + at;
      for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(x[i]);
      return;
    }
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

// Values [begin, begin + n) of the source as fp32 into x.
void load_run(const void* data, DType dtype, std::size_t begin, float* x, std::size_t n) {
  switch (dtype) {
    case DType::f32:
      std::memcpy(x, static_cast<const float*>(data) + begin, n * sizeof(float));
      return;
    case DType::bf16: {
      const u16* in = static_cast<const u16*>(data) + begin;
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) x[i] = bf16_to_float(in[i]);
      return;
    }
    case DType::f16:
    case DType::i64:
    case DType::u8:
      for (std::size_t i = 0; i < n; ++i) x[i] = load_at(data, dtype, begin + i);
      return;
  }
}

// Round half to even for |v| < 2^22 without a library call: adding 1.5 * 2^23 leaves no
// fraction bits, so the addition rounds as the current (nearest-even) mode does.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;
  return (v + kMagic) - kMagic;
}

// The dequantized values [begin, begin + n) of a packed chunk of `count`, into x; with `add`
// added to what x holds (x[i] + q * scale, unfused).
void dequantize_run(const unsigned char* chunk, std::size_t count, std::size_t begin, std::size_t n,
                    float* x, bool add) {
  float scale;
  std::memcpy(&scale, chunk + 4 * (begin / kQuantBlock), 4);
  const auto* q =
      reinterpret_cast<const std::int8_t*>(chunk + 4 * block_quant_blocks(count)) + begin;
  if (add) {
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) x[i] = x[i] + static_cast<float>(q[i]) * scale;
  } else {
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(q[i]) * scale;
  }
}

}  // namespace

void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed) {
  if (!is_floating(dtype)) not_floating(dtype);
  const std::size_t blocks = block_quant_blocks(count);
  const std::size_t chunk_bytes = block_quant_bytes(count);
  float x[kQuantBlock];
  for (std::size_t k = 0; k < parts; ++k) {
    auto* chunk = static_cast<unsigned char*>(packed) + k * chunk_bytes;
    auto* values = reinterpret_cast<std::int8_t*>(chunk + 4 * blocks);
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t begin = b * kQuantBlock;
      const std::size_t n = std::min(kQuantBlock, count - begin);
      load_run(src, dtype, k * count + begin, x, n);
      float amax = 0.0f;
      unsigned bad = 0;
#pragma omp simd reduction(max : amax) reduction(| : bad)
      for (std::size_t i = 0; i < n; ++i) {
        u32 word;
        std::memcpy(&word, &x[i], 4);
        bad |= (word & 0x7f800000u) == 0x7f800000u;
        amax = std::max(amax, std::fabs(x[i]));
      }
      const float scale = bad != 0 ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
      std::memcpy(chunk + 4 * b, &scale, 4);
      if (bad != 0 || scale == 0.0f) {
        std::memset(values + begin, 0, n);
        continue;
      }
#pragma omp simd
      for (std::size_t i = 0; i < n; ++i) {
        const float q = std::clamp(round_even(x[i] / scale), -127.0f, 127.0f);
        values[begin + i] = static_cast<std::int8_t>(q);
      }
    }
    std::memset(values + count, 0, chunk_bytes - 4 * blocks - count);
  }
}

void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype) {
  if (!is_floating(dtype)) not_floating(dtype);
  float x[kQuantBlock];
  for (std::size_t k = 0; k < parts; ++k) {
    const auto* chunk = static_cast<const unsigned char*>(packed) + k * block_quant_bytes(count);
    for (std::size_t begin = 0; begin < count; begin += kQuantBlock) {
      const std::size_t n = std::min(kQuantBlock, count - begin);
      dequantize_run(chunk, count, begin, n, x, /*add=*/false);
      store_run(dst, dtype, k * count + begin, x, n);
    }
  }
}

void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                    DType dtype) {
  if (!is_floating(dtype)) not_floating(dtype);
  const std::size_t chunk_bytes = block_quant_bytes(count);
  float x[kQuantBlock];
  for (std::size_t begin = 0; begin < count; begin += kQuantBlock) {
    const std::size_t n = std::min(kQuantBlock, count - begin);
    std::fill(x, x + n, 0.0f);
    for (std::size_t k = 0; k < parts; ++k) {
      dequantize_run(static_cast<const unsigned char*>(packed) + k * chunk_bytes, count, begin, n,
                     x, /*add=*/true);
    }
    store_run(dst, dtype, begin, x, n);
  }
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count) {
  if (!is_floating(src_dtype)) not_floating(src_dtype);
  if (!is_floating(dst_dtype)) not_floating(dst_dtype);
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memmove(dst, src, count * dtype_size(src_dtype));
    return;
  }
  if (src_dtype == DType::f32) {
    const float* in = static_cast<const float*>(src);
    u16* out = static_cast<u16*>(dst);
    if (dst_dtype == DType::bf16) {
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) out[i] = float_to_bf16(in[i]);
    } else {
      for (std::size_t i = 0; i < count; ++i) out[i] = float_to_fp16(in[i]);
    }
    return;
  }
  const u16* in = static_cast<const u16*>(src);
  if (dst_dtype == DType::f32) {
    float* out = static_cast<float*>(dst);
    if (src_dtype == DType::bf16) {
#pragma omp simd
      for (std::size_t i = 0; i < count; ++i) out[i] = bf16_to_float(in[i]);
    } else {
      for (std::size_t i = 0; i < count; ++i) out[i] = fp16_to_float(in[i]);
    }
    return;
  }
  // Between the two half formats, through fp32 (exact on the way in, one rounding out).
  u16* out = static_cast<u16*>(dst);
  if (src_dtype == DType::bf16) {
    for (std::size_t i = 0; i < count; ++i) out[i] = float_to_fp16(bf16_to_float(in[i]));
  } else {
    for (std::size_t i = 0; i < count; ++i) out[i] = float_to_bf16(fp16_to_float(in[i]));
  }
}

void scale(void* data, DType dtype, std::size_t count, float factor) {
  map_in_place(data, dtype, count, [factor](float x) { return x * factor; });
}

namespace {

template <DType D>
float load_as(const void* data, std::size_t i) {
  if constexpr (D == DType::f32) return static_cast<const float*>(data)[i];
  if constexpr (D == DType::bf16) return bf16_to_float(static_cast<const u16*>(data)[i]);
  if constexpr (D == DType::f16) return fp16_to_float(static_cast<const u16*>(data)[i]);
}

template <DType D>
void store_as(void* data, std::size_t i, float value) {
  if constexpr (D == DType::f32) static_cast<float*>(data)[i] = value;
  if constexpr (D == DType::bf16) static_cast<u16*>(data)[i] = float_to_bf16(value);
  if constexpr (D == DType::f16) static_cast<u16*>(data)[i] = float_to_fp16(value);
}

// OntoZero: dst is taken as zeros and not read (the sum still adds 0.0f, so -0 becomes +0).
template <DType S, DType D, bool OntoZero>
void accumulate_as(const void* src, void* dst, std::size_t count, float factor) {
#pragma omp simd
  for (std::size_t i = 0; i < count; ++i) {
    const float before = OntoZero ? 0.0f : load_as<D>(dst, i);
    store_as<D>(dst, i, before + load_as<S>(src, i) * factor);
  }
}

template <DType S, bool OntoZero>
void accumulate_from(const void* src, void* dst, DType dst_dtype, std::size_t count, float factor) {
  switch (dst_dtype) {
    case DType::f32:
      return accumulate_as<S, DType::f32, OntoZero>(src, dst, count, factor);
    case DType::bf16:
      return accumulate_as<S, DType::bf16, OntoZero>(src, dst, count, factor);
    case DType::f16:
      return accumulate_as<S, DType::f16, OntoZero>(src, dst, count, factor);
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dst_dtype);
}

// Built without -mfma and with -ffp-contract=off (CMake), so the product is rounded before
// the sum, as in the reference.
template <bool OntoZero>
void accumulate_any(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                    float factor) {
  switch (src_dtype) {
    case DType::f32:
      return accumulate_from<DType::f32, OntoZero>(src, dst, dst_dtype, count, factor);
    case DType::bf16:
      return accumulate_from<DType::bf16, OntoZero>(src, dst, dst_dtype, count, factor);
    case DType::f16:
      return accumulate_from<DType::f16, OntoZero>(src, dst, dst_dtype, count, factor);
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(src_dtype);
}

}  // namespace

void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                float factor) {
  accumulate_any<false>(src, src_dtype, dst, dst_dtype, count, factor);
}

void accumulate_onto_zero(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                          std::size_t count, float factor) {
  accumulate_any<true>(src, src_dtype, dst, dst_dtype, count, factor);
}

void fill(void* data, DType dtype, std::size_t count, float value) {
  switch (dtype) {
    case DType::f32: {
      float* x = static_cast<float*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] = value;
      return;
    }
    case DType::bf16:
    case DType::f16: {
      const u16 bits = dtype == DType::bf16 ? float_to_bf16(value) : float_to_fp16(value);
      u16* x = static_cast<u16*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] = bits;
      return;
    }
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

double sum_squares(const void* data, DType dtype, std::size_t count) {
  if (!is_floating(dtype)) not_floating(dtype);
  const std::size_t size = dtype_size(dtype);
  double sum = 0.0;
  for (std::size_t at = 0; at < count; at += kSquaresBlock) {
    sum += sum_squares_block(static_cast<const char*>(data) + at * size, dtype,
                             std::min(kSquaresBlock, count - at));
  }
  return sum;
}

double sum_squares_block(const void* data, DType dtype, std::size_t count) {
  switch (dtype) {
    case DType::f32: {
      const float* x = static_cast<const float*>(data);
      return sum_squares_with(count, [x](std::size_t i) { return x[i]; });
    }
    case DType::bf16: {
      const u16* x = static_cast<const u16*>(data);
      return sum_squares_with(count, [x](std::size_t i) { return bf16_to_float(x[i]); });
    }
    case DType::f16: {
      const u16* x = static_cast<const u16*>(data);
      return sum_squares_with(count, [x](std::size_t i) { return fp16_to_float(x[i]); });
    }
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

bool any_nonfinite(const void* data, DType dtype, std::size_t count) {
  // A float is NaN or infinite exactly when its exponent bits are all ones.
  unsigned found = 0;
  switch (dtype) {
    case DType::f32: {
      const unsigned char* bytes = static_cast<const unsigned char*>(data);
#pragma omp simd reduction(| : found)
      for (std::size_t i = 0; i < count; ++i) {
        u32 word;
        std::memcpy(&word, bytes + 4 * i, 4);
        found |= (word & 0x7f800000u) == 0x7f800000u;
      }
      return found != 0;
    }
    case DType::bf16:
    case DType::f16: {
      const u16 mask = dtype == DType::bf16 ? 0x7f80u : 0x7c00u;
      const u16* x = static_cast<const u16*>(data);
#pragma omp simd reduction(| : found)
      for (std::size_t i = 0; i < count; ++i) found |= (x[i] & mask) == mask;
      return found != 0;
    }
    case DType::i64:
    case DType::u8:
      break;
  }
  not_floating(dtype);
}

}  // namespace zero::host
