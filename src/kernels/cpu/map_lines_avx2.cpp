// AVX2 build of the same line kernels; with -ffp-contract=off it gives the scalar build's bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "kernels/kernel_api.hpp"
#include "ir/scalar_ops.hpp"
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/cpu/vec_math.hpp"  // its templates built for AVX2
#include "kernels/cpu/vec_avx2.hpp"
namespace synoros::kernels {
float softmax_exp_sum_vec(const float* x, float* y, int64_t n, float m) {
  return active_isa() == Isa::Avx512 ? avx512::softmax_exp_sum(x, y, n, m) : avx2::softmax_exp_sum(x, y, n, m);
}
void softmax_exp_sum4_vec(const float* const* x, float* const* y, int64_t n, const float* m, float* out) {
  if (active_isa() == Isa::Avx512) return avx512::softmax_exp_sum4(x, y, n, m, out);
  for (int j = 0; j < 4; ++j) out[j] = avx2::softmax_exp_sum(x[j], y[j], n, m[j]);
}
const RowSteps& row_steps(int isa) {
  static const RowSteps v512{avx512::row_max, avx512::scale_mask_max, avx512::divide_row, avx512::scale_row,
                             avx512::scale_add_row};
  static const RowSteps v256{avx2::row_max, avx2::scale_mask_max, avx2::divide_row, avx2::scale_row,
                             avx2::scale_add_row};
  return isa >= int(Isa::Avx512) ? v512 : v256;
}
}  // namespace synoros::kernels
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

void scale_row(float* y, int64_t n, float s) {
  const __m256 sv = VecF::set(s);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) VecF::store(y + k, VecF::mul(VecF::load(y + k), sv));
  for (; k < n; ++k) y[k] *= s;
}

float scale_mask_max(float* y, int64_t seen, int64_t n, float s) {
  scale_row(y, seen, s);
  std::fill(y + seen, y + n, -INFINITY);
  return row_max(y, seen);
}

void scale_add_row(float* y, const float* x, int64_t n, float a) {
  const __m256 av = VecF::set(a);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) VecF::store(y + k, VecF::add(VecF::mul(VecF::load(y + k), av), VecF::load(x + k)));
  for (; k < n; ++k) y[k] = y[k] * a + x[k];
}

namespace {
// Elements k..k+r of p (r <= 8; lanes past r read as zero).
__m256 load_upto(const float* p, int64_t r) { return r == 8 ? VecF::load(p) : VecF::load_n(p, r); }

// composite.cpp's canonical_sum for R rows at once (R independent chains, each row's sum in the
// canonical order): term(j, k, c) gives row j's terms of elements k..k+c; lanes past c add +0.
template <int R, class F>
void canonical_sums(int64_t n, F term, float* out) {
  for (int j = 0; j < R; ++j) out[j] = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    const int64_t end = std::min<int64_t>(n, seg + 4096);
    __m256 lanes[R];
    for (int j = 0; j < R; ++j) lanes[j] = _mm256_setzero_ps();
    int64_t k = seg;
    for (; k + 8 <= end; k += 8) {
#pragma GCC unroll 4
      for (int j = 0; j < R; ++j) lanes[j] = VecF::add(lanes[j], term(j, k, 8));
    }
    if (k < end) {
      const __m256 keep = _mm256_castsi256_ps(VecF::edge(end - k));
      for (int j = 0; j < R; ++j) lanes[j] = VecF::add(lanes[j], _mm256_and_ps(term(j, k, end - k), keep));
    }
    for (int j = 0; j < R; ++j) {
      alignas(32) float l[8];
      _mm256_store_ps(l, lanes[j]);
      out[j] += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
  }
}

template <int R>
void dots_rows(const float* a, int64_t a_rs, const float* b, int64_t b_rs, int64_t n, float* out) {
  canonical_sums<R>(
      n,
      [&](int j, int64_t k, int64_t c) { return VecF::mul(load_upto(a + j * a_rs + k, c), load_upto(b + j * b_rs + k, c)); },
      out);
}

template <int R>
void stats_rows(const float* x, int64_t n, float eps, float* mean, float* r) {
  canonical_sums<R>(n, [&](int j, int64_t k, int64_t c) { return load_upto(x + j * n + k, c); }, mean);
  __m256 mv[R];
  for (int j = 0; j < R; ++j) {
    mean[j] /= float(n);
    mv[j] = VecF::set(mean[j]);
  }
  float var[R];
  canonical_sums<R>(
      n,
      [&](int j, int64_t k, int64_t c) {
        const __m256 d = VecF::sub(load_upto(x + j * n + k, c), mv[j]);
        return VecF::mul(d, d);
      },
      var);
  for (int j = 0; j < R; ++j) r[j] = 1.0f / std::sqrt(var[j] / float(n) + eps);
}

struct GradTerms {
  const float *x, *g, *w;
  __m256 mv, rv;
  __m256 gw(int64_t k, int64_t c) const {
    const __m256 gv = load_upto(g + k, c);
    return w ? VecF::mul(gv, load_upto(w + k, c)) : gv;
  }
  __m256 xh(int64_t k, int64_t c) const { return VecF::mul(VecF::sub(load_upto(x + k, c), mv), rv); }
};

template <int R>
void grad_sums_rows(const float* x, const float* g, const float* w, int64_t n, const float* mean, const float* r,
                    float* mg, float* mgx) {
  GradTerms t[R];
  for (int j = 0; j < R; ++j) t[j] = {x + j * n, g + j * n, w, VecF::set(mean[j]), VecF::set(r[j])};
  canonical_sums<R>(n, [&](int j, int64_t k, int64_t c) { return t[j].gw(k, c); }, mg);
  canonical_sums<R>(n, [&](int j, int64_t k, int64_t c) { return VecF::mul(t[j].gw(k, c), t[j].xh(k, c)); }, mgx);
  for (int j = 0; j < R; ++j) {
    mg[j] /= float(n);
    mgx[j] /= float(n);
  }
}
}  // namespace

void row_dots(const float* a, int64_t a_rs, const float* b, int64_t b_rs, int64_t n, int64_t rows, float* out) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) dots_rows<4>(a + j * a_rs, a_rs, b + j * b_rs, b_rs, n, out + j);
  for (; j < rows; ++j) dots_rows<1>(a + j * a_rs, a_rs, b + j * b_rs, b_rs, n, out + j);
}

void layernorm_stats(const float* x, int64_t n, int64_t rows, float eps, float* mean, float* r) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) stats_rows<4>(x + j * n, n, eps, mean + j, r + j);
  for (; j < rows; ++j) stats_rows<1>(x + j * n, n, eps, mean + j, r + j);
}

void layernorm_grad_sums(const float* x, const float* g, const float* w, int64_t n, int64_t rows, const float* mean,
                         const float* r, float* mg, float* mgx) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) grad_sums_rows<4>(x + j * n, g + j * n, w, n, mean + j, r + j, mg + j, mgx + j);
  for (; j < rows; ++j) grad_sums_rows<1>(x + j * n, g + j * n, w, n, mean + j, r + j, mg + j, mgx + j);
}

void layernorm_apply(const float* x, float* y, int64_t n, float mean, float r, const float* w, const float* b) {
  const __m256 mv = VecF::set(mean), rv = VecF::set(r);
  for (int64_t k = 0; k < n; k += 8) {
    const int64_t c = std::min<int64_t>(8, n - k);
    __m256 v = VecF::mul(VecF::sub(load_upto(x + k, c), mv), rv);
    if (w) v = VecF::add(VecF::mul(v, load_upto(w + k, c)), load_upto(b + k, c));
    if (c == 8) {
      VecF::store(y + k, v);
    } else {
      VecF::store_n(y + k, v, c);
    }
  }
}

void layernorm_param_rows(const float* x, const float* g, int64_t n, int64_t rows, const float* mean, const float* r,
                          float* dw, float* db) {
  for (int64_t j = 0; j < rows; ++j) {
    const float *xr = x + j * n, *gr = g + j * n;
    const __m256 mv = VecF::set(mean[j]), rv = VecF::set(r[j]);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
      const __m256 gv = VecF::load(gr + k);
      VecF::store(dw + k, VecF::add(VecF::load(dw + k), VecF::mul(gv, VecF::mul(VecF::sub(VecF::load(xr + k), mv), rv))));
      VecF::store(db + k, VecF::add(VecF::load(db + k), gv));
    }
    for (; k < n; ++k) {
      dw[k] += gr[k] * ((xr[k] - mean[j]) * r[j]);
      db[k] += gr[k];
    }
  }
}

void layernorm_grad_apply(const float* x, const float* g, const float* w, float* dx, int64_t n, float mean, float r,
                          float mg, float mgx) {
  const GradTerms t{x, g, w, VecF::set(mean), VecF::set(r)};
  const __m256 mgv = VecF::set(mg), mgxv = VecF::set(mgx);
  for (int64_t k = 0; k < n; k += 8) {
    const int64_t c = std::min<int64_t>(8, n - k);
    const __m256 v = VecF::mul(t.rv, VecF::sub(VecF::sub(t.gw(k, c), mgv), VecF::mul(t.xh(k, c), mgxv)));
    if (c == 8) {
      VecF::store(dx + k, v);
    } else {
      VecF::store_n(dx + k, v, c);
    }
  }
}

void layernorm_grad_apply_param(const float* x, const float* g, const float* w, float* dx, int64_t n, float mean,
                                float r, float mg, float mgx, float* dw, float* db) {
  const __m256 mv = VecF::set(mean), rv = VecF::set(r), mgv = VecF::set(mg), mgxv = VecF::set(mgx);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 gv = VecF::load(g + k);
    const __m256 xh = VecF::mul(VecF::sub(VecF::load(x + k), mv), rv);
    const __m256 gw = w ? VecF::mul(gv, VecF::load(w + k)) : gv;
    VecF::store(dx + k, VecF::mul(rv, VecF::sub(VecF::sub(gw, mgv), VecF::mul(xh, mgxv))));
    VecF::store(dw + k, VecF::add(VecF::load(dw + k), VecF::mul(gv, xh)));
    VecF::store(db + k, VecF::add(VecF::load(db + k), gv));
  }
  if (k == n) return;
  layernorm_grad_apply(x + k, g + k, w ? w + k : nullptr, dx + k, n - k, mean, r, mg, mgx);
  for (; k < n; ++k) {
    dw[k] += g[k] * ((x[k] - mean) * r);
    db[k] += g[k];
  }
}
}  // namespace synoros::kernels::avx2
#define SYNOROS_ISA_NS avx2
#define SYNOROS_VEC_MATH 1
#include "kernels/cpu/map_lines_impl.hpp"
#pragma GCC pop_options
