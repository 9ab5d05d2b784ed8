// Scalar reference kernels (see reference.h).
#include "device/reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace zero::reference
