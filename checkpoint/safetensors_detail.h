// What the safetensors reader and writer share: the metadata key, the header size limit, the
// size of a shape's data, and an owned XXH3 streaming state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <vector>

#include <xxhash.h>

namespace zero::checkpoint::detail {

inline constexpr std::string_view kMetadataKey = "__metadata__";
// The largest header (JSON) the reference implementation reads; we neither read nor write more.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

// numel * element size of a shape, or none on a negative dimension or overflow.
inline std::optional<std::uint64_t> data_bytes(const std::vector<std::int64_t>& shape,
                                               std::size_t element_size) {
  std::uint64_t total = element_size;
  for (const std::int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(total, static_cast<std::uint64_t>(dim), &total)) {
      return std::nullopt;
    }
  }
  return total;
}

struct XxhDeleter {
  void operator()(XXH3_state_t* state) const noexcept { XXH3_freeState(state); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhDeleter>;

// A fresh XXH3-64 state, reset with the default seed.
inline XxhState new_xxh_state() {
  XxhState state(XXH3_createState());
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state.get());
  return state;
}

}  // namespace zero::checkpoint::detail
