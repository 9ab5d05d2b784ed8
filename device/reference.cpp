// Scalar reference kernels (see reference.h).
#include "device/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/block_quant.h"
#include "base/error.h"
#include "base/half.h"

namespace zero::reference {

float load(const void* data, DType dtype, std::size_t i) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(data)[i];
    case DType::f16:
      return fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::bf16:
      return bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::i64:
    case DType::u8:
      break;
  }
  throw make_error(ErrorCategory::usage, "reference kernels take fp32, fp16 or bf16, not {}",
                   dtype_name(dtype));
}

void store(void* data, DType dtype, std::size_t i, float value) {
  switch (dtype) {
    case DType::f32:
      static_cast<float*>(data)[i] = value;
      return;
    case DType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_fp16(value);
      return;
    case DType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16(value);
      return;
    case DType::i64:
    case DType::u8:
      break;
  }
  throw make_error(ErrorCategory::usage, "reference kernels take fp32, fp16 or bf16, not {}",
                   dtype_name(dtype));
}

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i));
}

void scale(void* data, DType dtype, std::size_t count, float factor) {
  for (std::size_t i = 0; i < count; ++i) store(data, dtype, i, load(data, dtype, i) * factor);
}

void accumulate(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::size_t count,
                float factor) {
  for (std::size_t i = 0; i < count; ++i) {
    store(dst, dst_dtype, i, load(dst, dst_dtype, i) + load(src, src_dtype, i) * factor);
  }
}

void fill(void* data, DType dtype, std::size_t count, float value) {
  for (std::size_t i = 0; i < count; ++i) store(data, dtype, i, value);
}

double sum_squares(const void* data, DType dtype, std::size_t count) {
  double sum = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    const double x = load(data, dtype, i);
    sum += x * x;
  }
  return sum;
}

bool all_finite(const void* data, DType dtype, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(load(data, dtype, i))) return false;
  }
  return true;
}

namespace {

// The scale of packed chunk `chunk`'s block b, and its value i.
float quant_scale(const unsigned char* chunk, std::size_t b) {
  float scale;
  std::memcpy(&scale, chunk + 4 * b, 4);
  return scale;
}

float dequantized(const unsigned char* chunk, std::size_t count, std::size_t i) {
  const auto q = static_cast<std::int8_t>(chunk[4 * block_quant_blocks(count) + i]);
  return static_cast<float>(q) * quant_scale(chunk, i / kQuantBlock);
}

}  // namespace

void quantize(const void* src, DType dtype, std::size_t count, std::size_t parts, void* packed) {
  const std::size_t chunk_bytes = block_quant_bytes(count);
  for (std::size_t k = 0; k < parts; ++k) {
    auto* chunk = static_cast<unsigned char*>(packed) + k * chunk_bytes;
    std::memset(chunk, 0, chunk_bytes);
    unsigned char* values = chunk + 4 * block_quant_blocks(count);
    for (std::size_t begin = 0; begin < count; begin += kQuantBlock) {
      const std::size_t end = std::min(count, begin + kQuantBlock);
      float amax = 0.0f;
      bool finite = true;
      for (std::size_t i = begin; i < end; ++i) {
        const float x = load(src, dtype, k * count + i);
        finite = finite && std::isfinite(x);
        amax = std::max(amax, std::fabs(x));
      }
      float scale = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
      std::memcpy(chunk + 4 * (begin / kQuantBlock), &scale, 4);
      if (!finite || scale == 0.0f) continue;
      for (std::size_t i = begin; i < end; ++i) {
        const float q = std::nearbyint(load(src, dtype, k * count + i) / scale);
        values[i] =
            static_cast<unsigned char>(static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f)));
      }
    }
  }
}

void dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst, DType dtype) {
  for (std::size_t k = 0; k < parts; ++k) {
    const auto* chunk = static_cast<const unsigned char*>(packed) + k * block_quant_bytes(count);
    for (std::size_t i = 0; i < count; ++i)
      store(dst, dtype, k * count + i, dequantized(chunk, count, i));
  }
}

void dequantize_sum(const void* packed, std::size_t count, std::size_t parts, void* dst,
                    DType dtype) {
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (std::size_t k = 0; k < parts; ++k) {
      const auto* chunk = static_cast<const unsigned char*>(packed) + k * block_quant_bytes(count);
      sum += dequantized(chunk, count, i);
    }
    store(dst, dtype, i, sum);
  }
}

}  // namespace zero::reference
