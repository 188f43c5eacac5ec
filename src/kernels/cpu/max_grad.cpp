// reduce_max_grad(x, y, g): the input gradient of y = max(x) over some axes, ties sharing evenly:
// out = mask * (g / count) with mask = (x == y) as 0 or 1 and count the window's sum of masks.
// Written as separate ops that took four passes over x's size (the mask, the counts, the product
// with the broadcast share, and the mask again for the second reader); here one pass per window.
//
// Bits: count is a sum of zeros and ones (exact in any order), share = g / count is one
// division, and each output is the product mask * share -- the composite's operations, so the
// bits equal its own (tested). The vector paths compute the same products lane by lane.
#include <immintrin.h>

#include <algorithm>

#include "ir/op_defs.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace synoros::kernels {

namespace {
constexpr int kMaxRank = 10;

struct MaxGradArgs {
  const void* x;
  const void* y;
  const void* g;
  void* out;
  bool f64, avx2, avx512;
  // Tile form: x is [A, KH, W, KW] and y, g are [A, W] (pooling tiles, a max over the last axis
  // or over a middle one). Otherwise the general form below.
  bool tile;
  int64_t A, KH, W, KW;
  // A window's elements at roff[r] from its first, r < nred (both forms).
  int64_t nred;
  const int64_t* roff;
  // General form: windows in y's order, window w's first element at base(w) from the kept
  // dimensions' x strides.
  int n_kept;
  int64_t kept_size[kMaxRank], kept_stride[kMaxRank];
  int64_t windows, per_chunk;
};

template <class T>
struct Buffers {
  const T* x;
  const T* y;
  const T* g;
  T* out;
};
template <class T>
Buffers<T> buffers(const MaxGradArgs& p) {
  return {static_cast<const T*>(p.x), static_cast<const T*>(p.y), static_cast<const T*>(p.g), static_cast<T*>(p.out)};
}

// Row a of the tile form (float): x and out at its first element, y and g at its first window.
struct TileRow {
  const float* x;
  const float* y;
  const float* g;
  float* out;
};
inline TileRow tile_row(const MaxGradArgs& p, int64_t a) {
  auto [x, y, g, out] = buffers<float>(p);
  int64_t first = a * p.KH * p.W * p.KW;
  return {x + first, y + a * p.W, g + a * p.W, out + first};
}

template <class T>
inline void window_scalar(const T* x, T y, T g, T* out, const int64_t* off, int64_t n) {
  T count = T(0);
  for (int64_t r = 0; r < n; ++r) count += x[off[r]] == y ? T(1) : T(0);
  T share = g / count;
  for (int64_t r = 0; r < n; ++r) out[off[r]] = (x[off[r]] == y ? T(1) : T(0)) * share;
}

// Tile form, row a from window w0 on, scalar.
template <class T>
void tile_rows_scalar(const MaxGradArgs& p, int64_t a, int64_t w0) {
  auto [x, y, g, out] = buffers<T>(p);
  for (int64_t w = w0; w < p.W; ++w) {
    int64_t first = a * p.KH * p.W * p.KW + w * p.KW;
    window_scalar<T>(x + first, y[a * p.W + w], g[a * p.W + w], out + first, p.roff, p.nred);
  }
}

// KW = 1: eight windows side by side along w, one row of x per i. Returns where it stopped.
__attribute__((target("avx2,fma"))) int64_t tile_kw1_avx2(const MaxGradArgs& p, int64_t a) {
  auto [x, y, g, out] = tile_row(p, a);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t w = 0;
  for (; w + 8 <= p.W; w += 8) {
    __m256 yv = _mm256_loadu_ps(y + w), count = _mm256_setzero_ps();
    for (int64_t i = 0; i < p.KH; ++i)
      count = _mm256_add_ps(count, _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i * p.W + w), yv, _CMP_EQ_OQ), one));
    __m256 share = _mm256_div_ps(_mm256_loadu_ps(g + w), count);
    for (int64_t i = 0; i < p.KH; ++i) {
      __m256 m = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i * p.W + w), yv, _CMP_EQ_OQ), one);
      _mm256_storeu_ps(out + i * p.W + w, _mm256_mul_ps(m, share));
    }
  }
  return w;
}

// KW = 2 (2-wide pooling tiles): four windows per vector of x, each window's y, g and count
// in two adjacent lanes. Returns where it stopped.
__attribute__((target("avx2,fma"))) int64_t tile_kw2_avx2(const MaxGradArgs& p, int64_t a) {
  const int64_t row = p.W * 2;
  auto [x, y, g, out] = tile_row(p, a);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  int64_t w = 0;
  for (; w + 4 <= p.W; w += 4) {
    __m256 yv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(y + w)), dup);
    __m256 gv = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(g + w)), dup);
    __m256 count = _mm256_setzero_ps();
    for (int64_t i = 0; i < p.KH; ++i)
      count = _mm256_add_ps(count,
                            _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i * row + 2 * w), yv, _CMP_EQ_OQ), one));
    // Each lane adds its pair partner: both lanes of a window then hold its count (exact: small
    // integers).
    count = _mm256_add_ps(count, _mm256_permute_ps(count, 0xB1));
    __m256 share = _mm256_div_ps(gv, count);
    for (int64_t i = 0; i < p.KH; ++i) {
      __m256 m = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i * row + 2 * w), yv, _CMP_EQ_OQ), one);
      _mm256_storeu_ps(out + i * row + 2 * w, _mm256_mul_ps(m, share));
    }
  }
  return w;
}

// GCC 12's AVX-512 intrinsics trip its uninitialised-value warnings (their pass-through operands).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// AVX-512: the same steps on 16 lanes, the row's last windows under a lane mask (masked loads
// and stores are as cheap as plain ones there). KW = 2: eight windows per vector.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void tile_kw2_avx512(const MaxGradArgs& p, int64_t a) {
  const int64_t row = p.W * 2;
  auto [x, y, g, out] = tile_row(p, a);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512i dup = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i swap = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  for (int64_t w = 0; w < p.W; w += 8) {
    int64_t n = std::min<int64_t>(8, p.W - w);
    __mmask16 lanes = __mmask16((1u << (2 * n)) - 1);
    __mmask8 half = __mmask8((1u << n) - 1);
    __m512 yv = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(half, y + w)));
    __m512 gv = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(half, g + w)));
    __m512 count = zero;
    for (int64_t i = 0; i < p.KH; ++i) {
      __mmask16 eq = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, x + i * row + 2 * w), yv, _CMP_EQ_OQ);
      count = _mm512_add_ps(count, _mm512_mask_blend_ps(eq, zero, one));
    }
    count = _mm512_add_ps(count, _mm512_permutexvar_ps(swap, count));  // pair partners: exact
    __m512 share = _mm512_maskz_div_ps(lanes, gv, count);
    for (int64_t i = 0; i < p.KH; ++i) {
      __mmask16 eq = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes, x + i * row + 2 * w), yv, _CMP_EQ_OQ);
      _mm512_mask_storeu_ps(out + i * row + 2 * w, lanes, _mm512_mul_ps(_mm512_mask_blend_ps(eq, zero, one), share));
    }
  }
}

// KW = 1: sixteen windows per vector.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void tile_kw1_avx512(const MaxGradArgs& p, int64_t a) {
  auto [x, y, g, out] = tile_row(p, a);
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t w = 0; w < p.W; w += 16) {
    int64_t n = std::min<int64_t>(16, p.W - w);
    __mmask16 lanes = __mmask16((1u << n) - 1);
    __m512 yv = _mm512_maskz_loadu_ps(lanes, y + w), count = zero;
    for (int64_t i = 0; i < p.KH; ++i) {
      __mmask16 eq = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes, x + i * p.W + w), yv, _CMP_EQ_OQ);
      count = _mm512_add_ps(count, _mm512_mask_blend_ps(eq, zero, one));
    }
    __m512 share = _mm512_maskz_div_ps(lanes, _mm512_maskz_loadu_ps(lanes, g + w), count);
    for (int64_t i = 0; i < p.KH; ++i) {
      __mmask16 eq = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes, x + i * p.W + w), yv, _CMP_EQ_OQ);
      _mm512_mask_storeu_ps(out + i * p.W + w, lanes, _mm512_mul_ps(_mm512_mask_blend_ps(eq, zero, one), share));
    }
  }
}

#pragma GCC diagnostic pop

template <class T>
void general_windows(const MaxGradArgs& p, int64_t w0, int64_t w1) {
  auto [x, y, g, out] = buffers<T>(p);
  int64_t idx[kMaxRank] = {};
  int64_t rest = w0, base = 0;
  for (int d = p.n_kept - 1; d >= 0; --d) {
    idx[d] = rest % p.kept_size[d];
    rest /= p.kept_size[d];
    base += idx[d] * p.kept_stride[d];
  }
  for (int64_t w = w0; w < w1; ++w) {
    window_scalar<T>(x + base, y[w], g[w], out + base, p.roff, p.nred);
    for (int d = p.n_kept - 1; d >= 0; --d) {  // next window
      base += p.kept_stride[d];
      if (++idx[d] < p.kept_size[d]) break;
      base -= idx[d] * p.kept_stride[d];
      idx[d] = 0;
    }
  }
}

void max_grad_chunk(const void* args, int64_t chunk) {
  const MaxGradArgs& p = *static_cast<const MaxGradArgs*>(args);
  int64_t lo = chunk * p.per_chunk, hi = std::min(p.windows, lo + p.per_chunk);
  if (!p.tile) {
    p.f64 ? general_windows<double>(p, lo, hi) : general_windows<float>(p, lo, hi);
    return;
  }
  bool v512 = p.avx512 && !p.f64 && (p.KW == 1 || p.KW == 2);
  for (int64_t a = lo; a < hi; ++a) {  // tile chunks count rows a
    if (v512) {
      p.KW == 1 ? tile_kw1_avx512(p, a) : tile_kw2_avx512(p, a);
      continue;
    }
    int64_t w = 0;
    if (p.avx2 && !p.f64) w = p.KW == 1 ? tile_kw1_avx2(p, a) : p.KW == 2 ? tile_kw2_avx2(p, a) : 0;
    p.f64 ? tile_rows_scalar<double>(p, a, w) : tile_rows_scalar<float>(p, a, w);
  }
}

void max_grad_launch(const void* args, ThreadPool& pool) {
  const MaxGradArgs& p = *static_cast<const MaxGradArgs*>(args);
  pool.run((p.windows + p.per_chunk - 1) / p.per_chunk, max_grad_chunk, args);
}
}  // namespace

Launch lower_reduce_max_grad(LowerCtx& c) {
  const Node& n = c.node;
  const Shape& is = c.in_shape(0);
  if (is.size() > size_t(kMaxRank)) throw Error("reduce_max_grad: rank " + std::to_string(is.size()) + " exceeds " +
                                                 std::to_string(kMaxRank));
  std::vector<int> axes = opdefs::reduce_axes(n, is);
  std::vector<bool> red(is.size(), false);
  for (int a : axes) red[size_t(a)] = true;
  auto* p = c.args<MaxGradArgs>();
  p->x = c.in[0], p->y = c.in[1], p->g = c.in[2], p->out = c.out;
  p->f64 = n.dtype == DType::F64;
  p->avx2 = active_isa() != Isa::Scalar;
  p->avx512 = active_isa() == Isa::Avx512;
  // Blocks of adjacent kept or reduced dimensions (size-1 dimensions dropped), outermost first.
  std::vector<std::pair<bool, int64_t>> blocks;
  for (size_t d = 0; d < is.size(); ++d) {
    if (is[d] == 1) continue;
    if (!blocks.empty() && blocks.back().first == red[d]) blocks.back().second *= is[d];
    else blocks.push_back({red[d], is[d]});
  }
  // The tile form [A, KH, W, KW]: kept, reduced, kept, reduced, any of them absent (size 1).
  std::vector<std::pair<bool, int64_t>> t = blocks;
  if (t.empty() || t.front().first) t.insert(t.begin(), {false, 1});
  if (t.back().first == false) t.push_back({true, 1});
  if (t.size() == 2) t.insert(t.begin() + 2, {{false, 1}, {true, 1}});
  p->tile = t.size() == 4;
  p->A = p->tile ? t[0].second : 0;
  p->KH = p->tile ? t[1].second : 0;
  p->W = p->tile ? t[2].second : 0;
  p->KW = p->tile ? t[3].second : 0;
  int64_t total = numel(is);
  // The reduced dimensions (the tile's KH and KW) and their x strides, first one outermost.
  std::vector<int64_t> rsize, rstride;
  if (p->tile) {
    rsize = {p->KH, p->KW}, rstride = {p->W * p->KW, 1};
    p->windows = p->A;  // chunks count rows a of W windows each
    int64_t per_row = std::max<int64_t>(1, p->KH * p->W * p->KW);
    p->per_chunk = std::max<int64_t>(1, (int64_t(1) << 14) / per_row);
    c.kernel = "max-grad-tile";
  } else {
    std::vector<int64_t> st(is.size(), 1);
    for (size_t d = is.size(); d-- > 1;) st[d - 1] = st[d] * is[d];
    p->n_kept = 0;
    for (size_t d = 0; d < is.size(); ++d) {
      if (red[d]) {
        rsize.push_back(is[d]), rstride.push_back(st[d]);
      } else {
        p->kept_size[p->n_kept] = is[d];
        p->kept_stride[p->n_kept++] = st[d];
      }
    }
    c.kernel = "max-grad";
  }
  p->nred = 1;
  for (int64_t s : rsize) p->nred *= s;
  auto* roff = static_cast<int64_t*>(c.storage.persistent(size_t(std::max<int64_t>(p->nred, 1)) * 8));
  for (int64_t r = 0; r < p->nred; ++r) {  // row-major over the reduced dimensions
    int64_t rest = r, off = 0;
    for (size_t k = rsize.size(); k-- > 0;) {
      off += rest % rsize[k] * rstride[k];
      rest /= rsize[k];
    }
    roff[r] = off;
  }
  p->roff = roff;
  if (!p->tile) {
    p->windows = p->nred > 0 ? total / p->nred : 0;
    p->per_chunk = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, p->nred));
  }
  if (total == 0) p->windows = 0;
  return {max_grad_launch, p, c.id};
}

}  // namespace synoros::kernels
