// The x86 instruction sets our per-ISA CPU kernels are built for, what this CPU (and its OS)
// supports, and the one chosen for the process: the best supported, or the one ZERO_CPU_ISA
// forces (scalar, avx2 or avx512). Forcing one the CPU lacks is an error that says what the
// CPU has. Kernels built per ISA sit in their own translation units and are called through
// tables picked once with this choice; nothing else in the code branches on the ISA.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace zero {

enum class CpuIsa {
  scalar,  // baseline x86-64 (or any other CPU): portable C++
  avx2,    // AVX2 + FMA + F16C
  avx512,  // AVX-512 F + BW + VL (+ BF16 where present), with F16C
};

std::string_view cpu_isa_name(CpuIsa isa) noexcept;
std::optional<CpuIsa> parse_cpu_isa(std::string_view name) noexcept;

// What the CPU and the OS support, from cpuid (and XCR0, through the compiler's checks).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512bf16 = false;
  bool supports(CpuIsa isa) const noexcept;
  std::string describe() const;  // "avx2 fma f16c avx512f avx512bw avx512vl avx512bf16"
};
const CpuFeatures& cpu_features() noexcept;

// The best ISA this CPU supports.
CpuIsa best_cpu_isa() noexcept;

// ZERO_CPU_ISA when set (an Error when it names an unknown ISA or one this CPU lacks), else
// best_cpu_isa(). Read once per call; callers choose once and keep the answer.
CpuIsa selected_cpu_isa();

// Throws a config Error naming `isa`, `origin` (e.g. "ZERO_CPU_ISA") and the CPU's features
// unless the CPU supports `isa`.
void require_cpu_isa(CpuIsa isa, std::string_view origin);

}  // namespace zero
