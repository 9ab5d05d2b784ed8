// Element types the engine moves and computes with, their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace zero {

// u8: raw bytes, for data with a layout of its own on the wire (block-quantized chunks,
// base/block_quant.h); never reduced, never a model's or optimizer's element type.
enum class DType : std::uint8_t { f32, f16, bf16, i64, u8 };

constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32:
      return "fp32";
    case DType::f16:
      return "fp16";
    case DType::bf16:
      return "bf16";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
  }
  return "?";
}

constexpr bool is_floating(DType dtype) noexcept {
  return dtype != DType::i64 && dtype != DType::u8;
}

// Accepts our names ("fp32", "fp16", "bf16", "int64") and the usual spellings
// ("float32", "float", "float16", "half", "bfloat16", "torch.float32", ...).
std::optional<DType> parse_dtype(std::string_view text) noexcept;

}  // namespace zero
