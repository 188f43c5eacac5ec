// AVX-512 vector traits for vec_math.hpp (16 floats, edges through masks). The including file
// enables AVX-512 (a target pragma, or -mavx512f -mavx512dq ... in generated kernels).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace synoros::kernels::avx512 {
// vec_math.hpp's vector traits: 16 floats, edges through masks.
struct VecF {
  using R = __m512;
  static constexpr int64_t kLanes = 16;
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p); }
  static void store_n(float* p, R v, int64_t n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v); }
  static R set(float v) { return _mm512_set1_ps(v); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R fms(R a, R b, R c) { return _mm512_fmsub_ps(a, b, c); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  // vrangeps, imm 2: the smaller magnitude with x's sign, so |x| > c gives c with x's sign (a
  // NaN x gives c).
  static R clamp_abs(R x, float c) { return _mm512_range_ps(x, set(c), 2); }
  static R keep_nan(R x, R y) { return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x); }
  // Lane masks and selection, for the generated kernels' comparisons: ordered comparisons are
  // false for a NaN operand, ne and unord true.
  using M = __mmask16;
  static M lt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M le(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
  static M eq(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M ne(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
  static M unord(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
  static M either(M a, M b) { return M(a | b); }
  static R select(M m, R t, R f) { return _mm512_mask_blend_ps(m, f, t); }
  static R flip_sign(R x) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u)))); }
  static R clear_sign(R x) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff))); }
  static R ldexp(R e, R n) { return _mm512_scalef_ps(e, n); }
  static R ldexp_small(R e, R m, R) { return _mm512_scalef_ps(e, m); }
  // A masked-off lane is not computed (no underflow, no assist) and comes out +0.
  static R ldexp_unless_below(R e, R n, R x, float c) {
    return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, set(c), _CMP_NLT_UQ), e, n);
  }
  static R recip_unless_lt(R x, float c, R b) {
    return _mm512_maskz_div_ps(_mm512_cmp_ps_mask(x, set(c), _CMP_NLT_UQ), set(1.0f), b);
  }
};
}  // namespace synoros::kernels::avx512
