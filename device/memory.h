// Where a byte of model state lives (its tier) and what it is (its kind). Every allocation
// the engine makes is tagged with both, so that per-rank memory can be accounted exactly.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace zero {

enum class Tier : std::uint8_t { device, pinned, host, nvme };
enum class MemoryKind : std::uint8_t { param, grad, master, moment, buffer };

inline constexpr std::array<Tier, 4> kAllTiers{Tier::device, Tier::pinned, Tier::host, Tier::nvme};
inline constexpr std::array<MemoryKind, 5> kAllMemoryKinds{MemoryKind::param, MemoryKind::grad,
                                                           MemoryKind::master, MemoryKind::moment,
                                                           MemoryKind::buffer};

constexpr std::string_view tier_name(Tier tier) noexcept {
  switch (tier) {
    case Tier::device:
      return "device";
    case Tier::pinned:
      return "pinned";
    case Tier::host:
      return "host";
    case Tier::nvme:
      return "nvme";
  }
  return "?";
}

constexpr std::string_view memory_kind_name(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::param:
      return "param";
    case MemoryKind::grad:
      return "grad";
    case MemoryKind::master:
      return "master";
    case MemoryKind::moment:
      return "moment";
    case MemoryKind::buffer:
      return "buffer";
  }
  return "?";
}

}  // namespace zero
