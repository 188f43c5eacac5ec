// AVX-512 build of the elementwise line kernels (16 floats per vector, 32 registers); with
// -ffp-contract=off it gives the same bits as the scalar and AVX2 builds.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "kernels/cpu/scalar_ops.hpp"
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// (and, in the sanitizer build, -Wuninitialized) reports as a use of an uninitialised value (a
// false positive, as in gemm.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")
namespace synoros::kernels::avx512 {
// vec_math.hpp's vector traits: 16 floats, edges through masks.
struct VecF {
  using R = __m512;
  using I = __m512i;
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
  static R neg(R a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R zero_where_lt(R x, float c, R y) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set(c), _CMP_NLT_UQ), y); }
  static R keep_nan(R x, R y) { return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x); }
  static I trunc(R v) { return _mm512_cvttps_epi32(v); }
  static I srai1(I v) { return _mm512_srai_epi32(v, 1); }
  static I isub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static R pow2(I n) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23)); }
  static R shl23_add(R v, uint32_t k) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(v), 23), _mm512_set1_epi32(int(k))));
  }
};
}  // namespace synoros::kernels::avx512
#define SYNOROS_ISA_NS avx512
#define SYNOROS_VEC_MATH 1
#include "kernels/cpu/map_lines_impl.hpp"
#pragma GCC pop_options
#pragma GCC diagnostic pop
