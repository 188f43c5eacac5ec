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
namespace {
// avx2::softmax_exp_sum for R rows at once (row j: x[j] to y[j], y[j] null: the sum alone; its own
// m[j], its sum to out[j]), sixteen exps at a time: each vector's low eight lanes are added into
// the row's eight sums before its high eight, the order the AVX2 build adds them, so the same
// bits. One row's sum is a chain of dependent adds; R rows keep R chains in flight.
template <int R>
void exp_sums(const float* const* x, float* const* y, int64_t n, const float* m, float* out) {
  __m512 mv[R];
  for (int j = 0; j < R; ++j) mv[j] = VecF::set(m[j]), out[j] = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    const int64_t end = std::min<int64_t>(n, seg + 4096);
    __m256 lanes[R];
    for (int j = 0; j < R; ++j) lanes[j] = _mm256_setzero_ps();
    int64_t k = seg;
    for (; k + 16 <= end; k += 16) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) {
        const __m512 e = vmath::exp<VecF>(VecF::sub(VecF::load(x[j] + k), mv[j]));
        if (y[j]) VecF::store(y[j] + k, e);
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_castps512_ps256(e));
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_extractf32x8_ps(e, 1));
      }
    }
    if (k < end) {  // the tail: lanes past it add +0
      const int64_t r = end - k;
      const __mmask16 keep = __mmask16((1u << r) - 1);
      for (int j = 0; j < R; ++j) {
        const __m512 e = _mm512_maskz_mov_ps(keep, vmath::exp<VecF>(VecF::sub(VecF::load_n(x[j] + k, r), mv[j])));
        if (y[j]) VecF::store_n(y[j] + k, e, r);
        lanes[j] = _mm256_add_ps(lanes[j], _mm512_castps512_ps256(e));
        if (r > 8) lanes[j] = _mm256_add_ps(lanes[j], _mm512_extractf32x8_ps(e, 1));
      }
    }
    for (int j = 0; j < R; ++j) {
      alignas(32) float l[8];
      _mm256_store_ps(l, lanes[j]);
      out[j] += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
  }
}
}  // namespace

float softmax_exp_sum(const float* x, float* y, int64_t n, float m) {
  float s;
  exp_sums<1>(&x, &y, n, &m, &s);
  return s;
}
void softmax_exp_sum4(const float* const* x, float* const* y, int64_t n, const float* m, float* out) {
  exp_sums<4>(x, y, n, m, out);
}

namespace {
// Lanes 0 .. r - 1 (r < 16); tails compute on these lanes alone, so the lanes past a row's end
// raise no floating-point flags (0 / s, 0 * inf).
__mmask16 first(int64_t r) { return __mmask16((1u << r) - 1); }
// The lanes' maximum (none is NaN: the running maxima skip NaN).
float lanes_max(__m512 mv) { return _mm512_reduce_max_ps(mv); }
}  // namespace

float row_max(const float* x, int64_t n) {
  __m512 mv = VecF::set(-INFINITY);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) mv = VecF::max(VecF::load(x + k), mv);  // a NaN x keeps the maximum
  if (k < n) mv = _mm512_mask_max_ps(mv, first(n - k), VecF::load_n(x + k, n - k), mv);
  return lanes_max(mv);
}

float scale_mask_max(float* y, int64_t seen, int64_t n, float s) {
  const __m512 sv = VecF::set(s);
  __m512 mv = VecF::set(-INFINITY);
  int64_t k = 0;
  for (; k + 16 <= seen; k += 16) {
    const __m512 v = VecF::mul(VecF::load(y + k), sv);
    VecF::store(y + k, v);
    mv = VecF::max(v, mv);
  }
  if (k < seen) {
    const __m512 v = _mm512_maskz_mul_ps(first(seen - k), VecF::load_n(y + k, seen - k), sv);
    VecF::store_n(y + k, v, seen - k);
    mv = _mm512_mask_max_ps(mv, first(seen - k), v, mv);
  }
  std::fill(y + seen, y + n, -INFINITY);
  return lanes_max(mv);
}

void divide_row(float* y, int64_t n, float s) {
  const __m512 sv = VecF::set(s);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) VecF::store(y + k, VecF::div(VecF::load(y + k), sv));
  if (k < n) VecF::store_n(y + k, _mm512_maskz_div_ps(first(n - k), VecF::load_n(y + k, n - k), sv), n - k);
}

void scale_row(float* y, int64_t n, float s) {
  const __m512 sv = VecF::set(s);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) VecF::store(y + k, VecF::mul(VecF::load(y + k), sv));
  if (k < n) VecF::store_n(y + k, _mm512_maskz_mul_ps(first(n - k), VecF::load_n(y + k, n - k), sv), n - k);
}

void scale_add_row(float* y, const float* x, int64_t n, float a) {
  const __m512 av = VecF::set(a);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) VecF::store(y + k, VecF::add(VecF::mul(VecF::load(y + k), av), VecF::load(x + k)));
  if (k < n) {
    const __mmask16 m = first(n - k);
    VecF::store_n(y + k, _mm512_maskz_add_ps(m, _mm512_maskz_mul_ps(m, VecF::load_n(y + k, n - k), av), VecF::load_n(x + k, n - k)),
                  n - k);
  }
}
}  // namespace synoros::kernels::avx512
#pragma GCC pop_options
#pragma GCC diagnostic pop
