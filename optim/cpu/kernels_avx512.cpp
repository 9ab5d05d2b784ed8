// The optimizer kernels for AVX-512 (F, BW, VL) with F16C: 16 fp32 lanes. Built with
// -mavx512f -mavx512bw -mavx512vl -mfma -mf16c; called only when the CPU has them.
//
// bf16 is rounded with integer instructions, not AVX512-BF16's vcvtneps2bf16: that instruction
// flushes subnormal inputs to zero (measured on Zen 5), so it is not the round-to-nearest-even
// of base/half.h, and the integer rounding costs nothing measurable in a memory-bound kernel.
#include <immintrin.h>

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// "may be used uninitialized" once they are inlined here (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "optim/cpu/kernels.h"

namespace zero::optim::cpu {
namespace avx512_isa {

struct Vec {
  using F = __m512;
  using U = __m512i;
  static constexpr std::size_t W = 16;

  static F set(float x) { return _mm512_set1_ps(x); }
  static U setu(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  // +1 or -1 with x's sign, 0 for ±0 (NaN gives ±1).
  static F sign(F x) {
    const U unit = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(x), setu(0x80000000u)),
                                   setu(0x3f800000u));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    return _mm512_castsi512_ps(_mm512_maskz_mov_epi32(nonzero, unit));
  }

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load(const bf16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static F load(const f16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static void store16(void* p, U words) {
    _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(words));
  }
  // Non-temporal, to 64-byte (fp32) and 32-byte (bf16) aligned addresses; then fence().
  static void stream(float* p, F x) { _mm512_stream_ps(p, x); }
  static void stream_stochastic(bf16_t* p, F x, U random16) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtepi32_epi16(stochastic(x, random16)));
  }
  static void fence() { _mm_sfence(); }
  // Round to nearest even; NaN keeps its sign and top payload and becomes quiet (base/half.h).
  static void store(bf16_t* p, F x) {
    const U bits = _mm512_castps_si512(x);
    const U odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), setu(1));
    const U rounded =
        _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(setu(0x7fff), odd)), 16);
    store16(p, nan_fixed(x, bits, rounded));
  }
  static void store(f16_t* p, F x) {
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  }
  static void store_truncated(float* p, F x) { store(p, x); }
  static void store_truncated(bf16_t* p, F x) {
    store16(p, _mm512_srli_epi32(_mm512_castps_si512(x), 16));
  }
  static U stochastic(F x, U random16) {
    const U bits = _mm512_castps_si512(x);
    return nan_fixed(x, bits, _mm512_srli_epi32(_mm512_add_epi32(bits, random16), 16));
  }
  static void store_stochastic(bf16_t* p, F x, U random16) { store16(p, stochastic(x, random16)); }
  static U nan_fixed(F x, U bits, U rounded) {
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_or_epi32(rounded, is_nan, _mm512_srli_epi32(bits, 16), setu(0x40));
  }

  static U lanes(std::uint32_t first) {
    return _mm512_add_epi32(
        setu(first), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static U hash(U key, U index) {  // optim/rounding.h: rounding_bits, lane by lane
    U x = _mm512_xor_si512(_mm512_mullo_epi32(index, setu(0x9e3779b1u)), key);
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, setu(0x85ebca6bu));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 13));
    x = _mm512_mullo_epi32(x, setu(0xc2b2ae35u));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }
  static U low16(U r) { return _mm512_and_si512(r, setu(0xffffu)); }
  static U high16(U r) { return _mm512_srli_epi32(r, 16); }
};

#include "optim/cpu/kernel_body.h"

}  // namespace avx512_isa

Kernel avx512_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  return avx512_isa::pick_kernel<avx512_isa::Vec>(mode, type, grad, state, out);
}

}  // namespace zero::optim::cpu
