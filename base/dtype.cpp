// Parsing of dtype names as configs and tools write them.
#include "base/dtype.h"

#include <array>
#include <utility>

namespace zero {

std::optional<DType> parse_dtype(std::string_view text) noexcept {
  if (text.starts_with("torch.")) text.remove_prefix(6);
  static constexpr std::array<std::pair<std::string_view, DType>, 12> names{{
      {"fp32", DType::f32},
      {"float32", DType::f32},
      {"float", DType::f32},
      {"fp16", DType::f16},
      {"float16", DType::f16},
      {"half", DType::f16},
      {"bf16", DType::bf16},
      {"bfloat16", DType::bf16},
      {"int64", DType::i64},
      {"i64", DType::i64},
      {"long", DType::i64},
      {"f32", DType::f32},
  }};
  for (const auto& [name, dtype] : names) {
    if (name == text) return dtype;
  }
  return std::nullopt;
}

}  // namespace zero
