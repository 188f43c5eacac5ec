// Sum, max and mean over axes in a fixed order that depends only on the shape:
//  * reducing a trailing contiguous run: 8 interleaved lanes per 4096-element segment, lanes
//    combined pairwise, segments added in order;
//  * reducing a middle or leading run: sequential over the reduced index, vectorised across the
//    kept inner elements.
// Work is split over output rows only, so the thread count never changes a bit.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <immintrin.h>

#include "ir/op_defs.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/odometer.hpp"

namespace synoros::kernels {

namespace {
constexpr int64_t kSegment = 4096;
constexpr int64_t kRowsPerChunk = 64;

struct ReduceArgs {
  int64_t outer, r, inner;
  const void* in;
  void* out;
  int kind;  // 0 sum, 1 max, 2 mean
  bool f64;
  bool avx512;  // float column sums 32 at a time in two registers
};

template <class T>
T combine(T a, T b, int kind) {
  if (kind == 1) return (b > a || std::isnan(b)) ? b : a;
  return a + b;
}

template <class T>
T reduce_row(const T* x, int64_t r, int kind) {
  T total = kind == 1 ? -INFINITY : T(0);
  for (int64_t s0 = 0; s0 < r; s0 += kSegment) {
    int64_t len = std::min(kSegment, r - s0);
    const T* p = x + s0;
    T lane[8];
    for (int j = 0; j < 8; ++j) lane[j] = kind == 1 ? T(-INFINITY) : T(0);
    int64_t i = 0;
    if (kind == 1) {
      for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; ++j) lane[j] = combine(lane[j], p[i + j], 1);
    } else {
      for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; ++j) lane[j] += p[i + j];
    }
    for (int j = 0; i < len; ++i, ++j) lane[j] = combine(lane[j], p[i], kind);
    T seg = combine(combine(combine(lane[0], lane[1], kind), combine(lane[2], lane[3], kind), kind),
                    combine(combine(lane[4], lane[5], kind), combine(lane[6], lane[7], kind), kind),
                    kind);
    total = combine(total, seg, kind);
  }
  return total;
}

// Columns [0, w) of an r x stride block reduced down the rows, sequentially in the row index,
// accumulated in a local tile (registers when W is the fixed tile width) rather than through
// the output in memory.
constexpr int64_t kTile = 32;
constexpr int64_t kTiledInner = 512;  // longer rows stream through the output row instead
template <class T, int64_t W, int Kind>
void reduce_columns(const T* x, int64_t r, int64_t stride, int64_t w, T* y) {
  const int64_t n = W > 0 ? W : w;
  T acc[kTile];
  for (int64_t i = 0; i < n; ++i) acc[i] = Kind == 1 ? T(-INFINITY) : T(0);
  for (int64_t k = 0; k < r; ++k) {
    const T* xk = x + k * stride;
    for (int64_t i = 0; i < n; ++i) acc[i] = Kind == 1 ? combine(acc[i], xk[i], 1) : acc[i] + xk[i];
  }
  for (int64_t i = 0; i < n; ++i) y[i] = acc[i];
}

// reduce_columns' float sum, AVX-512: columns [0, w <= 32) in two masked registers, the same
// sequential order down the rows (a bias gradient's column sums over a small batch).
__attribute__((target("avx512f"))) void sum_columns_avx512(const float* x, int64_t r, int64_t stride, int64_t w,
                                                           float* y) {
  __mmask16 m0 = __mmask16(w >= 16 ? 0xFFFF : (1u << w) - 1);
  __mmask16 m1 = __mmask16(w >= 32 ? 0xFFFF : w <= 16 ? 0 : (1u << (w - 16)) - 1);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int64_t k = 0; k < r; ++k) {
    a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m0, x + k * stride));
    a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(m1, x + k * stride + 16));
  }
  _mm512_mask_storeu_ps(y, m0, a0);
  _mm512_mask_storeu_ps(y + 16, m1, a1);
}

// A float sum or mean tile on the AVX-512 path; false where the portable loops run.
template <class T>
bool sum_columns_vec(const ReduceArgs& a, const T* x, int64_t w, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (a.avx512 && a.kind != 1) {
      sum_columns_avx512(x, a.r, a.inner, w, y);
      return true;
    }
  }
  return false;
}

template <class T>
void reduce_chunk_t(const ReduceArgs& a, int64_t chunk) {
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  int64_t o0 = chunk * kRowsPerChunk, o1 = std::min(a.outer, o0 + kRowsPerChunk);
  T count = T(a.r);
  for (int64_t o = o0; o < o1; ++o) {
    if (a.inner == 1) {
      T v = reduce_row(x + o * a.r, a.r, a.kind);
      y[o] = a.kind == 2 ? v / count : v;
      continue;
    }
    T* yo = y + o * a.inner;
    const T* xo = x + o * a.r * a.inner;
    if (a.inner > kTiledInner) {  // long rows: stream them, accumulating in the (L1) output row
      for (int64_t i = 0; i < a.inner; ++i) yo[i] = a.kind == 1 ? T(-INFINITY) : T(0);
      for (int64_t k = 0; k < a.r; ++k) {
        const T* xk = xo + k * a.inner;
        if (a.kind == 1) {
          for (int64_t i = 0; i < a.inner; ++i) yo[i] = combine(yo[i], xk[i], 1);
        } else {
          for (int64_t i = 0; i < a.inner; ++i) yo[i] += xk[i];
        }
      }
      if (a.kind == 2)
        for (int64_t i = 0; i < a.inner; ++i) yo[i] = yo[i] / count;
      continue;
    }
    for (int64_t i0 = 0; i0 < a.inner; i0 += kTile) {
      int64_t w = std::min(kTile, a.inner - i0);
      if (sum_columns_vec(a, xo + i0, w, yo + i0)) {
        // summed; a mean divides below
      } else if (a.kind == 1) {
        w == kTile ? reduce_columns<T, kTile, 1>(xo + i0, a.r, a.inner, kTile, yo + i0)
                   : reduce_columns<T, 0, 1>(xo + i0, a.r, a.inner, w, yo + i0);
      } else if (w == kTile) {
        reduce_columns<T, kTile, 0>(xo + i0, a.r, a.inner, kTile, yo + i0);
      } else if (w == 16) {
        reduce_columns<T, 16, 0>(xo + i0, a.r, a.inner, 16, yo + i0);
      } else if (w == 8) {
        reduce_columns<T, 8, 0>(xo + i0, a.r, a.inner, 8, yo + i0);
      } else {
        reduce_columns<T, 0, 0>(xo + i0, a.r, a.inner, w, yo + i0);
      }
      if (a.kind == 2)
        for (int64_t i = 0; i < w; ++i) yo[i0 + i] = yo[i0 + i] / count;
    }
  }
}

void reduce_chunk(const void* p, int64_t chunk) {
  const ReduceArgs& a = *static_cast<const ReduceArgs*>(p);
  a.f64 ? reduce_chunk_t<double>(a, chunk) : reduce_chunk_t<float>(a, chunk);
}

void reduce_launch(const void* p, ThreadPool& pool) {
  const ReduceArgs& a = *static_cast<const ReduceArgs*>(p);
  pool.run((a.outer + kRowsPerChunk - 1) / kRowsPerChunk, reduce_chunk, p);
}
// Scattered axes with a short reduction (a pooling window): each output's r inputs are
// picked through an offset table into a row and reduced exactly as a gathered row would be.
constexpr int64_t kMaxShortReduce = 64;
constexpr int kMaxKept = 10;
struct ScatterArgs {
  int kept_rank;
  int64_t kept_shape[kMaxKept], kept_stride[kMaxKept];
  int64_t outer, r;
  const int64_t* roff;  // offsets of the r reduced elements, in reduced-index order
  const void* in;
  void* out;
  int kind;
  bool f64;
};

template <class T>
void scatter_chunk_t(const ScatterArgs& a, int64_t chunk) {
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  int64_t o0 = chunk * 1024, o1 = std::min(a.outer, o0 + 1024);
  int64_t idx[kMaxKept];
  unravel_index(o0, a.kept_rank, a.kept_shape, idx);
  T row[kMaxShortReduce];
  T count = T(a.r);
  int last = a.kept_rank - 1;
  for (int64_t o = o0; o < o1;) {
    int64_t base = 0;
    for (int d = 0; d < a.kept_rank; ++d) base += idx[d] * a.kept_stride[d];
    // Along the innermost kept axis the base only advances by its stride.
    int64_t run = std::min(a.kept_shape[last] - idx[last], o1 - o);
    if (a.r <= 8) {
      // reduce_row's lane tree for one short segment, over a tile of outputs along the run:
      // lanes gathered first, then combined output by output in the same tree (vectorisable).
      constexpr int64_t kTileOut = 64;
      T id = a.kind == 1 ? T(-INFINITY) : T(0);
      T l[8][kTileOut];
      int64_t ks = a.kept_stride[last];
      for (int64_t i0 = 0; i0 < run; i0 += kTileOut) {
        int64_t m = std::min(kTileOut, run - i0);
        const T* xb = x + base + i0 * ks;
        for (int j = 0; j < 8; ++j) {
          if constexpr (std::is_same_v<T, float>) {
            // A pooling window's adjacent pair (roff j, j + 1 one apart, outputs two apart):
            // both lanes from one contiguous stream, split into even and odd elements.
            if (ks == 2 && j + 1 < a.r && a.roff[j + 1] == a.roff[j] + 1) {
              const T* xj = xb + a.roff[j];
              int64_t i = 0;
              for (; i + 4 <= m; i += 4) {
                __m128 p = _mm_loadu_ps(xj + 2 * i), q = _mm_loadu_ps(xj + 2 * i + 4);
                _mm_storeu_ps(&l[j][i], _mm_shuffle_ps(p, q, _MM_SHUFFLE(2, 0, 2, 0)));
                _mm_storeu_ps(&l[j + 1][i], _mm_shuffle_ps(p, q, _MM_SHUFFLE(3, 1, 3, 1)));
              }
              for (; i < m; ++i) l[j][i] = xj[2 * i], l[j + 1][i] = xj[2 * i + 1];
              ++j;
              continue;
            }
          }
          if (j < a.r) {
            const T* xj = xb + a.roff[j];
            for (int64_t i = 0; i < m; ++i) l[j][i] = xj[i * ks];
          } else {
            for (int64_t i = 0; i < m; ++i) l[j][i] = id;
          }
        }
        T* yo = y + o + i0;
        if (a.kind == 1) {
          // combine(a, b, max) without branches, so the loop vectorises: b where b > a or b is NaN.
          auto mx = [](T p, T q) {
            bool t = (q > p) | (q != q);
            return t ? q : p;
          };
          int64_t i = 0;
          if constexpr (std::is_same_v<T, float>) {  // the same selection, four lanes at a time (SSE2)
            auto vmx = [](__m128 p, __m128 q) {
              __m128 t = _mm_or_ps(_mm_cmpgt_ps(q, p), _mm_cmpunord_ps(q, q));
              return _mm_or_ps(_mm_and_ps(t, q), _mm_andnot_ps(t, p));
            };
            __m128 vid = _mm_set1_ps(id);
            for (; i + 4 <= m; i += 4) {
              __m128 v[8];
              for (int j = 0; j < 8; ++j) v[j] = _mm_loadu_ps(&l[j][i]);
              __m128 t = vmx(vmx(vmx(v[0], v[1]), vmx(v[2], v[3])), vmx(vmx(v[4], v[5]), vmx(v[6], v[7])));
              _mm_storeu_ps(yo + i, vmx(vid, t));
            }
          }
          for (; i < m; ++i) {
            T s01 = mx(l[0][i], l[1][i]), s23 = mx(l[2][i], l[3][i]);
            T s45 = mx(l[4][i], l[5][i]), s67 = mx(l[6][i], l[7][i]);
            yo[i] = mx(id, mx(mx(s01, s23), mx(s45, s67)));
          }
        } else {
          for (int64_t i = 0; i < m; ++i) {
            T v = id + (((l[0][i] + l[1][i]) + (l[2][i] + l[3][i])) + ((l[4][i] + l[5][i]) + (l[6][i] + l[7][i])));
            yo[i] = a.kind == 2 ? v / count : v;
          }
        }
      }
      o += run;
      advance_index(run, a.kept_rank, a.kept_shape, idx);
      continue;
    }
    for (int64_t i = 0; i < run; ++i, base += a.kept_stride[last]) {
      T v;
      if (a.r <= 8) {  // reduce_row's lane tree for one short segment, written out
        T id = a.kind == 1 ? T(-INFINITY) : T(0), l[8];
        for (int j = 0; j < 8; ++j) l[j] = j < a.r ? combine(id, x[base + a.roff[j]], a.kind) : id;
        T seg = combine(combine(combine(l[0], l[1], a.kind), combine(l[2], l[3], a.kind), a.kind),
                        combine(combine(l[4], l[5], a.kind), combine(l[6], l[7], a.kind), a.kind), a.kind);
        v = combine(id, seg, a.kind);
      } else {
        for (int64_t k = 0; k < a.r; ++k) row[k] = x[base + a.roff[k]];
        v = reduce_row(row, a.r, a.kind);
      }
      y[o + i] = a.kind == 2 ? v / count : v;
    }
    o += run;
    advance_index(run, a.kept_rank, a.kept_shape, idx);
  }
}
void scatter_chunk(const void* p, int64_t chunk) {
  const ScatterArgs& a = *static_cast<const ScatterArgs*>(p);
  a.f64 ? scatter_chunk_t<double>(a, chunk) : scatter_chunk_t<float>(a, chunk);
}
void scatter_launch(const void* p, ThreadPool& pool) {
  const ScatterArgs& a = *static_cast<const ScatterArgs*>(p);
  pool.run((a.outer + 1023) / 1024, scatter_chunk, p);
}

// Sum, max or mean of 2x2 tiles: [rows, 2, wo, 2] -> [rows, wo] (a 2x2 pooling reshape reduced
// over its axes 3 and 5), row by row from contiguous input, with the scatter path's operations
// exactly: the window's elements in reduced-index order (kh, kw) as lanes 0..3 of the 8-lane
// tree, lanes 4..7 the identity. A max drops them (max(x, -inf) selects x, a NaN included); a
// sum keeps their + 0 (it turns -0 into +0), then id + tree, then / 4 for a mean.
struct Pool2Args {
  int64_t rows, wo;
  const void* in;
  void* out;
  int kind;
  bool f64;
};
template <class T>
void pool2_chunk_t(const Pool2Args& a, int64_t chunk) {
  auto mx = [](T p, T q) { return ((q > p) | (q != q)) ? q : p; };
  const T id = a.kind == 1 ? T(-INFINITY) : T(0);
  auto sum4 = [&](T l0, T l1, T l2, T l3) {
    T v = id + (((l0 + l1) + (l2 + l3)) + ((id + id) + (id + id)));
    return a.kind == 2 ? v / T(4) : v;
  };
  for (int64_t r = chunk * 64; r < std::min(a.rows, chunk * 64 + 64); ++r) {
    const T* x0 = static_cast<const T*>(a.in) + r * 4 * a.wo;
    const T* x1 = x0 + 2 * a.wo;
    T* y = static_cast<T*>(a.out) + r * a.wo;
    int64_t i = 0;
    if (a.kind != 1) {
      for (; i < a.wo; ++i) y[i] = sum4(x0[2 * i], x0[2 * i + 1], x1[2 * i], x1[2 * i + 1]);
      continue;
    }
    if constexpr (std::is_same_v<T, float>) {
      auto vmx = [](__m128 p, __m128 q) {
        __m128 t = _mm_or_ps(_mm_cmpgt_ps(q, p), _mm_cmpunord_ps(q, q));
        return _mm_or_ps(_mm_and_ps(t, q), _mm_andnot_ps(t, p));
      };
      __m128 vid = _mm_set1_ps(id);
      for (; i + 4 <= a.wo; i += 4) {
        __m128 p0 = _mm_loadu_ps(x0 + 2 * i), q0 = _mm_loadu_ps(x0 + 2 * i + 4);
        __m128 p1 = _mm_loadu_ps(x1 + 2 * i), q1 = _mm_loadu_ps(x1 + 2 * i + 4);
        __m128 s01 = vmx(_mm_shuffle_ps(p0, q0, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(p0, q0, _MM_SHUFFLE(3, 1, 3, 1)));
        __m128 s23 = vmx(_mm_shuffle_ps(p1, q1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(p1, q1, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm_storeu_ps(y + i, vmx(vid, vmx(s01, s23)));
      }
    }
    for (; i < a.wo; ++i) y[i] = mx(id, mx(mx(x0[2 * i], x0[2 * i + 1]), mx(x1[2 * i], x1[2 * i + 1])));
  }
}
void pool2_chunk(const void* p, int64_t chunk) {
  const Pool2Args& a = *static_cast<const Pool2Args*>(p);
  a.f64 ? pool2_chunk_t<double>(a, chunk) : pool2_chunk_t<float>(a, chunk);
}
void pool2_launch(const void* p, ThreadPool& pool) {
  pool.run((static_cast<const Pool2Args*>(p)->rows + 63) / 64, pool2_chunk, p);
}

// Sum or mean of [A, K, B] over A and B (a batch norm's statistics over N and H x W): each kept
// k's row is the virtual concatenation of x[a, k, :] over a, reduced exactly as reduce_row
// reduces a gathered row -- element t of the row goes to lane t % 8 of its 4096-element
// segment, in increasing t, segments added in order -- without gathering it first.
struct MiddleArgs {
  int64_t A, K, B, rows_per_chunk;
  const void* group;  // a fused elementwise prologue (lower_group's args) computing the input, or null
  const void* in;
  void* out;
  int kind;
  bool f64;
  bool avx2;
};
template <class T>
T tree8(const T* l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}
// Walks kept index k's row of [A, K, B] in that order: run(pos, n, t) for each piece
// [pos, pos + n) of the flat input holding row elements [t, t + n), no piece crossing a
// segment; flush() after each full segment and after the last partial one.
template <class Run, class Flush>
void walk_row(int64_t A, int64_t K, int64_t B, int64_t k, Run run, Flush flush) {
  int64_t t = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t off = 0; off < B;) {
      int64_t n = std::min(B - off, kSegment - t % kSegment);
      run((a * K + k) * B + off, n, t);
      t += n, off += n;
      if (t % kSegment == 0) flush();
    }
  if (t % kSegment != 0) flush();
}
// Row elements [t, t + n) (values q) into their lanes, t % 8 each, in increasing t.
// (Accumulated in a local copy: through the pointer the compiler would have to assume the lanes
// alias q and keep them in memory.)
//
// AVX2 (float): the 8 lanes are one register once t + i is a multiple of 8 (lane j then gets the
// element whose t % 8 is j), so each lane sees the same additions in the same order: the same
// bits. (Without it GCC built the generic loop for SSE2 with shuffles, at ~12 GB/s.)
__attribute__((target("avx2"))) void add_lanes_avx2(float* lanes, const float* q, int64_t n, int64_t t) {
  int64_t i = 0;
  for (; i < n && (t + i) % 8 != 0; ++i) lanes[(t + i) % 8] += q[i];
  __m256 l = _mm256_loadu_ps(lanes);
  for (; i + 8 <= n; i += 8) l = _mm256_add_ps(l, _mm256_loadu_ps(q + i));
  _mm256_storeu_ps(lanes, l);
  for (; i < n; ++i) lanes[(t + i) % 8] += q[i];
}
template <class T>
void add_lanes(T* lanes, const T* q, int64_t n, int64_t t, bool avx2 = false) {
  if constexpr (std::is_same_v<T, float>) {
    if (avx2) return add_lanes_avx2(lanes, q, n, t);
  }
  T lane[8];
  for (int j = 0; j < 8; ++j) lane[j] = lanes[j];
  int64_t i = 0;
  for (; i < n && (t + i) % 8 != 0; ++i) lane[(t + i) % 8] += q[i];
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += q[i + j];
  for (; i < n; ++i) lane[(t + i) % 8] += q[i];
  for (int j = 0; j < 8; ++j) lanes[j] = lane[j];
}
// Rows [k0, k0 + nk) together, piece by piece, each row's sum in walk_row's order. With a
// prologue, whole-row pieces of adjacent rows are adjacent in memory, so one group_eval call
// computes them all (on 7x7 images the per-row calls had cost more than the arithmetic).
constexpr int64_t kMaxGroupRows = 64;
template <class T>
void middle_rows_t(const MiddleArgs& m, int64_t k0, int64_t nk) {
  alignas(64) static thread_local T buf[kSegment];  // a run of the prologue's values
  const T* x = static_cast<const T*>(m.in);
  T lane[kMaxGroupRows][8] = {}, total[kMaxGroupRows] = {};
  walk_row(
      m.A, m.K, m.B, k0,
      [&](int64_t pos, int64_t n, int64_t t) {
        // with a prologue the input is never stored (x is null): evaluate it
        bool whole = m.group && n == m.B && nk * n <= kSegment;
        if (whole) group_eval(m.group, pos, pos + nk * n, buf);
        for (int64_t j = 0; j < nk; ++j, pos += m.B) {
          const T* q = buf + (whole ? j * n : 0);
          if (!m.group) q = x + pos;
          else if (!whole) group_eval(m.group, pos, pos + n, buf);
          add_lanes(lane[j], q, n, t, m.avx2);
        }
      },
      [&] {
        for (int64_t j = 0; j < nk; ++j) {
          total[j] = total[j] + tree8(lane[j]);
          for (T& l : lane[j]) l = T(0);
        }
      });
  for (int64_t j = 0; j < nk; ++j) static_cast<T*>(m.out)[k0 + j] = m.kind == 2 ? total[j] / T(m.A * m.B) : total[j];
}
void middle_chunk(const void* p, int64_t chunk) {
  const MiddleArgs& m = *static_cast<const MiddleArgs*>(p);
  int64_t end = std::min(m.K, (chunk + 1) * m.rows_per_chunk);
  int64_t group = std::clamp<int64_t>(kSegment / std::max<int64_t>(m.B, 1), 1, kMaxGroupRows);
  for (int64_t k = chunk * m.rows_per_chunk; k < end; k += group) {
    int64_t nk = std::min(group, end - k);
    m.f64 ? middle_rows_t<double>(m, k, nk) : middle_rows_t<float>(m, k, nk);
  }
}
void middle_launch(const void* p, ThreadPool& pool) {
  const MiddleArgs& m = *static_cast<const MiddleArgs*>(p);
  if (m.group) group_prepare(m.group);
  pool.run((m.K + m.rows_per_chunk - 1) / m.rows_per_chunk, middle_chunk, p);
}

// batchnorm_sums: per channel c, sum(g) and sum(g * xh) with xh = (x - mean[c]) * r[c] and
// r = 1 / sqrt(var + eps), in one pass over g and x: two rows of [N, C, inner] walked like the
// middle path's, so each sum has reduce_row's order; channels are the chunks.
struct BnSumsArgs {
  int64_t N, C, inner;
  const void *g, *x, *mean, *var;
  void* out;
  double eps;
  bool f64;
  bool avx2;
};
// One piece of a channel: l0 += g, l1 += g * ((x - m) * r), lane by lane as add_lanes.
__attribute__((target("avx2"))) void bn_piece_avx2(const float* g, const float* x, float m, float r, float* l0,
                                                   float* l1, int64_t n, int64_t t) {
  int64_t i = 0;
  for (; i < n && (t + i) % 8 != 0; ++i) l0[(t + i) % 8] += g[i], l1[(t + i) % 8] += g[i] * ((x[i] - m) * r);
  __m256 a = _mm256_loadu_ps(l0), b = _mm256_loadu_ps(l1), vm = _mm256_set1_ps(m), vr = _mm256_set1_ps(r);
  for (; i + 8 <= n; i += 8) {
    __m256 gv = _mm256_loadu_ps(g + i);
    a = _mm256_add_ps(a, gv);
    b = _mm256_add_ps(b, _mm256_mul_ps(gv, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr)));
  }
  _mm256_storeu_ps(l0, a);
  _mm256_storeu_ps(l1, b);
  for (; i < n; ++i) l0[(t + i) % 8] += g[i], l1[(t + i) % 8] += g[i] * ((x[i] - m) * r);
}
// Channels [c0, c0 + n) together, piece by piece (each channel's own sums in reduce_row's order):
// several streams in flight instead of one, whose restarts at every image's rows (a new page)
// had left the pass at about half the memory bandwidth.
constexpr int64_t kBnGroup = 4;
template <class T>
void bn_sums_channels(const BnSumsArgs& a, int64_t c0, int64_t nc) {
  alignas(64) static thread_local T gxh[kSegment];
  const T *g = static_cast<const T*>(a.g), *x = static_cast<const T*>(a.x);
  T m[kBnGroup], r[kBnGroup], l0[kBnGroup][8] = {}, l1[kBnGroup][8] = {}, t0[kBnGroup] = {}, t1[kBnGroup] = {};
  for (int64_t j = 0; j < nc; ++j) {
    m[j] = static_cast<const T*>(a.mean)[c0 + j];
    r[j] = T(1) / std::sqrt(static_cast<const T*>(a.var)[c0 + j] + T(a.eps));
  }
  walk_row(
      a.N, a.C, a.inner, c0,
      [&](int64_t pos, int64_t n, int64_t t) {
        for (int64_t j = 0; j < nc; ++j, pos += a.inner) {
          if constexpr (std::is_same_v<T, float>) {
            if (a.avx2) {
              bn_piece_avx2(g + pos, x + pos, m[j], r[j], l0[j], l1[j], n, t);
              continue;
            }
          }
          for (int64_t i = 0; i < n; ++i) gxh[i] = g[pos + i] * ((x[pos + i] - m[j]) * r[j]);
          add_lanes(l0[j], g + pos, n, t);
          add_lanes(l1[j], gxh, n, t);
        }
      },
      [&] {
        for (int64_t j = 0; j < nc; ++j) {
          t0[j] = t0[j] + tree8(l0[j]), t1[j] = t1[j] + tree8(l1[j]);
          for (int k = 0; k < 8; ++k) l0[j][k] = l1[j][k] = T(0);
        }
      });
  T* out = static_cast<T*>(a.out);
  for (int64_t j = 0; j < nc; ++j) out[c0 + j] = t0[j], out[a.C + c0 + j] = t1[j];
}
void bn_sums_chunk(const void* p, int64_t chunk) {
  const BnSumsArgs& a = *static_cast<const BnSumsArgs*>(p);
  int64_t c0 = chunk * kBnGroup, nc = std::min(kBnGroup, a.C - c0);
  a.f64 ? bn_sums_channels<double>(a, c0, nc) : bn_sums_channels<float>(a, c0, nc);
}
void bn_sums_launch(const void* p, ThreadPool& pool) {
  pool.run((static_cast<const BnSumsArgs*>(p)->C + kBnGroup - 1) / kBnGroup, bn_sums_chunk, p);
}

// [A, K, B] for a sum or mean whose reduced axes are a leading and a trailing block around the
// kept ones, or only trailing ones (A = 1): the reductions the middle path runs.
bool middle_form(const Node& n, const Shape& is, int64_t& A, int64_t& K, int64_t& B) {
  if (n.op != Op::Sum && n.op != Op::Mean) return false;
  std::vector<int> axes = opdefs::reduce_axes(n, is);
  if (axes.empty() || axes.back() != int(is.size()) - 1) return false;
  std::vector<bool> red(is.size(), false);
  for (int x : axes) red[size_t(x)] = true;
  size_t lead = 0, trail = 0;
  while (lead < is.size() && red[lead]) ++lead;
  while (trail < is.size() && red[is.size() - 1 - trail]) ++trail;
  if (lead == is.size()) lead = 0, trail = is.size();  // everything: one row
  if (lead + trail != axes.size()) return false;
  A = 1, K = 1, B = 1;
  for (size_t d = 0; d < is.size(); ++d) (d < lead ? A : d >= is.size() - trail ? B : K) *= is[d];
  return true;
}
}  // namespace

Launch lower_batchnorm_sums(LowerCtx& c) {
  const Shape& s = c.in_shape(0);
  auto* a = c.args<BnSumsArgs>();
  a->N = s[0], a->C = s[1], a->inner = 1;
  for (size_t d = 2; d < s.size(); ++d) a->inner *= s[d];
  a->g = c.in[0], a->x = c.in[1], a->mean = c.in[2], a->var = c.in[3];
  a->out = c.out;
  a->eps = c.node.attr<attr::Eps>().eps;
  a->f64 = c.node.dtype == DType::F64;
  a->avx2 = active_isa() >= Isa::Avx2;
  return {bn_sums_launch, a, c.id};
}

bool reduce_takes_prologue(const Graph& g, ValueId r) {
  const Node& n = g.node(r);
  if (n.in.size() != 1 || (n.dtype != DType::F32 && n.dtype != DType::F64) || g.dtype(n.in[0]) != n.dtype) return false;
  int64_t A, K, B;
  return middle_form(n, g.shape(n.in[0]), A, K, B);
}

Launch lower_reduce(LowerCtx& c) {
  const Node& n = c.node;
  const Shape& is = c.in_shape(0);
  std::vector<int> axes = opdefs::reduce_axes(n, is);
  std::vector<bool> red(is.size(), false);
  for (int x : axes) red[size_t(x)] = true;
  bool contiguous_block = axes.empty() || axes.back() - axes.front() + 1 == int(axes.size());
  auto* a = c.args<ReduceArgs>();
  a->kind = n.op == Op::Sum ? 0 : n.op == Op::ReduceMax ? 1 : 2;
  a->f64 = n.dtype == DType::F64;
  a->avx512 = active_isa() == Isa::Avx512;
  a->out = c.out;
  a->outer = 1, a->r = 1, a->inner = 1;
  if (contiguous_block && c.pro_members.empty()) {
    for (size_t d = 0; d < is.size(); ++d) {
      if (red[d]) a->r *= is[d];
      else if (axes.empty() || int(d) < axes.front()) a->outer *= is[d];
      else a->inner *= is[d];
    }
    a->in = c.in[0];
    return {reduce_launch, a, c.id};
  }
  // Reduced axes a leading and a trailing block around the kept ones: no gather. With a fused
  // prologue, trailing reductions run there too (the same order as reduce_row).
  int64_t A = 1, K = 1, B = 1;
  bool pro = !c.pro_members.empty();
  if ((pro || !contiguous_block) && middle_form(n, is, A, K, B)) {
    auto* m = c.args<MiddleArgs>();
    m->A = A, m->K = K, m->B = B;
    // At least a segment's work per chunk; short rows (B small) also in groups of up to 8 chunks'
    // worth, so middle_chunk can evaluate a prologue for several rows at once.
    m->rows_per_chunk = std::max(std::max<int64_t>(1, kSegment / std::max<int64_t>(1, A * B)),
                                 std::min(kSegment / std::max<int64_t>(1, B), (K + 7) / 8));
    m->group = pro ? lower_group(c.g, c.pro_members, c.pro_externals, c.pro_ptrs, nullptr, c.storage).args : nullptr;
    m->in = c.in[0], m->out = c.out, m->kind = a->kind, m->f64 = a->f64;
    m->avx2 = active_isa() >= Isa::Avx2;
    return {middle_launch, m, c.id};
  }
  if (pro) throw Error("reduce: a fused prologue on a reduction without the middle form");
  size_t rk = is.size();
  if (rk >= 3 && axes.size() == 2 && axes[0] == int(rk) - 3 && axes[1] == int(rk) - 1 &&
      is[rk - 3] == 2 && is[rk - 1] == 2 && numel(is) > 0) {
    auto* pa = c.args<Pool2Args>();
    pa->wo = is[rk - 2];
    pa->rows = numel(is) / (4 * pa->wo);
    pa->in = c.in[0], pa->out = c.out, pa->kind = a->kind, pa->f64 = a->f64;
    return {pool2_launch, pa, c.id};
  }
  auto strides = contiguous_strides(is);
  int64_t r_total = 1, kept = 0;
  for (size_t d = 0; d < is.size(); ++d) red[d] ? r_total *= is[d] : ++kept;
  if (r_total <= kMaxShortReduce && kept >= 1 && kept <= kMaxKept && numel(is) > 0) {
    auto* sa = c.args<ScatterArgs>();
    sa->kept_rank = 0;
    sa->outer = 1;
    for (size_t d = 0; d < is.size(); ++d)
      if (!red[d]) {
        sa->kept_shape[sa->kept_rank] = is[d];
        sa->kept_stride[sa->kept_rank++] = strides[d];
        sa->outer *= is[d];
      }
    sa->r = r_total;
    auto* roff = static_cast<int64_t*>(c.storage.persistent(size_t(r_total) * 8));
    for (int64_t k = 0; k < r_total; ++k) {  // reduced index k, last reduced axis fastest
      int64_t rem = k, off = 0;
      for (size_t d = is.size(); d-- > 0;)
        if (red[d]) off += (rem % is[d]) * strides[d], rem /= is[d];
      roff[k] = off;
    }
    sa->roff = roff;
    sa->in = c.in[0];
    sa->out = c.out;
    sa->kind = a->kind;
    sa->f64 = a->f64;
    return {scatter_launch, sa, c.id};
  }
  // Scattered axes: gather the input with reduced axes moved last, then reduce rows.
  GatherSpec g;
  auto cs = contiguous_strides(is);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t d = 0; d < is.size(); ++d)
      if (red[d] == (pass == 1)) {
        g.shape.push_back(is[d]);
        g.stride.push_back(cs[d]);
        if (pass == 1) a->r *= is[d];
        else a->outer *= is[d];
      }
  g.cstride.assign(g.shape.size(), 0);
  size_t es = dtype_size(n.dtype);
  void* tmp = c.storage.scratch(size_t(numel(is)) * es);
  a->in = tmp;
  return sequence(c.storage, make_gather(c, g, c.in[0], tmp, es), {reduce_launch, a, c.id}, c.id);
}

}  // namespace synoros::kernels
