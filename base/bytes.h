// Byte counts for people, in every layer's messages: "512 B", "1.50 KiB", "3.25 GiB".
#pragma once

#include <cstdint>
#include <string>

namespace zero {

std::string format_bytes(std::uint64_t bytes);

}  // namespace zero
