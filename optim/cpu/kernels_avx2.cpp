// The optimizer kernels for AVX2 + FMA + F16C: 8 fp32 lanes. Built with -mavx2 -mfma -mf16c;
// called only when the CPU has all three.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include "optim/cpu/kernels.h"

namespace zero::optim::cpu {
namespace avx2_isa {

struct Vec {
  using F = __m256;
  using U = __m256i;
  static constexpr std::size_t W = 8;

  static F set(float x) { return _mm256_set1_ps(x); }
  static U setu(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // +1 or -1 with x's sign, 0 for ±0 (NaN gives ±1).
  static F sign(F x) {
    const F unit = _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    return _mm256_and_ps(unit, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ));
  }

  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load(const bf16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static F load(const f16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static __m128i pack16(U words) {  // the low 16 bits of each lane (all < 2^16)
    return _mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));
  }
  static void store16(void* p, U words) {
    _mm_storeu_si128(static_cast<__m128i*>(p), pack16(words));
  }
  // Non-temporal, to 32-byte (fp32) and 16-byte (bf16) aligned addresses; then fence().
  static void stream(float* p, F x) { _mm256_stream_ps(p, x); }
  static void stream_stochastic(bf16_t* p, F x, U random16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), pack16(stochastic(x, random16)));
  }
  static void fence() { _mm_sfence(); }
  // Round to nearest even; NaN keeps its sign and top payload and becomes quiet (base/half.h).
  static void store(bf16_t* p, F x) {
    const U bits = _mm256_castps_si256(x);
    const U odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const U rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    store16(p, nan_fixed(x, bits, rounded));
  }
  static void store(f16_t* p, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static void store_truncated(float* p, F x) { store(p, x); }
  static void store_truncated(bf16_t* p, F x) {
    store16(p, _mm256_srli_epi32(_mm256_castps_si256(x), 16));
  }
  static U stochastic(F x, U random16) {
    const U bits = _mm256_castps_si256(x);
    return nan_fixed(x, bits, _mm256_srli_epi32(_mm256_add_epi32(bits, random16), 16));
  }
  static void store_stochastic(bf16_t* p, F x, U random16) { store16(p, stochastic(x, random16)); }
  static U nan_fixed(F x, U bits, U rounded) {
    const U quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const F is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(is_nan));
  }

  static U lanes(std::uint32_t first) {
    return _mm256_add_epi32(setu(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static U hash(U key, U index) {  // optim/rounding.h: rounding_bits, lane by lane
    U x = _mm256_xor_si256(_mm256_mullo_epi32(index, setu(0x9e3779b1u)), key);
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, setu(0x85ebca6bu));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
    x = _mm256_mullo_epi32(x, setu(0xc2b2ae35u));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }
  static U low16(U r) { return _mm256_and_si256(r, setu(0xffffu)); }
  static U high16(U r) { return _mm256_srli_epi32(r, 16); }
};

#include "optim/cpu/kernel_body.h"

}  // namespace avx2_isa

Kernel avx2_kernel(Mode mode, OptimizerType type, DType grad, DType state, int out) {
  return avx2_isa::pick_kernel<avx2_isa::Vec>(mode, type, grad, state, out);
}

}  // namespace zero::optim::cpu
