// AVX-512 build of the elementwise line kernels (16 floats per vector, 32 registers); with
// -ffp-contract=off it gives the same bits as the scalar and AVX2 builds.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "ir/scalar_ops.hpp"
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// (and, in the sanitizer build, -Wuninitialized) reports as a use of an uninitialised value (a
// false positive, as in gemm.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")
#include "kernels/cpu/vec_avx512.hpp"
#define SYNOROS_ISA_NS avx512
#define SYNOROS_VEC_MATH 1
#include "kernels/cpu/map_lines_impl.hpp"

namespace synoros::kernels::avx512 {
// avx2::softmax_exp_sum with sixteen exps at a time: each vector's low eight lanes are added into
// the eight sums before its high eight, the order the AVX2 build adds them, so the same bits.
float softmax_exp_sum(const float* x, float* y, int64_t n, float m) {
  const __m512 mv = VecF::set(m);
  float total = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    const int64_t end = std::min<int64_t>(n, seg + 4096);
    __m256 lanes = _mm256_setzero_ps();
    int64_t k = seg;
    for (; k + 16 <= end; k += 16) {
      const __m512 e = vmath::exp<VecF>(VecF::sub(VecF::load(x + k), mv));
      if (y) VecF::store(y + k, e);
      lanes = _mm256_add_ps(lanes, _mm512_castps512_ps256(e));
      lanes = _mm256_add_ps(lanes, _mm512_extractf32x8_ps(e, 1));
    }
    if (k < end) {  // the tail: lanes past it add +0
      const int64_t r = end - k;
      const __m512 e = _mm512_maskz_mov_ps(__mmask16((1u << r) - 1), vmath::exp<VecF>(VecF::sub(VecF::load_n(x + k, r), mv)));
      if (y) VecF::store_n(y + k, e, r);
      lanes = _mm256_add_ps(lanes, _mm512_castps512_ps256(e));
      if (r > 8) lanes = _mm256_add_ps(lanes, _mm512_extractf32x8_ps(e, 1));
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, lanes);
    total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
  return total;
}

// softmax_exp_sum of four rows at once (row j: x[j] to y[j], its own m[j]; y[j] may be x[j]):
// each row's sums are the chains above, four of them in flight instead of one.
void softmax_exp_sum4(const float* const* x, float* const* y, int64_t n, const float* m, float* out) {
  __m512 mv[4];
  for (int j = 0; j < 4; ++j) mv[j] = VecF::set(m[j]), out[j] = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    const int64_t end = std::min<int64_t>(n, seg + 4096);
    __m256 lanes[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t k = seg;
    for (; k + 16 <= end; k += 16) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512 e = vmath::exp<VecF>(VecF::sub(VecF::load(x[j] + k), mv[j]));
        VecF::store(y[j] + k, e);
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_castps512_ps256(e));
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_extractf32x8_ps(e, 1));
      }
    }
    if (k < end) {
      const int64_t r = end - k;
      for (int j = 0; j < 4; ++j) {
        const __m512 e = _mm512_maskz_mov_ps(__mmask16((1u << r) - 1), vmath::exp<VecF>(VecF::sub(VecF::load_n(x[j] + k, r), mv[j])));
        VecF::store_n(y[j] + k, e, r);
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_castps512_ps256(e));
        if (r > 8) lanes[j] = _mm256_add_ps(lanes[j], _mm512_extractf32x8_ps(e, 1));
      }
    }
    for (int j = 0; j < 4; ++j) {
      alignas(32) float l[8];
      _mm256_store_ps(l, lanes[j]);
      out[j] += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
  }
}
}  // namespace synoros::kernels::avx512
#pragma GCC pop_options
#pragma GCC diagnostic pop
