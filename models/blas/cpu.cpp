// This CPU's traits from cpuid (cpu.h).
#include "models/blas/cpu.h"

#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace zero::blas {

std::string CpuTraits::describe() const {
  std::vector<const char*> sets;
  const std::pair<bool, const char*> all[] = {{avx, "avx"},           {avx2, "avx2"},
                                              {fma, "fma"},           {fma4, "fma4"},
                                              {avx512f, "avx512f"},   {avx512cd, "avx512cd"},
                                              {avx512bw, "avx512bw"}, {avx512dq, "avx512dq"},
                                              {avx512vl, "avx512vl"}, {avx512bf16, "avx512bf16"}};
  for (const auto& [present, set] : all) {
    if (present) sets.push_back(set);
  }
  return fmt::format("{} (family {}, model {}; {})", name.empty() ? "unnamed CPU" : name, family,
                     model, sets.empty() ? "no AVX" : fmt::format("{}", fmt::join(sets, " ")));
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
// The brand string (cpuid 0x80000002-4), trimmed; empty where the CPU has none.
std::string brand_string() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000004u) return {};
  char text[49] = {};
  for (unsigned leaf = 0; leaf < 3; ++leaf) {
    unsigned regs[4] = {};
    __get_cpuid(0x80000002u + leaf, &regs[0], &regs[1], &regs[2], &regs[3]);
    std::memcpy(text + 16 * leaf, regs, sizeof regs);
  }
  std::string name(text);
  const auto first = name.find_first_not_of(' ');
  const auto last = name.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : name.substr(first, last - first + 1);
}

CpuTraits read_traits() {
  CpuTraits t;
  __builtin_cpu_init();
  t.vendor = __builtin_cpu_is("intel") ? CpuVendor::intel
             : __builtin_cpu_is("amd") ? CpuVendor::amd
                                       : CpuVendor::other;
  t.name = brand_string();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0) {
    const int base_family = static_cast<int>((eax >> 8) & 0xF);
    const int base_model = static_cast<int>((eax >> 4) & 0xF);
    t.family =
        base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
    t.model = base_family == 0x6 || base_family == 0xF
                  ? base_model + (static_cast<int>((eax >> 16) & 0xF) << 4)
                  : base_model;
  }
  // The compiler's checks read cpuid and, for AVX and AVX-512, whether the OS saves the
  // registers (XCR0): a set listed here can run.
  t.avx = __builtin_cpu_supports("avx");
  t.avx2 = __builtin_cpu_supports("avx2");
  t.fma = __builtin_cpu_supports("fma");
  t.fma4 = __builtin_cpu_supports("fma4");
  t.avx512f = __builtin_cpu_supports("avx512f");
  t.avx512cd = __builtin_cpu_supports("avx512cd");
  t.avx512bw = __builtin_cpu_supports("avx512bw");
  t.avx512dq = __builtin_cpu_supports("avx512dq");
  t.avx512vl = __builtin_cpu_supports("avx512vl");
  t.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  return t;
}
#else
CpuTraits read_traits() {
  return {};
}
#endif

}  // namespace

const CpuTraits& cpu_traits() noexcept {
  static const CpuTraits traits = read_traits();
  return traits;
}

}  // namespace zero::blas
