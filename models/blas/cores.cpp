// OpenBLAS's kernel sets and zero's choice among them (cores.h).
#include "models/blas/cores.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

namespace zero::blas {
namespace {

// What a core's kernels execute, as CpuTraits flags.
struct Needs {
  bool avx = false, avx2 = false, fma = false, fma4 = false, avx512 = false, avx512bf16 = false;
};

struct Core {
  std::string_view name;  // as OpenBLAS spells it (openblas_get_corename)
  KernelSet set;
  Needs needs;
};

// OpenBLAS's x86-64 cores (DYNAMIC_ARCH, 0.3.21 and later). The SSE ones need at most SSE4.2,
// which every x86-64 CPU of the last decade has; AMD's Bulldozer family needs FMA4, which no
// Intel CPU has.
constexpr Core kCores[] = {
    {"Prescott", KernelSet::sse, {}},
    {"Core2", KernelSet::sse, {}},
    {"Penryn", KernelSet::sse, {}},
    {"Dunnington", KernelSet::sse, {}},
    {"Nehalem", KernelSet::sse, {}},
    {"Atom", KernelSet::sse, {}},
    {"Nano", KernelSet::sse, {}},
    {"Opteron", KernelSet::sse, {}},
    {"Opteron_SSE3", KernelSet::sse, {}},
    {"Barcelona", KernelSet::sse, {}},
    {"Bobcat", KernelSet::sse, {}},
    {"Sandybridge", KernelSet::avx, {.avx = true}},
    {"Bulldozer", KernelSet::avx, {.avx = true, .fma4 = true}},
    {"Piledriver", KernelSet::avx, {.avx = true, .fma = true, .fma4 = true}},
    {"Steamroller", KernelSet::avx, {.avx = true, .fma = true, .fma4 = true}},
    {"Excavator", KernelSet::avx2, {.avx = true, .avx2 = true, .fma = true, .fma4 = true}},
    {"Haswell", KernelSet::avx2, {.avx = true, .avx2 = true, .fma = true}},
    {"Zen", KernelSet::avx2, {.avx = true, .avx2 = true, .fma = true}},
    {"SkylakeX", KernelSet::avx512, {.avx = true, .avx2 = true, .fma = true, .avx512 = true}},
    {"Cooperlake",
     KernelSet::avx512,
     {.avx = true, .avx2 = true, .fma = true, .avx512 = true, .avx512bf16 = true}},
    {"SapphireRapids",
     KernelSet::avx512,
     {.avx = true, .avx2 = true, .fma = true, .avx512 = true, .avx512bf16 = true}},
};

const Core* find_core(std::string_view name) {
  for (const Core& core : kCores) {
    if (same_core(core.name, name)) return &core;
  }
  return nullptr;
}

// The AVX-512 subsets OpenBLAS's SkylakeX kernels execute.
bool has_avx512(const CpuTraits& cpu) {
  return cpu.avx512f && cpu.avx512cd && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl;
}

}  // namespace

bool same_core(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view kernel_set_name(KernelSet set) {
  switch (set) {
    case KernelSet::sse:
      return "SSE";
    case KernelSet::avx:
      return "AVX";
    case KernelSet::avx2:
      return "AVX2";
    case KernelSet::avx512:
      return "AVX-512";
    case KernelSet::unknown:
      break;
  }
  return "unknown";
}

KernelSet core_kernel_set(std::string_view core) {
  const Core* found = find_core(core);
  return found != nullptr ? found->set : KernelSet::unknown;
}

KernelSet best_kernel_set(const CpuTraits& cpu) {
  if (cpu.family == 0) return KernelSet::unknown;  // not an x86 CPU
  if (has_avx512(cpu) && cpu.avx2 && cpu.fma) return KernelSet::avx512;
  if (cpu.avx2 && cpu.fma) return KernelSet::avx2;
  if (cpu.avx) return KernelSet::avx;
  return KernelSet::sse;
}

std::optional<std::string> preferred_core(const CpuTraits& cpu) {
  switch (best_kernel_set(cpu)) {
    case KernelSet::avx512:
      return std::string(cpu.avx512bf16 ? "Cooperlake" : "SkylakeX");
    case KernelSet::avx2:
      return std::string(cpu.vendor == CpuVendor::amd ? "Zen" : "Haswell");
    default:
      return std::nullopt;
  }
}

std::optional<std::string> core_problem(std::string_view core, const CpuTraits& cpu) {
  const Core* found = find_core(core);
  if (found == nullptr || cpu.family == 0) return std::nullopt;
  const Needs& n = found->needs;
  std::vector<std::string_view> missing;
  if (n.avx && !cpu.avx) missing.push_back("AVX");
  if (n.avx2 && !cpu.avx2) missing.push_back("AVX2");
  if (n.fma && !cpu.fma) missing.push_back("FMA");
  if (n.fma4 && !cpu.fma4) missing.push_back("FMA4");
  if (n.avx512 && !has_avx512(cpu)) missing.push_back("AVX-512 (F, CD, BW, DQ and VL)");
  if (n.avx512bf16 && !cpu.avx512bf16) missing.push_back("AVX-512 BF16");
  if (missing.empty()) return std::nullopt;
  return fmt::format("OpenBLAS's {} kernels use {}, which this CPU ({}) cannot run", found->name,
                     fmt::join(missing, ", "), cpu.describe());
}

bool is_fallback(KernelSet core, KernelSet cpu_best) {
  return core != KernelSet::unknown && cpu_best != KernelSet::unknown && core < cpu_best;
}

}  // namespace zero::blas
