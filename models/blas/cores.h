// OpenBLAS's kernel sets on x86-64, and which one zero asks for. OpenBLAS built with
// DYNAMIC_ARCH (Debian's) picks its kernels ("core") when it loads, from the CPU's family and
// model, or from OPENBLAS_CORETYPE. A CPU newer than the library (an Intel Xeon of the Sapphire
// Rapids class under OpenBLAS 0.3.21) is not recognised and gets the Prescott (SSE3) kernels,
// several times slower, while naming a core whose instructions the CPU lacks (SkylakeX on an
// AVX2 CPU, Bulldozer's FMA4 on an Intel one) stops the program with an illegal instruction.
// So zero chooses from what the CPU can run, not from its model number, and checks a user's
// choice before OpenBLAS takes it. Pure functions of CpuTraits, tested with any CPU's traits.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "models/blas/cpu.h"

namespace zero::blas {

// A core's instruction set, in order of speed; unknown for names not classified here (other
// architectures' cores, or names OpenBLAS does not know).
enum class KernelSet { unknown, sse, avx, avx2, avx512 };
std::string_view kernel_set_name(KernelSet set);  // "SSE", "AVX", "AVX2", "AVX-512", "unknown"

// The kernel set of OpenBLAS core `core` (case-insensitive, as OpenBLAS reads the variable).
KernelSet core_kernel_set(std::string_view core);

// Whether two core names are the same core (OpenBLAS compares them without case).
bool same_core(std::string_view a, std::string_view b);

// The best kernel set this CPU can run: unknown off x86.
KernelSet best_kernel_set(const CpuTraits& cpu);

// The core zero asks OpenBLAS for where the user names none: Cooperlake (AVX-512 with BF16)
// or SkylakeX (AVX-512 F, CD, BW, DQ, VL) on any vendor's AVX-512 CPU, Zen (an AMD CPU with
// AVX2 and FMA) or Haswell (another with them); none, OpenBLAS's own choice, elsewhere.
std::optional<std::string> preferred_core(const CpuTraits& cpu);

// Why this CPU cannot run core `core`'s kernels (the instructions it lacks), or nullopt when it
// can or when zero does not know what the core needs.
std::optional<std::string> core_problem(std::string_view core, const CpuTraits& cpu);

// A loaded core is a fallback when its kernel set is below the best this CPU can run.
bool is_fallback(KernelSet core, KernelSet cpu_best);

}  // namespace zero::blas
