// The CPU layers' BLAS (models/blas): the core zero asks OpenBLAS for on CPUs of every kind (an
// Intel Xeon of the Sapphire Rapids class that OpenBLAS 0.3.21 does not recognise among them), a
// forced core the CPU cannot run named with what it lacks, the load's product check catching
// planted errors, and on this machine: the kernels the layers run are the best this CPU can,
// never a generic fallback.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "models/blas/openblas.h"

namespace zero::blas {
namespace {

// Traits as cpuid and XCR0 would give them.
CpuTraits intel_avx512(bool bf16) {
  CpuTraits t;
  t.vendor = CpuVendor::intel;
  t.name = "Intel(R) Xeon(R) Processor";
  t.family = 6;
  t.model = 143;  // Sapphire Rapids: newer than OpenBLAS 0.3.21's table
  t.avx = t.avx2 = t.fma = true;
  t.avx512f = t.avx512cd = t.avx512bw = t.avx512dq = t.avx512vl = true;
  t.avx512bf16 = bf16;
  return t;
}

CpuTraits amd_zen3() {
  CpuTraits t;
  t.vendor = CpuVendor::amd;
  t.name = "AMD EPYC";
  t.family = 25;
  t.model = 1;
  t.avx = t.avx2 = t.fma = true;
  return t;
}

CpuTraits intel_avx2() {
  CpuTraits t = amd_zen3();
  t.vendor = CpuVendor::intel;
  t.name = "Intel(R) Core(TM) i7-4770";
  t.family = 6;
  t.model = 60;
  return t;
}

// cblas_sgemm's signature over zero's loaded library.
void real_sgemm(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A,
                int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  sgemm(static_cast<Order>(order), static_cast<Trans>(ta), static_cast<Trans>(tb), M, N, K, alpha,
        A, lda, B, ldb, beta, C, ldc);
}

// Wrong past OpenBLAS's blocking: the last element of a product over a long K is off by one.
void wrong_past_blocking(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float* A, int lda, const float* B, int ldb, float beta, float* C,
                         int ldc) {
  real_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (K > 256) C[0] += 1.0f;
}

// Scales C by beta even when beta is 0, so a C of NaN stays NaN.
void scales_by_zero_beta(int order, int ta, int tb, int M, int N, int K, float alpha,
                         const float* A, int lda, const float* B, int ldb, float beta, float* C,
                         int ldc) {
  const bool nan_first = std::isnan(C[0]);
  real_sgemm(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (beta == 0.0f && nan_first) C[0] = std::numeric_limits<float>::quiet_NaN();
}

// Multiplies with alpha 1 whatever alpha is.
void ignores_alpha(int order, int ta, int tb, int M, int N, int K, float, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  real_sgemm(order, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

TEST_CASE("blas: zero asks for the core of the best kernel set the CPU runs", "[models][blas]") {
  CHECK(preferred_core(intel_avx512(true)) == "Cooperlake");
  CHECK(preferred_core(intel_avx512(false)) == "SkylakeX");
  CHECK(preferred_core(amd_zen3()) == "Zen");
  CHECK(preferred_core(intel_avx2()) == "Haswell");
  CpuTraits zen4 = intel_avx512(true);
  zen4.vendor = CpuVendor::amd;
  CHECK(preferred_core(zen4) == "Cooperlake");
  // AVX-512 F without BW and DQ (Knights Landing) does not run SkylakeX's kernels.
  CpuTraits knl = intel_avx512(false);
  knl.avx512bw = knl.avx512dq = false;
  CHECK(preferred_core(knl) == "Haswell");
  CHECK(best_kernel_set(knl) == KernelSet::avx2);
  // Without AVX2 and FMA, and off x86, OpenBLAS chooses.
  CpuTraits old = amd_zen3();
  old.avx2 = old.fma = false;
  CHECK_FALSE(preferred_core(old).has_value());
  CHECK(best_kernel_set(old) == KernelSet::avx);
  CHECK_FALSE(preferred_core(CpuTraits{}).has_value());
  CHECK(best_kernel_set(CpuTraits{}) == KernelSet::unknown);
}

TEST_CASE("blas: a core's kernel set, and a fallback is a set below the CPU's best",
          "[models][blas]") {
  CHECK(core_kernel_set("Prescott") == KernelSet::sse);
  CHECK(core_kernel_set("Sandybridge") == KernelSet::avx);
  CHECK(core_kernel_set("Zen") == KernelSet::avx2);
  CHECK(core_kernel_set("haswell") == KernelSet::avx2);  // OpenBLAS reads names in any case
  CHECK(core_kernel_set("SKYLAKEX") == KernelSet::avx512);
  CHECK(core_kernel_set("Cooperlake") == KernelSet::avx512);
  CHECK(core_kernel_set("NEOVERSEN1") == KernelSet::unknown);
  CHECK(is_fallback(KernelSet::sse, KernelSet::avx512));
  CHECK(is_fallback(KernelSet::avx2, KernelSet::avx512));
  CHECK_FALSE(is_fallback(KernelSet::avx2, KernelSet::avx2));
  CHECK_FALSE(is_fallback(KernelSet::unknown, KernelSet::avx2));
  CHECK_FALSE(is_fallback(KernelSet::sse, KernelSet::unknown));
}

TEST_CASE("blas: a forced core the CPU cannot run is named with the instructions it lacks",
          "[models][blas]") {
  const auto skylake_on_zen = core_problem("SkylakeX", amd_zen3());
  REQUIRE(skylake_on_zen.has_value());
  CHECK_THAT(*skylake_on_zen, Catch::Contains("SkylakeX") && Catch::Contains("AVX-512") &&
                                  Catch::Contains("AMD EPYC"));
  const auto bulldozer_on_intel = core_problem("bulldozer", intel_avx512(true));
  REQUIRE(bulldozer_on_intel.has_value());
  CHECK_THAT(*bulldozer_on_intel, Catch::Contains("FMA4"));
  const auto cooperlake_without_bf16 = core_problem("Cooperlake", intel_avx512(false));
  REQUIRE(cooperlake_without_bf16.has_value());
  CHECK_THAT(*cooperlake_without_bf16, Catch::Contains("BF16"));
  CHECK_FALSE(core_problem("Haswell", amd_zen3()).has_value());
  CHECK_FALSE(core_problem("Prescott", intel_avx512(true)).has_value());
  CHECK_FALSE(core_problem("SkylakeX", intel_avx512(false)).has_value());
  CHECK_FALSE(core_problem("NotACore", amd_zen3()).has_value());  // OpenBLAS's to judge
}

TEST_CASE("blas: the load's product check passes the library and catches planted errors",
          "[models][blas]") {
  CHECK_FALSE(check_products(real_sgemm).has_value());
  const auto blocking = check_products(wrong_past_blocking);
  REQUIRE(blocking.has_value());
  CHECK_THAT(*blocking, Catch::Contains("40x50x400") && Catch::Contains("C[0,0]"));
  const auto beta = check_products(scales_by_zero_beta);
  REQUIRE(beta.has_value());
  CHECK_THAT(*beta, Catch::Contains("beta 0") && Catch::Contains("nan"));
  const auto alpha = check_products(ignores_alpha);
  REQUIRE(alpha.has_value());
  CHECK_THAT(*alpha, Catch::Contains("33x17x65") && Catch::Contains("alpha 0.75"));
}

TEST_CASE("blas: the layers' kernels are the best this CPU runs, not a generic fallback",
          "[models][blas]") {
  const Info& info = load();
  INFO(info.line() << " on " << info.cpu);
  CHECK_FALSE(info.core.empty());
  CHECK_THAT(info.config, Catch::StartsWith("OpenBLAS"));
  const KernelSet best = best_kernel_set(cpu_traits());
  if (best == KernelSet::unknown) {
    WARN("not an x86 CPU: OpenBLAS's own choice, " << info.core << ", is not judged");
    return;
  }
  // On a CPU with AVX2 or AVX-512, a generic (SSE) or lesser kernel set fails here.
  CHECK(info.core_set == best);
  CHECK_FALSE(info.warning().has_value());
  CHECK(info.threading == "OpenMP");  // the build the configure step prefers
}

}  // namespace zero::blas
