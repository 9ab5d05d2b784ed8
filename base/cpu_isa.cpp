#include "base/cpu_isa.h"

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"

namespace zero {

std::string_view cpu_isa_name(CpuIsa isa) noexcept {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "unknown";
}

std::optional<CpuIsa> parse_cpu_isa(std::string_view name) noexcept {
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (name == cpu_isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool CpuFeatures::supports(CpuIsa isa) const noexcept {
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx2:
      return avx2 && fma && f16c;
    case CpuIsa::avx512:
      return avx2 && fma && f16c && avx512f && avx512bw && avx512vl;
  }
  return false;
}

std::string CpuFeatures::describe() const {
  std::vector<std::string_view> names;
  const std::pair<bool, std::string_view> all[] = {{avx2, "avx2"},
                                                   {fma, "fma"},
                                                   {f16c, "f16c"},
                                                   {avx512f, "avx512f"},
                                                   {avx512bw, "avx512bw"},
                                                   {avx512vl, "avx512vl"},
                                                   {avx512bf16, "avx512bf16"}};
  for (const auto& [present, name] : all) {
    if (present) names.push_back(name);
  }
  return names.empty() ? std::string("none of avx2, fma, f16c, avx512")
                       : fmt::format("{}", fmt::join(names, " "));
}

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    // The compiler's checks read cpuid and, for AVX and AVX-512, whether the OS saves the
    // registers (XCR0), so a feature listed here is usable.
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.f16c = __builtin_cpu_supports("f16c");
    f.avx512f = __builtin_cpu_supports("avx512f");
    f.avx512bw = __builtin_cpu_supports("avx512bw");
    f.avx512vl = __builtin_cpu_supports("avx512vl");
    f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    return f;
  }();
  return features;
}

CpuIsa best_cpu_isa() noexcept {
  const CpuFeatures& f = cpu_features();
  if (f.supports(CpuIsa::avx512)) return CpuIsa::avx512;
  if (f.supports(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::scalar;
}

void require_cpu_isa(CpuIsa isa, std::string_view origin) {
  if (!cpu_features().supports(isa)) {
    throw make_error(ErrorCategory::config,
                     "{}: this CPU cannot run the {} kernels (it has: {}); choose scalar{}", origin,
                     cpu_isa_name(isa), cpu_features().describe(),
                     cpu_features().supports(CpuIsa::avx2) ? " or avx2" : "");
  }
}

CpuIsa selected_cpu_isa() {
  const char* forced = std::getenv("ZERO_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return best_cpu_isa();
  const auto isa = parse_cpu_isa(forced);
  if (!isa) {
    throw make_error(ErrorCategory::config,
                     "ZERO_CPU_ISA=\"{}\": expected scalar, avx2 or avx512 (or unset for the best "
                     "this CPU supports: {})",
                     forced, cpu_isa_name(best_cpu_isa()));
  }
  require_cpu_isa(*isa, "ZERO_CPU_ISA");
  return *isa;
}

}  // namespace zero
