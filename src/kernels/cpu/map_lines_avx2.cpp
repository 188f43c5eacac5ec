// AVX2 build of the same line kernels; with -ffp-contract=off it gives the scalar build's bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "ir/scalar_ops.hpp"
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/cpu/vec_math.hpp"  // its templates built for AVX2
#include "kernels/cpu/vec_avx2.hpp"
namespace synoros::kernels::avx2 {
// composite.cpp's canonical softmax of one contiguous row: the same bits as its scalar loop.
float softmax_exp_sum(const float* x, float* y, int64_t n, float m) {  // y null: the sum alone
  const __m256 mv = VecF::set(m);
  float total = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    const int64_t end = std::min<int64_t>(n, seg + 4096);
    __m256 lanes = _mm256_setzero_ps();
    int64_t k = seg;
    for (; k + 8 <= end; k += 8) {
      __m256 e = vmath::exp<VecF>(VecF::sub(VecF::load(x + k), mv));
      if (y) VecF::store(y + k, e);
      lanes = VecF::add(lanes, e);
    }
    if (k < end) {  // the tail: lanes past it add +0
      const int64_t r = end - k;
      __m256 e = vmath::exp<VecF>(VecF::sub(VecF::load_n(x + k, r), mv));
      if (y) VecF::store_n(y + k, e, r);
      lanes = VecF::add(lanes, _mm256_and_ps(e, _mm256_castsi256_ps(VecF::edge(r))));
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, lanes);
    total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
  return total;
}

float row_max(const float* x, int64_t n) {
  __m256 mv = VecF::set(-INFINITY);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) mv = VecF::max(VecF::load(x + k), mv);  // a NaN x keeps the maximum
  alignas(32) float l[8];
  _mm256_store_ps(l, mv);
  float m = -INFINITY;
  for (float v : l) m = std::max(m, v);
  for (; k < n; ++k) m = std::max(m, x[k]);
  return m;
}

void divide_row(float* y, int64_t n, float s) {
  const __m256 sv = VecF::set(s);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) VecF::store(y + k, VecF::div(VecF::load(y + k), sv));
  for (; k < n; ++k) y[k] /= s;
}
}  // namespace synoros::kernels::avx2
#define SYNOROS_ISA_NS avx2
#define SYNOROS_VEC_MATH 1
#include "kernels/cpu/map_lines_impl.hpp"
#pragma GCC pop_options
