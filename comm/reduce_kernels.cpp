// Plain loops the compiler vectorises; the conversions are base/half.h's round-to-nearest-even.
#include "comm/reduce_kernels.h"

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "base/half.h"

namespace zero::comm {

namespace {

template <typename T, typename Combine>
void combine(const void* in, void* inout, std::size_t count, Combine f) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (std::size_t i = 0; i < count; ++i) b[i] = f(a[i], b[i]);
}

// Max that propagates NaN from either side, like NCCL's and torch's max.
inline float max_nan(float a, float b) {
  return (a != a || a > b) ? a : b;
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void reduce_half(ReduceOp op, const void* in, void* inout, std::size_t count) {
  if (op == ReduceOp::max) {
    combine<std::uint16_t>(in, inout, count, [](std::uint16_t a, std::uint16_t b) {
      return FromFloat(max_nan(ToFloat(a), ToFloat(b)));
    });
  } else {
    combine<std::uint16_t>(in, inout, count, [](std::uint16_t a, std::uint16_t b) {
      return FromFloat(ToFloat(a) + ToFloat(b));
    });
  }
}

// One loop per dtype, so that the conversion is inlined and nothing is decided per element.
template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void divide_half(void* data, std::size_t count, int divisor) {
  auto* x = static_cast<std::uint16_t*>(data);
  const auto d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i) x[i] = FromFloat(ToFloat(x[i]) / d);
}

}  // namespace

void reduce_into(DType dtype, ReduceOp op, const void* in, void* inout, std::size_t count) {
  ZERO_CHECK(op != ReduceOp::avg, "avg is a sum followed by divide_by");
  const bool max = op == ReduceOp::max;
  switch (dtype) {
    case DType::f32:
      if (max) {
        combine<float>(in, inout, count, max_nan);
      } else {
        combine<float>(in, inout, count, [](float a, float b) { return a + b; });
      }
      return;
    case DType::i64:
      combine<std::int64_t>(in, inout, count, [max](std::int64_t a, std::int64_t b) {
        return max ? std::max(a, b)
                   : static_cast<std::int64_t>(static_cast<std::uint64_t>(a) +
                                               static_cast<std::uint64_t>(b));
      });
      return;
    case DType::f16:
      reduce_half<fp16_to_float, float_to_fp16>(op, in, inout, count);
      return;
    case DType::bf16:
      reduce_half<bf16_to_float, float_to_bf16>(op, in, inout, count);
      return;
    case DType::u8:
      break;
  }
  ZERO_CHECK(false, "{} is never reduced", dtype_name(dtype));
}

void divide_by(DType dtype, void* data, std::size_t count, int divisor) {
  ZERO_CHECK(divisor > 0, "divisor {}", divisor);
  if (divisor == 1) return;
  switch (dtype) {
    case DType::f32: {
      auto* x = static_cast<float*>(data);
      const auto d = static_cast<float>(divisor);
      for (std::size_t i = 0; i < count; ++i) x[i] /= d;
      return;
    }
    case DType::i64: {
      auto* x = static_cast<std::int64_t*>(data);
      for (std::size_t i = 0; i < count; ++i) x[i] /= divisor;
      return;
    }
    case DType::f16:
      divide_half<fp16_to_float, float_to_fp16>(data, count, divisor);
      return;
    case DType::bf16:
      divide_half<bf16_to_float, float_to_bf16>(data, count, divisor);
      return;
    case DType::u8:
      break;
  }
  ZERO_CHECK(false, "{} is never reduced", dtype_name(dtype));
}

}  // namespace zero::comm
