// Byte counts for people, in every layer's messages: "512 B", "1.50 KiB", "3.25 GiB", and
// sizes from people: "80GiB", "1.5TB".
#pragma once

#include <cstdint>
#include <string>

namespace zero {

std::string format_bytes(std::uint64_t bytes);

// "80GiB", "1.5TB", "512MiB", "4096": bytes. B, K/KB, M/MB, G/GB, T/TB are powers of 1000,
// KiB, MiB, GiB, TiB of 1024; fractions are allowed. Throws a usage Error naming `what` and
// the text. (zero-bench's sizes read nccl-tests' binary 64K/256M/1G instead.)
std::uint64_t parse_bytes(const std::string& text, const char* what);

}  // namespace zero
