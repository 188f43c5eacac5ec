// AVX2 vector traits for vec_math.hpp (8 floats, edges through masked loads and stores). The
// including file enables AVX2 and FMA (a target pragma, or -mavx2 -mfma in generated kernels).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace synoros::kernels::avx2 {
// vec_math.hpp's vector traits: 8 floats, edges through masked loads and stores.
struct VecF {
  using R = __m256;
  static constexpr int64_t kLanes = 8;
  static __m256i edge(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R load_n(const float* p, int64_t n) { return _mm256_maskload_ps(p, edge(n)); }
  static void store_n(float* p, R v, int64_t n) { _mm256_maskstore_ps(p, edge(n), v); }
  static R set(float v) { return _mm256_set1_ps(v); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R fms(R a, R b, R c) { return _mm256_fmsub_ps(a, b, c); }
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R clamp_abs(R x, float c) { return max(set(-c), min(set(c), x)); }
  static R keep_nan(R x, R y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  // Lane masks (all ones where true) and selection, for the generated kernels' comparisons:
  // ordered comparisons are false for a NaN operand, ne and unord true.
  using M = __m256;
  static M lt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M le(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
  static M eq(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M ne(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
  static M unord(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_UNORD_Q); }
  static M either(M a, M b) { return _mm256_or_ps(a, b); }
  static R select(M m, R t, R f) { return _mm256_blendv_ps(f, t, m); }
  static R flip_sign(R x) { return _mm256_xor_ps(x, set(-0.0f)); }
  static R clear_sign(R x) { return _mm256_andnot_ps(set(-0.0f), x); }
  static R pow2(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  }
  static R ldexp(R e, R n) {
    __m256i ni = _mm256_cvttps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    return mul(mul(e, pow2(n1)), pow2(_mm256_sub_epi32(ni, n1)));
  }
  // Lanes where x < c scale by 2^0 (nothing underflows), then come out +0.
  static R ldexp_unless_below(R e, R n, R x, float c) {
    const R below = _mm256_cmp_ps(x, set(c), _CMP_LT_OQ);
    return _mm256_andnot_ps(below, ldexp(e, _mm256_andnot_ps(below, n)));
  }
  // 2^m from the low bits of mb = m + 1.5 * 2^23: shifted into the exponent field, plus 127's.
  static R ldexp_small(R e, R, R mb) {
    return mul(e, _mm256_castsi256_ps(
                      _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(mb), 23), _mm256_set1_epi32(0x3F800000))));
  }
  static R recip_unless_lt(R x, float c, R b) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, set(c), _CMP_LT_OQ), div(set(1.0f), b));
  }
};
}  // namespace synoros::kernels::avx2
