// What this CPU offers a BLAS: its vendor, its name, and the vector instruction sets it can
// run, counting only those the OS saves the registers of (XCR0), so that a set named here
// never stops the program with an illegal instruction. Read once from cpuid; a plain value
// (CpuTraits) that the core choice (cores.h) is tested with on any machine.
#pragma once

#include <string>

namespace zero::blas {

enum class CpuVendor { intel, amd, other };

struct CpuTraits {
  CpuVendor vendor = CpuVendor::other;
  std::string name;  // cpuid's brand string, e.g. "AMD EPYC 7B13", "Intel(R) Xeon(R) Processor"
  int family = 0, model = 0;  // cpuid's display family and model (0 off x86)
  bool avx = false, avx2 = false, fma = false, fma4 = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512bf16 = false;
  // "AMD EPYC 7B13 (family 25, model 1; avx avx2 fma)".
  std::string describe() const;
};

// This CPU's traits (cached after the first call).
const CpuTraits& cpu_traits() noexcept;

}  // namespace zero::blas
