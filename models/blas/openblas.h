// The BLAS the CPU layers multiply with: OpenBLAS, loaded at run time (dlopen) so that its
// kernel set is chosen before it initialises. OpenBLAS picks its kernels once, in its load-time
// constructor, from the CPU's model number or from OPENBLAS_CORETYPE; a library linked into the
// program would have chosen before main() runs. Here:
//   - OPENBLAS_CORETYPE set by the user is kept, unless this CPU cannot run that core's
//     instructions (an error that says which, instead of an illegal instruction later);
//   - otherwise zero names the core of the best kernel set this CPU can run (cores.h), so that
//     a CPU newer than the library gets its AVX-512 or AVX2 kernels, not the SSE3 fallback;
//   - where the program loaded OpenBLAS itself before, that library and its choice are used.
// On load, a few products of odd shapes are checked against a plain loop in double precision:
// a core that computes wrong results on this CPU is an error naming it, never a silent one.
//
// The first call of any function here loads the library (thread-safe). Call load() early, before
// the program starts threads of its own: the choice is passed to OpenBLAS through the process's
// environment, set for the load and restored after it.
#pragma once

#include <optional>
#include <string>

#include "models/blas/cores.h"

namespace zero::blas {

// What runs the products, for the tools' start-up lines and the benchmarks' records.
struct Info {
  std::string
      library;  // the file loaded, e.g. /usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0
  std::string config;     // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  std::string core;       // openblas_get_corename(): "Zen", "SkylakeX", "Prescott"
  std::string threading;  // "OpenMP", "pthreads" or "sequential"
  std::string chosen_by;  // who chose the core: "zero, from cpuid", "OPENBLAS_CORETYPE", ...
  KernelSet core_set = KernelSet::unknown;  // what the core runs
  KernelSet cpu_set = KernelSet::unknown;   // the best this CPU can run
  std::string cpu;                          // CpuTraits::describe()
  // "OpenBLAS 0.3.21 (OpenMP), core Zen: AVX2 kernels, chosen by zero, from cpuid".
  std::string line() const;
  // A warning when the core is a fallback (its set below the CPU's best), with what to do.
  std::optional<std::string> warning() const;
};

// Loads the library if it is not loaded yet and says what runs. Throws std::runtime_error when
// it cannot be loaded, when the user's OPENBLAS_CORETYPE names a core this CPU cannot run, or
// when the loaded kernels compute a wrong product.
const Info& load();

enum class Order { row_major = 101, column_major = 102 };  // CBLAS's values
enum class Trans { no = 111, yes = 112 };

// C = alpha op(A) op(B) + beta C, as cblas_sgemm and cblas_dgemm compute it.
void sgemm(Order order, Trans trans_a, Trans trans_b, int M, int N, int K, float alpha,
           const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);
void dgemm(Order order, Trans trans_a, Trans trans_b, int M, int N, int K, double alpha,
           const double* A, int lda, const double* B, int ldb, double beta, double* C, int ldc);

// A single-precision product with cblas_sgemm's signature (enums as CBLAS passes them).
using SgemmFunction = void (*)(int order, int trans_a, int trans_b, int M, int N, int K,
                               float alpha, const float* A, int lda, const float* B, int ldb,
                               float beta, float* C, int ldc);
// The load's check: `sgemm` over odd shapes (small ones, and ones past OpenBLAS's blocking) in
// both orders and every transposition, against a double-precision loop. The first wrong
// product, described, or nullopt when all agree within float's rounding.
std::optional<std::string> check_products(SgemmFunction sgemm);

}  // namespace zero::blas
