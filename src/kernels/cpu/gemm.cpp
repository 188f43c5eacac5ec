#include "kernels/cpu/gemm.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace synoros::kernels {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t kMaxMR = 16;
constexpr int64_t kMR512 = 14, kNR512 = 32;  // the AVX-512 tile

// Packed layouts of one K block [k0, k0 + kc): A panel p holds rows [p*MR, p*MR+MR) as
// [kc][MR] (the two last may share their rows evenly, see panel_rows); B panel q holds columns
// [q*NR, q*NR+NR) as [kc][NR]. Out-of-range rows and columns are zero.
// GCC 12's AVX-512 shuffle intrinsics start from _mm512_undefined_ps(), which its
// -Wmaybe-uninitialized and -Wuninitialized report as a use of an uninitialised value (a false
// positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// Transposes 16 rows of 16 floats in registers: t[k] holds element k of every row.
__attribute__((target("avx512f"))) inline void transpose16_avx512(const __m512* r, __m512* t) {
  __m512 a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // b[i + e] holds, per 128-bit lane L, rows i..i+3 at k = 4L + e
    b[i] = _mm512_shuffle_ps(a[i], a[i + 2], 0x44);
    b[i + 1] = _mm512_shuffle_ps(a[i], a[i + 2], 0xEE);
    b[i + 2] = _mm512_shuffle_ps(a[i + 1], a[i + 3], 0x44);
    b[i + 3] = _mm512_shuffle_ps(a[i + 1], a[i + 3], 0xEE);
  }
  for (int e = 0; e < 4; ++e) {
    __m512 c02 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0x88), d02 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0x88);
    __m512 c13 = _mm512_shuffle_f32x4(b[e], b[4 + e], 0xDD), d13 = _mm512_shuffle_f32x4(b[8 + e], b[12 + e], 0xDD);
    t[e] = _mm512_shuffle_f32x4(c02, d02, 0x88);
    t[8 + e] = _mm512_shuffle_f32x4(c02, d02, 0xDD);
    t[4 + e] = _mm512_shuffle_f32x4(c13, d13, 0x88);
    t[12 + e] = _mm512_shuffle_f32x4(c13, d13, 0xDD);
  }
}

// Packs 16 k at a time for a full AVX-512 panel of 14 rows with row-major A: 16 x 16 register
// transpose (rows 14 and 15 zero), then each k's 14 values stored contiguously. Returns the k
// packed.
__attribute__((target("avx512f"))) int64_t pack_a_panel_avx512(const float* const* src, int64_t kc,
                                                                float* dst) {
  int64_t kk = 0;
  for (; kk + 16 <= kc; kk += 16) {
    __m512 r[16], t[16];
    for (int i = 0; i < 14; ++i) r[i] = _mm512_loadu_ps(src[i] + kk);
    r[14] = r[15] = _mm512_setzero_ps();
    transpose16_avx512(r, t);
    for (int k = 0; k < 16; ++k) _mm512_mask_storeu_ps(dst + (kk + k) * 14, 0x3FFF, t[k]);
  }
  return kk;
}

// The AVX-512 B panel of 32 columns from B stored transposed (column n at S + n * ld, k
// contiguous): 16 k at a time, each half of the panel a 16 x 16 register transpose (columns past
// `cols` zero). Returns the k packed.
__attribute__((target("avx512f"))) int64_t pack_b_transposed_avx512(const float* S, int64_t ld, int64_t cols,
                                                                     int64_t kc, float* dst) {
  int64_t kk = 0;
  for (; kk + 16 <= kc; kk += 16)
    for (int64_t h = 0; h < 2; ++h) {
      __m512 r[16], t[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = 16 * h + i < cols ? _mm512_loadu_ps(S + (16 * h + i) * ld + kk) : _mm512_setzero_ps();
      transpose16_avx512(r, t);
      for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + (kk + k) * 32 + 16 * h, t[k]);
    }
  return kk;
}
#pragma GCC diagnostic pop

// The rows of A panel p: [m0, m0 + rows). Every panel holds mr rows but the last, except that
// on AVX-512 a last panel of fewer than kEvenEdge rows shares the rows of the two last panels
// evenly (14 + 2 as 8 + 8): a 2-row tile has four FMA chains, bound by their latency, and runs at
// half speed (128 x 768 x 768, B packed ahead: 211-213 to 215-216 GFLOP/s; 128 x 384 x 1152:
// 186-193 to 189-195). Each element of C keeps its one chain, so the bits do not depend on the split.
constexpr int64_t kEvenEdge = 4;
struct PanelRows {
  int64_t m0, rows;
};
PanelRows panel_rows(int64_t M, int64_t p, int64_t mr) {
  const int64_t mp = ceil_div(M, mr), edge = M - (mp - 1) * mr;
  if (mr != kMR512 || mp < 2 || edge >= kEvenEdge || p < mp - 2) return {p * mr, std::min(mr, M - p * mr)};
  const int64_t m0 = (mp - 2) * mr, both = mr + edge, first = (both + 1) / 2;
  return p == mp - 2 ? PanelRows{m0, first} : PanelRows{m0 + first, both - first};
}
// The panels before the first that holds fewer than mr rows.
int64_t full_panels(int64_t M, int64_t mr) {
  const int64_t mp = ceil_div(M, mr);
  return mp >= 2 && panel_rows(M, mp - 2, mr).rows < mr ? mp - 2 : M / mr;
}

void pack_a_panel(const GemmShape& s, const float* A, int64_t p, int64_t k0, int64_t kc, int64_t mr,
                  float* dst) {
  const auto [m0, rows] = panel_rows(s.M, p, mr);
  if (s.a_rs == 1 && s.a_cs != 1) {  // A stored transposed (a weight gradient's X^T): each packed column is a run of A
    const float* col = A + m0 + k0 * s.a_cs;
    for (int64_t kk = 0; kk < kc; ++kk, dst += mr, col += s.a_cs) {
      int64_t i = 0;
      for (; i < rows; ++i) dst[i] = col[i];
      for (; i < mr; ++i) dst[i] = 0.f;
    }
    return;
  }
  const float* src[kMaxMR];
  for (int64_t i = 0; i < rows; ++i) src[i] = A + (m0 + i) * s.a_rs + k0 * s.a_cs;
  if (s.a_cs == 1 && rows == mr) {
    if (mr == kMR512) {  // only the AVX-512 path uses 14-row panels
      int64_t done = pack_a_panel_avx512(src, kc, dst);
      for (int64_t i = 0; i < mr; ++i) src[i] += done;
      dst += done * mr;
      kc -= done;
    }
    // Along k, writing each packed column contiguously: mr read streams, one write stream.
    for (int64_t kk = 0; kk < kc; ++kk, dst += mr)
      for (int64_t i = 0; i < mr; ++i) dst[i] = src[i][kk];
    return;
  }
  for (int64_t kk = 0; kk < kc; ++kk, dst += mr) {
    int64_t i = 0;
    for (; i < rows; ++i) dst[i] = src[i][kk * s.a_cs];
    for (; i < mr; ++i) dst[i] = 0.f;
  }
}

// One B panel from a B with strided columns, element by element (contiguous rows: pack_b_rows).
void pack_b_panel(const GemmShape& s, const float* B, int64_t q, int64_t k0, int64_t kc, int64_t nr,
                  float* dst) {
  int64_t n0 = q * nr, cols = std::min(nr, s.N - n0);
  for (int64_t kk = 0; kk < kc; ++kk) {
    int64_t k = k0 + kk;
    float* d = dst + kk * nr;
    const float* src = B + k * s.b_rs + n0 * s.b_cs;
    int64_t j = 0;
    for (; j < cols; ++j) d[j] = src[j * s.b_cs];
    for (; j < nr; ++j) d[j] = 0.f;
  }
}

// C tile [MR][NR] at c (row stride ldc) = (load ? C : 0) + a[kc][MR] x b[kc][NR], continuing
// each element's FMA chain from the value stored in C.
void micro_scalar(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool load) {
  float acc[kGemmMR * kGemmNR];
  for (int64_t i = 0; i < kGemmMR; ++i)
    for (int64_t j = 0; j < kGemmNR; ++j) acc[i * kGemmNR + j] = load ? c[i * ldc + j] : 0.f;
  for (int64_t k = 0; k < kc; ++k)
    for (int64_t i = 0; i < kGemmMR; ++i)
      for (int64_t j = 0; j < kGemmNR; ++j)
        acc[i * kGemmNR + j] = std::fma(a[k * kGemmMR + i], b[k * kGemmNR + j], acc[i * kGemmNR + j]);
  for (int64_t i = 0; i < kGemmMR; ++i)
    for (int64_t j = 0; j < kGemmNR; ++j) c[i * ldc + j] = acc[i * kGemmNR + j];
}

// What a tile fetches into L2 between its FMAs (none when row is null): `events` times, one every
// `every` k steps, the two lines (128 bytes) at row + done * 128; after `run` of them the source's
// next row, `stride` bytes on. A packed panel is one row; a B read from its own rows is one per k.
struct Fetch {
  const char* row = nullptr;
  int64_t every = 1, events = 0, run = 1, stride = 0, done = 0;
};

// AVX-512: a 14 x 32 tile in 28 zmm accumulators; A broadcast straight from memory, from the
// packed panel ([kc][14]) or, with Rows, from A's own rows (a[i * lda + k]): a row-major A needs
// no packing (its 16 x 16 transposes had cost 6% of a 512^3 product).
// R < 14: the first R rows only (an edge panel, still packed 14 wide), so its FMAs are all
// useful work. With Fetches, the lines f names are fetched between the FMAs.
template <bool Rows, int R = kMR512, bool Fetches = false>
__attribute__((target("avx512f,fma"))) void micro_avx512_t(int64_t kc, const float* a, int64_t lda, const float* b,
                                                            float* c, int64_t ldc, bool load,
                                                            const Fetch* f = nullptr) {
  // The fetch state in registers, read field by field (a copy of the struct read back 16 bytes at
  // a time from 8-byte stores misses store forwarding, which waits for the last tile's C stores).
  const char* row = Fetches ? f->row : nullptr;
  const int64_t every = Fetches ? f->every : 1, run = Fetches ? f->run : 1, stride = Fetches ? f->stride : 0;
  int64_t events = Fetches ? f->events : 0, done = Fetches ? f->done : 0;
  __m512 c0[R], c1[R];
  if (load) {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      c0[i] = _mm512_loadu_ps(c + i * ldc);
      c1[i] = _mm512_loadu_ps(c + i * ldc + 16);
    }
  } else {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) c0[i] = _mm512_setzero_ps(), c1[i] = _mm512_setzero_ps();
  }
  int64_t left = every;
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    if (Fetches && --left == 0) {
      left = every;
      if (events > 0) {
        const char* p = row + done * 128;
        _mm_prefetch(p, _MM_HINT_T1);
        _mm_prefetch(p + 64, _MM_HINT_T1);
        --events;
        if (++done == run) done = 0, row += stride;
      }
    }
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      __m512 x = _mm512_set1_ps(Rows ? a[i * lda] : a[i]);
      c0[i] = _mm512_fmadd_ps(x, b0, c0[i]);
      c1[i] = _mm512_fmadd_ps(x, b1, c1[i]);
    }
    a += Rows ? 1 : kMR512;
    b += kNR512;
  }
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    _mm512_storeu_ps(c + i * ldc, c0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, c1[i]);
  }
}

void micro_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool load) {
  micro_avx512_t<false>(kc, a, 0, b, c, ldc, load);
}
// The first `rows` (< 14) rows of a packed panel's tile.
void micro_avx512_edge(int64_t rows, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool load) {
  switch (rows) {
#define SYNOROS_EDGE(R) \
  case R: return micro_avx512_t<false, R>(kc, a, 0, b, c, ldc, load);
    SYNOROS_EDGE(1) SYNOROS_EDGE(2) SYNOROS_EDGE(3) SYNOROS_EDGE(4) SYNOROS_EDGE(5) SYNOROS_EDGE(6) SYNOROS_EDGE(7)
    SYNOROS_EDGE(8) SYNOROS_EDGE(9) SYNOROS_EDGE(10) SYNOROS_EDGE(11) SYNOROS_EDGE(12) SYNOROS_EDGE(13)
#undef SYNOROS_EDGE
    default: return micro_avx512(kc, a, b, c, ldc, load);
  }
}

__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const float* a, const float* b,
                                                     float* c, int64_t ldc, bool load) {
  __m256 c0[kGemmMR], c1[kGemmMR];
#pragma GCC unroll 6
  for (int i = 0; i < kGemmMR; ++i) {
    c0[i] = load ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    c1[i] = load ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kGemmMR; ++i) {
      __m256 x = _mm256_broadcast_ss(a + i);
      c0[i] = _mm256_fmadd_ps(x, b0, c0[i]);
      c1[i] = _mm256_fmadd_ps(x, b1, c1[i]);
    }
    a += kGemmMR;
    b += kGemmNR;
  }
#pragma GCC unroll 6
  for (int i = 0; i < kGemmMR; ++i) {
    _mm256_storeu_ps(c + i * ldc, c0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, c1[i]);
  }
}

// ---- small problems: no packing of A (broadcast loads work at any stride) and B read in place
// when its rows are contiguous. Same FMA chain per element as the packed path.
__attribute__((target("avx2,fma"))) __m256i tail_mask(int64_t n) {
  alignas(32) static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  n = n < 0 ? 0 : (n > 8 ? 8 : n);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 - n));
}

template <bool FULL>
__attribute__((target("avx2,fma"), always_inline)) inline __m256 load_cols(const float* p, __m256i m) {
  if constexpr (FULL) return _mm256_loadu_ps(p);
  return _mm256_maskload_ps(p, m);
}

// FULL: all 16 columns of the block exist, so B and C move with plain loads and stores (masked
// ones cost several times as much on some CPUs); else the edge block's masks.
template <int R, bool FULL>
__attribute__((target("avx2,fma"))) void small_block(int64_t K, const float* A, int64_t a_rs,
                                                     int64_t a_cs, const float* B, int64_t ldb,
                                                     float* C, int64_t c_rs, int64_t cols, bool accumulate) {
  __m256i m0 = tail_mask(cols), m1 = tail_mask(cols - 8);
  __m256 c0[R], c1[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) c0[i] = _mm256_setzero_ps(), c1[i] = _mm256_setzero_ps();
  if (accumulate)  // continue the chains stored in C
    for (int i = 0; i < R; ++i) {
      c0[i] = load_cols<FULL>(C + i * c_rs, m0);
      if (cols > 8) c1[i] = load_cols<FULL>(C + i * c_rs + 8, m1);
    }
  if (cols > 8) {
    for (int64_t k = 0; k < K; ++k) {
      __m256 b0 = load_cols<FULL>(B + k * ldb, m0), b1 = load_cols<FULL>(B + k * ldb + 8, m1);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        __m256 a = _mm256_broadcast_ss(A + i * a_rs + k * a_cs);
        c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
        c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
      }
    }
  } else {
    for (int64_t k = 0; k < K; ++k) {
      __m256 b0 = load_cols<FULL>(B + k * ldb, m0);
      for (int i = 0; i < R; ++i)
        c0[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(A + i * a_rs + k * a_cs), b0, c0[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    if (FULL) {
      _mm256_storeu_ps(C + i * c_rs, c0[i]);
      _mm256_storeu_ps(C + i * c_rs + 8, c1[i]);
    } else {
      _mm256_maskstore_ps(C + i * c_rs, m0, c0[i]);
      if (cols > 8) _mm256_maskstore_ps(C + i * c_rs + 8, m1, c1[i]);
    }
  }
}

template <int R>
__attribute__((target("avx2,fma"))) void small_rows(int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                                                    const float* B, int64_t ldb, float* C, int64_t c_rs,
                                                    int64_t cols, bool acc) {
  if (cols == 16) return small_block<R, true>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, acc);
  small_block<R, false>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, acc);
}

// One row of A (1 x K times K x N): 64 columns per block, eight independent chains per k (a
// 16-column block would leave two chains waiting on FMA latency).
__attribute__((target("avx2,fma"))) void row_block64(int64_t K, const float* a, int64_t a_cs, const float* B,
                                                     int64_t ldb, float* C, bool accumulate) {
  __m256 c[8];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) c[v] = accumulate ? _mm256_loadu_ps(C + 8 * v) : _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 av = _mm256_broadcast_ss(a + k * a_cs);
    const float* b = B + k * ldb;
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) c[v] = _mm256_fmadd_ps(av, _mm256_loadu_ps(b + 8 * v), c[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) _mm256_storeu_ps(C + 8 * v, c[v]);
}

// r[j] = column j of the 8 x 8 block whose rows are r[0..7].
__attribute__((target("avx2"), always_inline)) inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Columns k0..k0+7 of 8 rows of A (row stride lda) into their chains y.
__attribute__((target("avx2,fma"), always_inline)) inline void matvec_block(const float* A, int64_t lda,
                                                                            const float* x, int64_t incx,
                                                                            int64_t k0, __m256& y) {
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(A + i * lda + k0);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm_prefetch(reinterpret_cast<const char*>(A + i * lda + k0 + 128), _MM_HINT_T0);
  transpose8(r);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) y = _mm256_fmadd_ps(r[j], _mm256_broadcast_ss(x + (k0 + j) * incx), y);
}

// A matrix times a vector (N = 1, A row-major): 8 rows per vector, G vectors (8G chains) in
// flight; each 8 x 8 block of A is transposed in registers so a column of 8 rows is one FMA
// operand. Each output is still one FMA chain in ascending k. next: the following 8G rows (same
// stride), fetched into L2 while these are computed (null: none). Read k-major, 8G rows are 8G
// short streams that the hardware prefetcher follows poorly (a 16384 x 768 matrix times a vector
// from memory ran at 10 GB/s, against 47 GB/s from L2).
template <int G>
__attribute__((target("avx2,fma"))) void matvec_rows(int64_t K, const float* A, int64_t lda, const float* x,
                                                     int64_t incx, float* C, int64_t ldc, bool accumulate,
                                                     const float* next = nullptr) {
  __m256 y[G];
  alignas(32) float t[8];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    if (accumulate) {
      for (int i = 0; i < 8; ++i) t[i] = C[(8 * g + i) * ldc];
      y[g] = _mm256_load_ps(t);
    } else {
      y[g] = _mm256_setzero_ps();
    }
  }
  int64_t k = 0;
  // Sixteen columns (a cache line of each row when A is 64-byte aligned) per group before the next
  // group: rows a power of two apart share a few L1 sets, and 8G rows' lines visited half at a
  // time were evicted between their halves (512 x 512 times a vector: 43 us, every load from L2).
  // Each block prefetches its rows 128 columns (eight lines) ahead.
  for (; k + 16 <= K; k += 16) {
    if (next)
      for (int i = 0; i < 8 * G; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + i * lda + k), _MM_HINT_T1);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      matvec_block(A + 8 * g * lda, lda, x, incx, k, y[g]);
      matvec_block(A + 8 * g * lda, lda, x, incx, k + 8, y[g]);
    }
  }
  for (; k + 8 <= K; k += 8)
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) matvec_block(A + 8 * g * lda, lda, x, incx, k, y[g]);
  for (; k < K; ++k)
    for (int g = 0; g < G; ++g) {
      for (int i = 0; i < 8; ++i) t[i] = A[(8 * g + i) * lda + k];
      y[g] = _mm256_fmadd_ps(_mm256_load_ps(t), _mm256_broadcast_ss(x + k * incx), y[g]);
    }
  for (int g = 0; g < G; ++g) {
    _mm256_store_ps(t, y[g]);
    for (int i = 0; i < 8; ++i) C[(8 * g + i) * ldc] = t[i];
  }
}

// rows_after: rows of A past s.M that may be fetched ahead (the next task's).
__attribute__((target("avx2,fma"))) void small_matvec_avx2(const GemmShape& s, const float* A, const float* x,
                                                           int64_t incx, float* C, bool accumulate,
                                                           int64_t rows_after = 0) {
  int64_t m = 0;
  for (; m + 32 <= s.M; m += 32)
    matvec_rows<4>(s.K, A + m * s.a_rs, s.a_rs, x, incx, C + m * s.c_rs, s.c_rs, accumulate,
                   m + 64 <= s.M + rows_after ? A + (m + 32) * s.a_rs : nullptr);
  for (; m + 8 <= s.M; m += 8) matvec_rows<1>(s.K, A + m * s.a_rs, s.a_rs, x, incx, C + m * s.c_rs, s.c_rs, accumulate);
  for (; m < s.M; ++m) {  // the last rows: the same chain, one FMA (one rounding) at a time
    float acc = accumulate ? C[m * s.c_rs] : 0.0f;
    for (int64_t k = 0; k < s.K; ++k) acc = std::fma(A[m * s.a_rs + k], x[k * incx], acc);
    C[m * s.c_rs] = acc;
  }
}

// One row of A times a large B (a decoding step's projections and output head): B is streamed
// once in place, never packed or transposed, and the columns are cut into chunks of a fixed size
// that the pool shares out. Each output is still one FMA chain in ascending k.
struct RowJob {
  const GemmShape* s;
  const float* A;
  const float* B;
  float* C;
  bool accumulate;
  int64_t chunk = 256;  // columns per task (a multiple of 64)
  int isa = 1;
};
constexpr int64_t kRowChunk = 256;

// Columns [n, n1) of one row of C from one row of A (B rows contiguous): 8 columns at a time, then
// one at a time.
__attribute__((target("avx2,fma"))) void row_columns(const GemmShape& s, const float* a, const float* B, float* C,
                                                     int64_t n, int64_t n1, bool accumulate) {
  for (; n + 8 <= n1; n += 8) {
    __m256 c = accumulate ? _mm256_loadu_ps(C + n) : _mm256_setzero_ps();
    for (int64_t k = 0; k < s.K; ++k)
      c = _mm256_fmadd_ps(_mm256_broadcast_ss(a + k * s.a_cs), _mm256_loadu_ps(B + k * s.b_rs + n), c);
    _mm256_storeu_ps(C + n, c);
  }
  for (; n < n1; ++n) {
    float acc = accumulate ? C[n] : 0.0f;
    for (int64_t k = 0; k < s.K; ++k) acc = std::fma(a[k * s.a_cs], B[k * s.b_rs + n], acc);
    C[n] = acc;
  }
}

// Columns per task of the few-row products: as few tasks as keep every thread busy (four per
// thread), at least kRowChunk, a multiple of 64; each task reads its columns of B as one run per
// row. The split changes no output's chain.
int64_t row_task_columns(int64_t N, const ThreadPool& pool) {
  return std::max<int64_t>(kRowChunk, ceil_div(ceil_div(N, 4 * int64_t(pool.size())), 64) * 64);
}

// One row of A times B with contiguous rows, AVX-512, one thread: B read row after row, the row of
// C (at most kRowSeqCols columns per task) held in L1 between rows. Each row of B is then one run,
// and the product one stream through memory that the hardware prefetcher follows, where the AVX2
// 64-column blocks over bands of 16 rows read 16 short streams. A decoding step's 48 projections
// of gpt2-98m (340 MB) on an AMD EPYC, one thread: 21-22 GB/s in blocks, 30-33 this way; from
// cache (1 x 768 x 3072) 67 to 97-106 GB/s. Two threads, each streaming half of every row, read
// 24-28 GB/s against the blocks' 31, so several threads keep the blocks. Each output is one FMA
// chain in ascending k from +0 (or C), as on the other paths.
constexpr int64_t kRowSeqCols = 4096;  // 16 KB of C, within every L1
__attribute__((target("avx512f,fma"))) void row_seq_chunk(const void* p, int64_t chunk) {
  const RowJob& j = *static_cast<const RowJob*>(p);
  const GemmShape& s = *j.s;
  const int64_t n0 = chunk * j.chunk, n1 = std::min(s.N, n0 + j.chunk), w64 = n0 + (n1 - n0) / 64 * 64,
                w16 = w64 + (n1 - w64) / 16 * 16;
  float* C = j.C;
  if (!j.accumulate) std::memset(C + n0, 0, size_t(n1 - n0) * sizeof(float));
  for (int64_t k = 0; k < s.K; ++k) {
    const float ak = j.A[k * s.a_cs];
    const __m512 a = _mm512_set1_ps(ak);
    const float* b = j.B + k * s.b_rs;
    for (int64_t n = n0; n < w64; n += 64) {
      const __m512 c0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + n), _mm512_loadu_ps(C + n));
      const __m512 c1 = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + n + 16), _mm512_loadu_ps(C + n + 16));
      const __m512 c2 = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + n + 32), _mm512_loadu_ps(C + n + 32));
      const __m512 c3 = _mm512_fmadd_ps(a, _mm512_loadu_ps(b + n + 48), _mm512_loadu_ps(C + n + 48));
      _mm512_storeu_ps(C + n, c0);
      _mm512_storeu_ps(C + n + 16, c1);
      _mm512_storeu_ps(C + n + 32, c2);
      _mm512_storeu_ps(C + n + 48, c3);
    }
    for (int64_t n = w64; n < w16; n += 16)
      _mm512_storeu_ps(C + n, _mm512_fmadd_ps(a, _mm512_loadu_ps(b + n), _mm512_loadu_ps(C + n)));
    for (int64_t n = w16; n < n1; ++n) C[n] = std::fma(ak, b[n], C[n]);
  }
}

// One row of A times B stored transposed (B rows are n): a matrix-vector product over those rows.
// (B with contiguous rows goes through rows_times_matrix_chunk, one row being a few, or on one
// AVX-512 thread through row_seq_chunk.)
__attribute__((target("avx2,fma"))) void row_times_transposed_chunk(const void* p, int64_t chunk) {
  const RowJob& j = *static_cast<const RowJob*>(p);
  const GemmShape& s = *j.s;
  const int64_t n0 = chunk * kRowChunk, n1 = std::min(s.N, n0 + kRowChunk);
  GemmShape mv{n1 - n0, 1, s.K, s.b_cs, 1, s.a_cs, 1, 1};
  small_matvec_avx2(mv, j.B + n0 * s.b_cs, j.A, s.a_cs, j.C + n0, j.accumulate, s.N - n1);
}

// One or a few rows of A times a large B with contiguous rows (decoding), when B is not packed
// ahead (see few_packed_chunk): B is streamed once in place, row by row across the task's columns
// in bands of kFewK rows (kFewBandK with AVX-512 and several rows; streams the prefetcher
// follows), each 64-column block used by every row of A while it sits in L1. Each row's chains
// continue from C between k blocks, so every output is still one FMA chain in ascending k.
constexpr int64_t kFewRows = 8, kFewK = 16;
constexpr int64_t kFewPrefetch = 16;  // blocks of B fetched ahead (their rows are short streams)
// With AVX-512 and several rows of A, bands of 64 rows of B: the rows' chains are loaded from and
// stored to C a quarter as often, and each row of the band is a longer run in one page. The
// block kFewAhead blocks on is fetched a row per k step, between the FMAs, rather than in one
// burst before them (a burst of 64 fetches stalls the loads behind it). On an AVX-512 Xeon, eight
// rows times sixteen 768 x 3072 weights in turn (150 MB, partly in that VM's 300 MiB cache):
// 19.0 GB/s in bands of 16 with bursts, 23.5 with these.
constexpr int64_t kFewBandK = 64, kFewAhead = 8;
static_assert(kFewRows == 8, "rows_times_transposed_chunk instantiates 2 .. 8 rows");

// R rows of A times 64 columns of B over K rows with AVX-512: each B vector loaded once serves R
// rows (4R chains), where row_block64 loads it once per row. The same chains, in the same
// order, so the same bits.
// ahead (when not null): a block of B (same ldb) whose row k is fetched at step k.
template <int R>
__attribute__((target("avx512f,fma"))) void rows_block64_avx512(int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                                                                const float* B, int64_t ldb, float* C, int64_t c_rs,
                                                                bool accumulate, const float* ahead) {
  __m512 c[R][4];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) c[r][v] = accumulate ? _mm512_loadu_ps(C + r * c_rs + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    if (ahead != nullptr) {
      const char* f = reinterpret_cast<const char*>(ahead + k * ldb);
      _mm_prefetch(f, _MM_HINT_T1);
      _mm_prefetch(f + 64, _MM_HINT_T1);
      _mm_prefetch(f + 128, _MM_HINT_T1);
      _mm_prefetch(f + 192, _MM_HINT_T1);
    }
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32),
                 b3 = _mm512_loadu_ps(b + 48);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * a_rs + k * a_cs]);
      c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
      c[r][2] = _mm512_fmadd_ps(a, b2, c[r][2]);
      c[r][3] = _mm512_fmadd_ps(a, b3, c[r][3]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(C + r * c_rs + 16 * v, c[r][v]);
}

// Rows 0 .. M - 1 of A times one K x 64 block of B (AVX-512: four rows at a time); the first
// four rows' pass fetches `ahead`'s rows.
void few_rows_block64_avx512(int64_t M, int64_t K, const float* A, int64_t a_rs, int64_t a_cs, const float* B,
                             int64_t ldb, float* C, int64_t c_rs, bool accumulate, const float* ahead) {
  int64_t m = 0;
  for (; m + 4 <= M; m += 4, ahead = nullptr)
    rows_block64_avx512<4>(K, A + m * a_rs, a_rs, a_cs, B, ldb, C + m * c_rs, c_rs, accumulate, ahead);
  const float* a = A + m * a_rs;
  float* c = C + m * c_rs;
  switch (M - m) {
    case 1: rows_block64_avx512<1>(K, a, a_rs, a_cs, B, ldb, c, c_rs, accumulate, ahead); break;
    case 2: rows_block64_avx512<2>(K, a, a_rs, a_cs, B, ldb, c, c_rs, accumulate, ahead); break;
    case 3: rows_block64_avx512<3>(K, a, a_rs, a_cs, B, ldb, c, c_rs, accumulate, ahead); break;
    default: break;
  }
}

__attribute__((target("avx2,fma"))) void rows_times_matrix_chunk(const void* p, int64_t chunk) {
  const RowJob& j = *static_cast<const RowJob*>(p);
  const GemmShape& s = *j.s;
  const int64_t n0 = chunk * j.chunk, n1 = std::min(s.N, n0 + j.chunk), wide = n0 + (n1 - n0) / 64 * 64;
  const int64_t per_band = (wide - n0) / 64;  // 64-column blocks per band of kband rows
  const bool avx512 = j.isa >= 2;
  const int64_t kband = avx512 ? kFewBandK : kFewK;
  int64_t block = 0;
  for (int64_t k0 = 0; k0 < s.K; k0 += kband)
    for (int64_t n = n0; n < wide; n += 64, ++block) {
      const int64_t kb = std::min(kband, s.K - k0);
      const float *a = j.A + k0 * s.a_cs, *b = j.B + k0 * s.b_rs + n;
      // The block a fixed number ahead (in this order) is fetched while this one is computed.
      const int64_t f = block + (avx512 ? kFewAhead : kFewPrefetch), fk = per_band > 0 ? f / per_band * kband : s.K;
      const int64_t fn = per_band > 0 ? n0 + f % per_band * 64 : n0;
      if (avx512) {
        // (A band shorter than this one's is not fetched ahead: its rows would run past B.)
        const float* ahead = fk + kb <= s.K ? j.B + fk * s.b_rs + fn : nullptr;
        few_rows_block64_avx512(s.M, kb, a, s.a_rs, s.a_cs, b, s.b_rs, j.C + n, s.c_rs, j.accumulate || k0 > 0, ahead);
        continue;
      }
      if (fk < s.K)
        for (int64_t r = fk; r < std::min(fk + kFewK, s.K); ++r)
          for (int64_t c = 0; c < 64; c += 16) _mm_prefetch(reinterpret_cast<const char*>(j.B + r * s.b_rs + fn + c), _MM_HINT_T1);
      for (int64_t m = 0; m < s.M; ++m)
        row_block64(kb, a + m * s.a_rs, s.a_cs, b, s.b_rs, j.C + m * s.c_rs + n, j.accumulate || k0 > 0);
    }
  for (int64_t m = 0; m < s.M; ++m) row_columns(s, j.A + m * s.a_rs, j.B, j.C + m * s.c_rs, wide, n1, j.accumulate);
}

// A few rows of A (at most kFewRows) times a B packed ahead (a weight its plan keeps packed, see
// sgemm_pack_b), AVX-512: the 32-column panels of each K block one after another, so B is read as
// one stream in address order, where read in place a band of its rows is as many short runs a
// page apart. The rows' chains for one panel (8 x 32 outputs at most) stay in registers over
// the K block and continue from C between K blocks: every output is one FMA chain in ascending k
// from +0 (or C), as on the other paths. A decoding step's projections of gpt2-98m at batch 8
// (340 MB), one thread on an AMD EPYC, in huge pages: 15.4-16.3 ms read in place (21-22 GB/s),
// 8.9-9.2 ms packed (36-38 GB/s). The copy costs the weight's memory again. The job is a RowJob
// whose B is the packed B and whose chunk is a multiple of the panels' 32 columns.
int64_t k_block(const GemmShape& s);

constexpr int64_t kFewPackedAhead = 2048;  // floats

template <int M>
__attribute__((target("avx512f,fma"))) void few_packed_panel(int64_t kc, const float* A, int64_t a_rs, int64_t a_cs,
                                                             const float* pb, float* C, int64_t c_rs, int64_t cols,
                                                             bool accumulate) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1),
                  m1 = cols >= 32 ? __mmask16(0xFFFF) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1);
  __m512 c[M][2];
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r) {
    c[r][0] = accumulate ? _mm512_maskz_loadu_ps(m0, C + r * c_rs) : _mm512_setzero_ps();
    c[r][1] = accumulate ? _mm512_maskz_loadu_ps(m1, C + r * c_rs + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    // The stream 8 KB ahead, past the panel into the next (the hardware prefetcher alone read it
    // at 29-30 GB/s against 36-38 with this, 16 KB ahead the same, 32 KB 34-35).
    // (An address past the packed B near its end: computed as an integer, and only fetched.)
    const char* f = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(pb + 32 * k) + kFewPackedAhead * 4);
    _mm_prefetch(f, _MM_HINT_T0);
    _mm_prefetch(f + 64, _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(pb + 32 * k), b1 = _mm512_loadu_ps(pb + 32 * k + 16);
#pragma GCC unroll 8
    for (int r = 0; r < M; ++r) {
      const __m512 a = _mm512_set1_ps(A[r * a_rs + k * a_cs]);
      c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < M; ++r) {
    _mm512_mask_storeu_ps(C + r * c_rs, m0, c[r][0]);
    _mm512_mask_storeu_ps(C + r * c_rs + 16, m1, c[r][1]);
  }
}

template <int M>
void few_packed_rows(const RowJob& j, int64_t q0, int64_t q1) {
  const GemmShape& s = *j.s;
  const int64_t np = ceil_div(s.N, 32), kblock = k_block(s);
  for (int64_t k0 = 0; k0 < s.K; k0 += kblock) {
    const int64_t kc = std::min(kblock, s.K - k0);
    const float* a = j.A + k0 * s.a_cs;
    for (int64_t q = q0; q < q1; ++q)
      few_packed_panel<M>(kc, a, s.a_rs, s.a_cs, j.B + k0 * np * 32 + q * kc * 32, j.C + q * 32, s.c_rs,
                          std::min<int64_t>(32, s.N - q * 32), j.accumulate || k0 > 0);
  }
}

void few_packed_chunk(const void* p, int64_t chunk) {
  const RowJob& j = *static_cast<const RowJob*>(p);
  const int64_t q0 = chunk * (j.chunk / 32), q1 = std::min(ceil_div(j.s->N, 32), q0 + j.chunk / 32);
  switch (j.s->M) {
    case 1: return few_packed_rows<1>(j, q0, q1);
    case 2: return few_packed_rows<2>(j, q0, q1);
    case 3: return few_packed_rows<3>(j, q0, q1);
    case 4: return few_packed_rows<4>(j, q0, q1);
    case 5: return few_packed_rows<5>(j, q0, q1);
    case 6: return few_packed_rows<6>(j, q0, q1);
    case 7: return few_packed_rows<7>(j, q0, q1);
    default: return few_packed_rows<8>(j, q0, q1);
  }
}
static_assert(kFewRows == 8 && kNR512 == 32, "few_packed_chunk instantiates 1 .. 8 rows of 32-column panels");

// The last K % 8 steps of the chains in acc (outputs n .. n + 7 of row m of A), then the store.
inline void finish_transposed8(const RowJob& j, int64_t m, int64_t n, const float* out_in) {
  const GemmShape& s = *j.s;
  float out[8];
  std::memcpy(out, out_in, sizeof(out));
  const float *a = j.A + m * s.a_rs, *b = j.B + n * s.b_cs;
  for (int i = 0; i < 8; ++i)
    for (int64_t k = s.K / 8 * 8; k < s.K; ++k) out[i] = std::fma(a[k * s.a_cs], b[i * s.b_cs + k], out[i]);
  std::memcpy(j.C + m * s.c_rs + n, out, sizeof(out));
}

// Sixteen outputs n .. n + 15 (B's rows) for the M rows of A: two 8 x 8 blocks transposed in
// registers and joined, so one 16-lane chain per row of A takes eight FMAs per eight k; the rows
// of B sixteen on (the next call's) are fetched a line per row at every other step, between the
// FMAs. Each output's chain is the one of the eight-output form below, so the bits are the same.
template <int M>
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void rows_transposed16(const RowJob& j, int64_t n, bool fetch) {
  const GemmShape& s = *j.s;
  const int64_t K8 = s.K / 8 * 8;
  __m512 acc[M];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) acc[m] = j.accumulate ? _mm512_loadu_ps(j.C + m * s.c_rs + n) : _mm512_setzero_ps();
  const float* b = j.B + n * s.b_cs;
  for (int64_t k0 = 0, t = 0; k0 < K8; k0 += 8, ++t) {
    if (fetch) {  // step t: rows 8 (t % 2) .. + 7 of the next sixteen (inside B), the line at k 16 (t / 2)
      const float* f = b + (16 + (t % 2) * 8) * s.b_cs + t / 2 * 16;
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm_prefetch(reinterpret_cast<const char*>(f + i * s.b_cs), _MM_HINT_T1);
    }
    __m256 lo[8], hi[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      lo[i] = _mm256_loadu_ps(b + i * s.b_cs + k0);
      hi[i] = _mm256_loadu_ps(b + (i + 8) * s.b_cs + k0);
    }
    transpose8(lo);  // lo[kk]: outputs n .. n + 7 at k0 + kk
    transpose8(hi);
#pragma GCC unroll 8
    for (int kk = 0; kk < 8; ++kk) {
      const __m512 r = _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xFF, _mm512_castps_pd(_mm512_castps256_ps512(lo[kk])), _mm256_castps_pd(hi[kk]), 1));
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m)
        acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(j.A[m * s.a_rs + (k0 + kk) * s.a_cs]), r, acc[m]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m) {
    alignas(64) float out[16];
    _mm512_store_ps(out, acc[m]);
    finish_transposed8(j, m, n, out);
    finish_transposed8(j, m, n + 8, out + 8);
  }
}

// A few rows of A times B stored transposed (B(k, n) = B[k + n b_cs]: the tied head of a decoding
// batch): sixteen outputs at a time as above, then eight: their 8 x 8 blocks transposed in
// registers so each output stays one FMA chain in ascending k, for every row of A (up to eight
// chains of eight lanes beside the block); the last k and outputs one at a time.
__attribute__((target("avx512f,avx512vl,avx2,fma"))) void rows_times_transposed_chunk(const void* p, int64_t chunk) {
  const RowJob& j = *static_cast<const RowJob*>(p);
  const GemmShape& s = *j.s;
  const int64_t n0 = chunk * j.chunk, n1 = std::min(s.N, n0 + j.chunk), K8 = s.K / 8 * 8, M = s.M;
  int64_t n = n0;
  for (; n + 16 <= n1; n += 16) {
    const bool fetch = n + 32 <= n1;
    switch (M) {
      case 2: rows_transposed16<2>(j, n, fetch); break;
      case 3: rows_transposed16<3>(j, n, fetch); break;
      case 4: rows_transposed16<4>(j, n, fetch); break;
      case 5: rows_transposed16<5>(j, n, fetch); break;
      case 6: rows_transposed16<6>(j, n, fetch); break;
      case 7: rows_transposed16<7>(j, n, fetch); break;
      case 8: rows_transposed16<8>(j, n, fetch); break;
      default: break;  // sgemm sends only 2 .. kFewRows rows here
    }
  }
  for (; n + 8 <= n1; n += 8) {
    __m256 acc[kFewRows];
    for (int64_t m = 0; m < M; ++m) acc[m] = j.accumulate ? _mm256_loadu_ps(j.C + m * s.c_rs + n) : _mm256_setzero_ps();
    const float* b = j.B + n * s.b_cs;
    for (int64_t k0 = 0; k0 < K8; k0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(b + i * s.b_cs + k0);
      transpose8(r);  // r[kk]: outputs n .. n + 7 at k0 + kk
      for (int64_t m = 0; m < M; ++m) {
        const float* a = j.A + m * s.a_rs + k0 * s.a_cs;
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; ++kk) acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(a[kk * s.a_cs]), r[kk], acc[m]);
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      alignas(32) float out[8];
      _mm256_store_ps(out, acc[m]);
      finish_transposed8(j, m, n, out);
    }
  }
  for (; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) {
      float acc = j.accumulate ? j.C[m * s.c_rs + n] : 0.0f;
      for (int64_t k = 0; k < s.K; ++k) acc = std::fma(j.A[m * s.a_rs + k * s.a_cs], j.B[k + n * s.b_cs], acc);
      j.C[m * s.c_rs + n] = acc;
    }
}

__attribute__((target("avx2,fma"))) void small_gemm_avx2(const GemmShape& s, const float* A,
                                                         const float* B, int64_t ldb, float* C, bool acc) {
  int64_t first = 0;
  if (s.M == 1)
    for (; first + 64 <= s.N; first += 64) row_block64(s.K, A, s.a_cs, B + first, ldb, C + first, acc);
  for (int64_t n0 = first; n0 < s.N; n0 += 16) {
    int64_t cols = std::min<int64_t>(16, s.N - n0);
    const float* b = B + n0;
    int64_t m0 = 0;
    for (; m0 + 6 <= s.M; m0 += 6)
      small_rows<6>(s.K, A + m0 * s.a_rs, s.a_rs, s.a_cs, b, ldb, C + m0 * s.c_rs + n0, s.c_rs, cols, acc);
    const float* a = A + m0 * s.a_rs;
    float* c = C + m0 * s.c_rs + n0;
    switch (s.M - m0) {
      case 1: small_rows<1>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 2: small_rows<2>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 3: small_rows<3>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 4: small_rows<4>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 5: small_rows<5>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      default: break;
    }
  }
}

// AVX-512: 32 columns per block in two zmm registers (masked at the edge), up to 8 rows. W is
// the number of registers per row (1 or 2): one instantiation per width, so every accumulator is
// indexed by a constant and GCC keeps all of them in registers (one body for both widths had it
// store half of them to the stack on every k). Full: exactly 16 W columns, plain loads and
// stores (the masked ones kept the masks on the stack and reloaded them at every k).
template <int R, int W, bool Full>
__attribute__((target("avx512f,avx512vl,fma"))) void small_block512_t(
    int64_t K, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float* C,
    int64_t c_rs, int64_t cols, bool accumulate) {
  const __mmask16 m[2] = {__mmask16(cols >= 16 ? 0xFFFF : (1u << cols) - 1),
                          __mmask16(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1)};
  __m512 c[R][W];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {  // zero, or the chains stored in C to continue
      const float* p = C + i * c_rs + 16 * w;
      if (!accumulate) c[i][w] = _mm512_setzero_ps();
      else if constexpr (Full) c[i][w] = _mm512_loadu_ps(p);
      else c[i][w] = _mm512_maskz_loadu_ps(m[w], p);
    }
  for (int64_t k = 0; k < K; ++k) {
    __m512 b[W];
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      if constexpr (Full) b[w] = _mm512_loadu_ps(B + k * ldb + 16 * w);
      else b[w] = _mm512_maskz_loadu_ps(m[w], B + k * ldb + 16 * w);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m512 a = _mm512_set1_ps(A[i * a_rs + k * a_cs]);
#pragma GCC unroll 2
      for (int w = 0; w < W; ++w) c[i][w] = _mm512_fmadd_ps(a, b[w], c[i][w]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int w = 0; w < W; ++w) {
      if constexpr (Full) _mm512_storeu_ps(C + i * c_rs + 16 * w, c[i][w]);
      else _mm512_mask_storeu_ps(C + i * c_rs + 16 * w, m[w], c[i][w]);
    }
}
template <int R, int W>
void small_block512(int64_t K, const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t ldb, float* C,
                    int64_t c_rs, int64_t cols, bool accumulate) {
  if (cols == 16 * W) return small_block512_t<R, W, true>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, accumulate);
  small_block512_t<R, W, false>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, accumulate);
}

template <int R>
__attribute__((target("avx512f,avx512vl,fma"))) void small_rows512(int64_t K, const float* A, int64_t a_rs,
                                                                   int64_t a_cs, const float* B, int64_t ldb,
                                                                   float* C, int64_t c_rs, int64_t cols, bool acc) {
  if (cols > 16) small_block512<R, 2>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, acc);
  else small_block512<R, 1>(K, A, a_rs, a_cs, B, ldb, C, c_rs, cols, acc);
}

__attribute__((target("avx512f,avx512vl,fma"))) void small_gemm_avx512(const GemmShape& s, const float* A,
                                                                       const float* B, int64_t ldb, float* C,
                                                                       bool acc) {
  for (int64_t n0 = 0; n0 < s.N; n0 += 32) {
    int64_t cols = std::min<int64_t>(32, s.N - n0);
    const float* b = B + n0;
    int64_t m0 = 0;
    for (; m0 + 8 <= s.M; m0 += 8)
      small_rows512<8>(s.K, A + m0 * s.a_rs, s.a_rs, s.a_cs, b, ldb, C + m0 * s.c_rs + n0, s.c_rs, cols, acc);
    const float* a = A + m0 * s.a_rs;
    float* c = C + m0 * s.c_rs + n0;
    switch (s.M - m0) {
      case 1: small_rows512<1>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 2: small_rows512<2>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 3: small_rows512<3>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 4: small_rows512<4>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 5: small_rows512<5>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 6: small_rows512<6>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      case 7: small_rows512<7>(s.K, a, s.a_rs, s.a_cs, b, ldb, c, s.c_rs, cols, acc); break;
      default: break;
    }
  }
}


// Whether A, packed for every K block at once, is small enough (1 MiB) for tasks that run every K
// block (B packed ahead, or streamed: see sgemm). Two threads, the forms alternating in one
// process (shapes M x K x N): 128 x 384 x 1152 with B packed ahead from 240 to 283 GFLOP/s,
// 128 x 1536 x 384 from 279 to 303; one thread within the noise. An A of 3 MiB was slower on one
// thread (256 x 3072 x 768 streamed: 170 to 155): packed for every block at once, it leaves the
// cache before it is read.
bool a_all_blocks(const GemmShape& s) { return s.M * s.K <= (int64_t(1) << 18); }

struct GemmJob {
  const GemmShape* s;
  const float* A;
  const float* B;
  float* C;
  float* pa;  // packed A of the current K block, panels of [kc][mr] (every K block's: see all_blocks)
  float* pb;  // packed B of the current K block, panels of [kc][nr] (streamed: the tasks' buffers)
  int64_t mp, np, k0, kc, mr, nr;
  int isa;
  bool accumulate;  // C holds chains to continue
  bool a_rows;      // full A panels read in place by the AVX-512 kernel (row-major A), not packed
  // The K blocks each task runs, in order (one, or all of them: see sgemm), each kblock long (the
  // last one shorter); with all of them, pa holds A packed for every K block one after another
  // and packed_b (when given) B.
  int64_t kb0 = 0, kb1 = 1, kblock = 0;
  bool all_blocks = false;
  const float* packed_b = nullptr;
};

// A B packed ahead holds the K blocks one after another, each its np panels of [kc][nr].
float* packed_block(float* packed_b, const GemmJob& j) { return packed_b + j.k0 * j.np * j.nr; }

// The job of K block kb alone (see GemmJob): its k0 and kc and, when the job runs every K block,
// its packed A and B.
GemmJob at_block(const GemmJob& j, int64_t kb) {
  GemmJob b = j;
  b.k0 = kb * j.kblock;
  b.kc = std::min(j.kblock, j.s->K - b.k0);
  b.kb0 = kb, b.kb1 = kb + 1;
  if (j.all_blocks) {
    b.pa = j.pa + kb * j.mp * j.mr * j.kblock;
    if (j.packed_b) b.pb = packed_block(const_cast<float*>(j.packed_b), b);
    b.all_blocks = false;
  }
  return b;
}

// A B panel from B stored transposed (k contiguous, B(k, n) = B[k + n b_cs]): 16 x 16 register
// transposes on AVX-512 (the 32-column panel), then transpose_rows (8 x 8) for the rest of k, into
// the panel's rows of nr, the columns past the edge zero. The same panel as pack_b_panel. Against
// 8 x 8 transposes alone, one thread: 256 x 768 x 16384 (the tied head) 194 to 197-202 GFLOP/s,
// 256 x 3072 x 768 (a dX) 195-197 to 197-199.
void pack_b_panel_transposed(const GemmShape& s, const float* B, int64_t q, int64_t k0, int64_t kc, int64_t nr,
                             float* dst) {
  const int64_t n0 = q * nr, cols = std::min(nr, s.N - n0);
  const int64_t done = nr == kNR512 ? pack_b_transposed_avx512(B + n0 * s.b_cs + k0, s.b_cs, cols, kc, dst) : 0;
  transpose_rows(B + n0 * s.b_cs + k0 + done, s.b_cs, cols, kc - done, dst + done * nr, nr);
  if (cols < nr)
    for (int64_t kk = 0; kk < kc; ++kk) std::fill(dst + kk * nr + cols, dst + (kk + 1) * nr, 0.f);
}

// B with contiguous rows is packed by bands of kPackRows of its rows across all panels, each row
// read once from end to end (panel by panel, every row was read 128 bytes at a time, far apart:
// short runs the prefetcher does not follow, and a weight comes from memory).
constexpr int64_t kPackRows = 8;
// One k row of a B panel from B's contiguous row: cols values, then zeros up to nr.
inline void copy_panel_row(float* dst, const float* src, int64_t cols, int64_t nr) {
  if (cols == kNR512) {  // the full AVX-512 panel: a fixed size, inlined moves
    std::memcpy(dst, src, sizeof(float) * kNR512);
    return;
  }
  std::memcpy(dst, src, sizeof(float) * size_t(cols));
  std::fill(dst + cols, dst + nr, 0.f);
}
bool b_by_rows(const GemmJob& j) { return j.s->b_cs == 1; }
int64_t b_pack_tasks(const GemmJob& j) { return b_by_rows(j) ? ceil_div(j.kc, kPackRows) : j.np; }
void pack_b_rows(const GemmJob& j, int64_t band) {
  const GemmShape& s = *j.s;
  const int64_t full = s.N / j.nr, cols = s.N - full * j.nr;
  for (int64_t kk = band * kPackRows; kk < std::min(j.kc, (band + 1) * kPackRows); ++kk) {
    const float* src = j.B + (j.k0 + kk) * s.b_rs;
    float* d = j.pb + kk * j.nr;
    for (int64_t q = 0; q < full; ++q) copy_panel_row(d + q * j.kc * j.nr, src + q * j.nr, j.nr, j.nr);
    if (cols > 0) copy_panel_row(d + full * j.kc * j.nr, src + full * j.nr, cols, j.nr);
  }
}

void pack_chunk(const void* p, int64_t i) {
  const GemmJob& j = *static_cast<const GemmJob*>(p);
  if (i >= j.mp && b_by_rows(j)) return pack_b_rows(j, i - j.mp);
  if (i < j.mp) {
    if (!(j.a_rows && i < full_panels(j.s->M, j.mr))) pack_a_panel(*j.s, j.A, i, j.k0, j.kc, j.mr, j.pa + i * j.kc * j.mr);
  } else if (j.isa >= 1 && j.s->b_rs == 1 && j.s->b_cs != 1) {
    pack_b_panel_transposed(*j.s, j.B, i - j.mp, j.k0, j.kc, j.nr, j.pb + (i - j.mp) * j.kc * j.nr);
  } else {
    pack_b_panel(*j.s, j.B, i - j.mp, j.k0, j.kc, j.nr, j.pb + (i - j.mp) * j.kc * j.nr);
  }
}

// f: what the AVX-512 tile fetches as it goes (see Fetch; nothing when f.row is null).
void run_micro(const GemmJob& j, const float* a, const float* b, float* c, int64_t ldc, bool load,
               int64_t lda = 0, const Fetch& f = {}) {
  if (lda && f.row) micro_avx512_t<true, kMR512, true>(j.kc, a, lda, b, c, ldc, load, &f);
  else if (lda) micro_avx512_t<true>(j.kc, a, lda, b, c, ldc, load);
  else if (j.isa >= 2 && f.row) micro_avx512_t<false, kMR512, true>(j.kc, a, 0, b, c, ldc, load, &f);
  else if (j.isa >= 2) micro_avx512_t<false>(j.kc, a, 0, b, c, ldc, load);
  else if (j.isa == 1) micro_avx2(j.kc, a, b, c, ldc, load);
  else micro_scalar(j.kc, a, b, c, ldc, load);
}

// One tile of C (A panel pa times B panel q, packed at b) for one K block. After the first K
// block each tile resumes from C: the stored float is the chain's value, so the bits are those of
// one unbroken chain (and independent of the tile shape and of the order tiles are computed in).
// Full tiles are read and written in place; edge tiles go through a zero-padded copy.
void compute_tile(const GemmJob& j, int64_t pa, int64_t q, const float* b, const Fetch& f = {}) {
  const GemmShape& s = *j.s;
  const auto [m0, rows] = panel_rows(s.M, pa, j.mr);
  bool load = j.k0 > 0 || j.accumulate;
  const float* a = j.pa + pa * j.kc * j.mr;
  int64_t lda = 0;  // > 0: the panel is read from A's rows in place (see pack_chunk)
  if (j.a_rows && rows == j.mr) a = j.A + m0 * s.a_rs + j.k0, lda = s.a_rs;
  int64_t n0 = q * j.nr, cols = std::min(j.nr, s.N - n0);
  float* c = j.C + m0 * s.c_rs + n0;
  if (rows == j.mr && cols == j.nr) return run_micro(j, a, b, c, s.c_rs, load, lda, f);
  if (j.isa >= 2 && cols == j.nr) return micro_avx512_edge(rows, j.kc, a, b, c, s.c_rs, load);  // rows only, in place
  alignas(64) float acc[kMR512 * kNR512];
  std::memset(acc, 0, sizeof(float) * size_t(j.mr * j.nr));
  if (load)
    for (int64_t i = 0; i < rows; ++i) std::memcpy(acc + i * j.nr, c + i * s.c_rs, sizeof(float) * size_t(cols));
  run_micro(j, a, b, acc, j.nr, true, lda);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(c + i * s.c_rs, acc + i * j.nr, sizeof(float) * size_t(cols));
}

// The tiles [i0, i1) of A panels times B panel q (packed at b), fetching the lines of `next`
// (events of two lines, see Fetch) into L2 as they go: each full tile takes its share, spread
// over its k steps (an edge tile fetches nothing).
void tiles_fetching(const GemmJob& j, int64_t i0, int64_t i1, int64_t q, const float* b, Fetch next) {
  const int64_t full = std::min(i1, full_panels(j.s->M, j.mr)) - i0;
  const int64_t total = next.events, per = ceil_div(total, std::max<int64_t>(full, 1));
  next.every = std::max<int64_t>(1, j.kc / std::max<int64_t>(per, 1));
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t first = (i - i0) * per;
    Fetch f;
    if (next.row && first < total) {
      f.row = next.row + first / next.run * next.stride;
      f.every = next.every, f.events = std::min(per, total - first), f.run = next.run, f.stride = next.stride;
      f.done = first % next.run;
    }
    compute_tile(j, i, q, b, f);
  }
}

// Chunks of the work: a block of A panels (at most kBlockRows rows, which stay in L2) times a
// group of kGroupPanels B panels, over the job's K blocks in order. Each B panel stays in L1 while the block's A panels
// stream past it, so the packed B of a wide product (an MLP's 768 x 3072) never has to stream
// from L3 once per A panel.
constexpr int64_t kGroupPanels = 4, kBlockRows = 96;
int64_t block_panels(const GemmJob& j) { return std::max<int64_t>(1, kBlockRows / j.mr); }
int64_t gemm_chunks(const GemmJob& j) {
  return ceil_div(j.mp, block_panels(j)) * ceil_div(j.np, kGroupPanels);
}
void compute_chunk(const void* p, int64_t chunk) {
  const GemmJob& j = *static_cast<const GemmJob*>(p);
  const int64_t groups = ceil_div(j.np, kGroupPanels), bp = block_panels(j);
  const int64_t i0 = (chunk / groups) * bp, q0 = (chunk % groups) * kGroupPanels;
  const int64_t i1 = std::min(j.mp, i0 + bp), q1 = std::min(j.np, q0 + kGroupPanels);
  // While the block's A panels pass over panel q, the next B panel is fetched into L2. B packed
  // ahead of the call comes from memory (128 x 384 x 1152: 163 to 215 GFLOP/s; without the
  // fetches, no faster than packing per call), and B packed by this call outgrows L2 when wide (a
  // K block of 768 x 3072 is 3 MiB: 147 to 163 GFLOP/s at 512 rows); where it fits, the fetches
  // find it there and cost next to nothing (512 x 768 x 768: within the noise, +3% on average).
  for (int64_t kb = j.kb0; kb < j.kb1; ++kb) {
    const GemmJob jk = at_block(j, kb);
    for (int64_t q = q0; q < q1; ++q) {
      Fetch next;
      if (q + 1 < j.np) {
        next.row = reinterpret_cast<const char*>(jk.pb + (q + 1) * jk.kc * j.nr);
        next.events = next.run = jk.kc * j.nr * int64_t(sizeof(float)) / 128;
      }
      tiles_fetching(jk, i0, i1, q, jk.pb + q * jk.kc * j.nr, next);
    }
  }
}

// Packs B panel q of the K block into dst, whatever B's layout.
void pack_b_panel_any(const GemmJob& j, int64_t q, float* dst) {
  const GemmShape& s = *j.s;
  if (s.b_cs == 1) {
    const int64_t n0 = q * j.nr, cols = std::min(j.nr, s.N - n0);
    const float* src = j.B + j.k0 * s.b_rs + n0;
    for (int64_t kk = 0; kk < j.kc; ++kk, src += s.b_rs, dst += j.nr) copy_panel_row(dst, src, cols, j.nr);
  } else if (j.isa >= 1 && s.b_rs == 1) {
    pack_b_panel_transposed(s, j.B, q, j.k0, j.kc, j.nr, dst);
  } else {
    pack_b_panel(s, j.B, q, j.k0, j.kc, j.nr, dst);
  }
}

// The lines of B panel q's source, as a Fetch: a row per k of 32 columns, or (B stored
// transposed) a run of the K block per column.
Fetch panel_source(const GemmJob& j, int64_t q) {
  const GemmShape& s = *j.s;
  Fetch f;
  if (s.b_cs != 1 && s.b_rs != 1) return f;
  const int64_t n0 = q * j.nr, cols = std::min(j.nr, s.N - n0);
  f.row = reinterpret_cast<const char*>(j.B + j.k0 * s.b_rs + n0 * s.b_cs);
  if (s.b_cs == 1) {
    f.run = 1, f.stride = s.b_rs * int64_t(sizeof(float)), f.events = j.kc;
  } else {
    f.run = ceil_div(j.kc * int64_t(sizeof(float)), 128), f.stride = s.b_cs * int64_t(sizeof(float));
    f.events = f.run * cols;
  }
  return f;
}

// B streamed through one packed panel (a product whose A panels all stay in L2, see sgemm): task t
// packs its panels one at a time into one buffer (its first panel's place in the scratch) and
// runs every A panel over each, while the next panel's source is fetched into L2. B is read from
// memory once and the packed panel is written where it stays in cache.
int64_t stream_panels(const GemmJob& j, int threads) {
  return threads <= 1 ? j.np : std::max<int64_t>(1, ceil_div(j.np, int64_t(threads) * 4));
}
// The streamed order is taken when A's K block is at most 320 KiB. One thread, the forms
// alternating in one process (shapes M x K x N): 256 x 768 x 3072 from 183 to 199 GFLOP/s, 256 x 3072 x 768 with B
// transposed (a dX) 174 to 192, 256 x 768 x 16384 with B transposed (a tied head) 148 to 175,
// 128 x 768 x 3072 151 to 173; two threads 319 to 384 (no pass over B between two barriers). From
// 384 rows of A on it was no faster, and sometimes slower (768 x 256 x 3072 with A transposed:
// 212 to 200).
constexpr int64_t kStreamFloats = 80 * 1024;
struct StreamJob {
  const GemmJob* j;
  int64_t panels;  // per task
};
void stream_chunk(const void* p, int64_t t) {
  const StreamJob& sj = *static_cast<const StreamJob*>(p);
  const GemmJob& j = *sj.j;
  const int64_t q0 = t * sj.panels, q1 = std::min(j.np, q0 + sj.panels);
  float* buf = j.pb + q0 * j.kblock * j.nr;
  for (int64_t kb = j.kb0; kb < j.kb1; ++kb) {
    const GemmJob jk = at_block(j, kb);
    for (int64_t q = q0; q < q1; ++q) {
      pack_b_panel_any(jk, q, buf);
      // The next panel's source: this K block's next panel, or the next K block's first.
      Fetch next = q + 1 < q1 ? panel_source(jk, q + 1) : kb + 1 < j.kb1 ? panel_source(at_block(j, kb + 1), q0) : Fetch{};
      tiles_fetching(jk, 0, j.mp, q, buf, next);
    }
  }
}
// One A panel of one K block (task kb * mp + panel), for the tasks that run every K block.
void pack_a_block(const void* p, int64_t t) {
  const GemmJob& j = *static_cast<const GemmJob*>(p);
  const GemmJob jk = at_block(j, t / j.mp);
  pack_chunk(&jk, t % j.mp);
}
}  // namespace

// 8x8 blocks are transposed in registers; edges element by element.
__attribute__((target("avx2"))) void transpose_rows(const float* S, int64_t ld, int64_t N, int64_t K, float* dst,
                                                    int64_t ldd) {
  if (ldd < 0) ldd = N;
  int64_t n8 = N / 8 * 8, k8 = K / 8 * 8;
  for (int64_t n = 0; n < n8; n += 8)
    for (int64_t k = 0; k < k8; k += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(S + (n + i) * ld + k);
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
      }
      for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + (k + i) * ldd + n, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (k + i + 4) * ldd + n, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
      }
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = (n < n8 ? k8 : 0); k < K; ++k) dst[k * ldd + n] = S[n * ld + k];
}

void lay_out_kn(const float* B, int64_t rs, int64_t cs, int64_t N, int64_t K, float* dst, int isa) {
  if (rs == 1 && isa >= 1) return transpose_rows(B, cs, N, K, dst);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) dst[k * N + n] = B[k * rs + n * cs];
}

size_t gemm_scratch_floats(const GemmShape& s, int mode) {
  int64_t kc = std::min(s.K, kGemmKC);
  // Enough for either tile shape (6 x 16 or 14 x 32), A for every K block when a task may run them all.
  int64_t rows = std::max(ceil_div(s.M, kGemmMR) * kGemmMR, ceil_div(s.M, kMR512) * kMR512);
  int64_t packed = rows * (a_all_blocks(s) ? s.K : kc) + ceil_div(s.N, kNR512) * kNR512 * kc;
  int64_t small = s.b_cs == 1 ? 0 : s.K * s.N;  // the small path transposes a transposed B
  if (mode == 1) return size_t(small) + 16;
  if (mode == 2) return size_t(packed) + 16;
  return size_t(std::max(packed, small)) + 16;
}

void sgemm_block(const GemmShape& s, const float* A, const float* B, float* C, float* scratch, int isa,
                 bool accumulate) {
  if (s.M == 0 || s.N == 0) return;
  if (isa == 0) {  // one FMA (one rounding) at a time: the chain every path follows
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) {
        float acc = accumulate ? C[m * s.c_rs + n] : 0.0f;
        for (int64_t k = 0; k < s.K; ++k) acc = std::fma(A[m * s.a_rs + k * s.a_cs], B[k * s.b_rs + n * s.b_cs], acc);
        C[m * s.c_rs + n] = acc;
      }
    return;
  }
  if (s.K == 0) {
    if (!accumulate)
      for (int64_t m = 0; m < s.M; ++m) std::memset(C + m * s.c_rs, 0, sizeof(float) * size_t(s.N));
    return;
  }
  const float* b = B;
  int64_t ldb = s.b_rs;
  if (s.b_cs != 1) {
    // B stored transposed: lay it out as [K][N] rows first.
    lay_out_kn(B, s.b_rs, s.b_cs, s.N, s.K, scratch, isa);
    b = scratch;
    ldb = s.N;
  }
  if (s.N == 1 && s.a_cs == 1) return small_matvec_avx2(s, A, b, ldb, C, accumulate);
  if (isa >= 2) return small_gemm_avx512(s, A, b, ldb, C, accumulate);
  return small_gemm_avx2(s, A, b, ldb, C, accumulate);
}

namespace {
constexpr int64_t kSmallCols = 64;
struct SmallJob {
  const GemmShape* s;
  const float* A;
  const float* B;
  float* C;
  float* scratch;
  int isa;
  bool accumulate;
};
void small_columns(const void* p, int64_t chunk) {
  const SmallJob& j = *static_cast<const SmallJob*>(p);
  const int64_t n0 = chunk * kSmallCols;
  GemmShape c = *j.s;
  c.N = std::min(kSmallCols, j.s->N - n0);
  float* scratch = j.s->b_cs == 1 ? j.scratch : j.scratch + n0 * j.s->K;  // (used only to transpose B)
  sgemm_block(c, j.A, j.B + n0 * j.s->b_cs, j.C + n0, scratch, j.isa, j.accumulate);
}
}  // namespace

namespace {
// The ways sgemm computes a product, picked from the shape alone.
enum class Path { RowTransposed, Row, FewTransposed, Few, Small, Packed };
Path gemm_path(const GemmShape& s, int isa, int mode) {
  // Tiny problems run inline: a parallel launch costs more than the work.
  const bool tiny = s.M * s.N * s.K < (1 << 15);
  if (s.M == 1 && !tiny && isa >= 1 && s.b_cs != 1 && s.b_rs == 1) return Path::RowTransposed;
  // Row: AVX2's 64-column blocks, or the AVX-512 row stream on one thread.
  if (s.M == 1 && !tiny && isa >= 1 && s.b_cs == 1) return Path::Row;
  if (s.M > 1 && s.M <= kFewRows && !tiny && isa >= 2 && s.b_rs == 1 && s.b_cs >= s.K && s.N >= 64)
    return Path::FewTransposed;
  if (s.M > 1 && s.M <= kFewRows && !tiny && isa >= 1 && s.b_cs == 1 && s.N >= 64) return Path::Few;
  if ((mode == 1 || (mode == 0 && tiny)) && isa >= 1) return Path::Small;
  return Path::Packed;
}

GemmJob packed_job(const GemmShape& s, const float* A, const float* B, float* C, float* scratch, int isa,
                   bool accumulate) {
  int64_t mr = isa >= 2 ? kMR512 : kGemmMR, nr = isa >= 2 ? kNR512 : kGemmNR;
  return {&s, A, B, C, scratch, nullptr, ceil_div(s.M, mr), ceil_div(s.N, nr), 0, 0, mr, nr, isa, accumulate,
          // A's rows a multiple of 4 KiB apart fall into the same L1 sets when read in place
          // (1024^3: 27 ms read in place, 23 ms packed): those are packed.
          isa >= 2 && s.a_cs == 1 && s.a_rs > 0 && s.a_rs % 1024 != 0};
}
// K blocks of equal length (at most kGemmKC): a short last block would pay the tile load/store
// for little work. Chains resume from C, so blocking never changes the bits.
int64_t k_block(const GemmShape& s) { return ceil_div(s.K, ceil_div(s.K, kGemmKC)); }
// The few-row paths read B packed ahead too, with AVX-512 (see few_packed_chunk).
bool few_reads_packed(Path path, int isa) { return isa >= 2 && (path == Path::Few || path == Path::FewTransposed); }
}  // namespace

bool sgemm_packs_b(const GemmShape& s, int isa, int mode) {
  if (s.M <= 0 || s.N <= 0 || s.K <= 0) return false;
  const Path path = gemm_path(s, isa, mode);
  return path == Path::Packed || few_reads_packed(path, isa);
}

size_t sgemm_packed_b_floats(const GemmShape& s, int isa) {
  const int64_t nr = isa >= 2 ? kNR512 : kGemmNR;
  return size_t(s.K * ceil_div(s.N, nr) * nr);
}

void sgemm_pack_b(const GemmShape& s, const float* B, float* dst, int isa, ThreadPool& pool) {
  GemmJob j = packed_job(s, nullptr, B, nullptr, nullptr, isa, false);
  j.mp = 0;  // B's tasks only
  const int64_t kc = k_block(s);
  for (j.k0 = 0; j.k0 < s.K; j.k0 += kc) {
    j.kc = std::min(kc, s.K - j.k0);
    j.pb = packed_block(dst, j);
    pool.run(b_pack_tasks(j), pack_chunk, &j);
  }
}

void sgemm(const GemmShape& s, const float* A, const float* B, float* C, float* scratch, int isa,
           ThreadPool& pool, int mode, bool accumulate, const float* packed_b) {
  if (s.M == 0 || s.N == 0) return;
  if (s.K == 0) {
    if (accumulate) return;
    for (int64_t m = 0; m < s.M; ++m) std::memset(C + m * s.c_rs, 0, sizeof(float) * size_t(s.N));
    return;
  }
  const Path path = gemm_path(s, isa, mode);
  if (packed_b != nullptr && few_reads_packed(path, isa)) {
    // One task on one thread (B one stream); else row_task_columns' split (whole panels).
    RowJob fj{&s, A, packed_b, C, accumulate};
    fj.chunk = pool.size() == 1 ? ceil_div(s.N, kNR512) * kNR512 : row_task_columns(s.N, pool);
    return pool.run(ceil_div(s.N, fj.chunk), few_packed_chunk, &fj);
  }
  if (path != Path::Packed && path != Path::Small) {
    RowJob rj{&s, A, B, C, accumulate};
    if (path == Path::RowTransposed) return pool.run(ceil_div(s.N, kRowChunk), row_times_transposed_chunk, &rj);
    if (path == Path::Row && isa >= 2 && pool.size() == 1) {
      rj.chunk = kRowSeqCols;
      return pool.run(ceil_div(s.N, rj.chunk), row_seq_chunk, &rj);
    }
    rj.chunk = row_task_columns(s.N, pool);
    if (path == Path::Few) rj.isa = isa;
    return pool.run(ceil_div(s.N, rj.chunk),
                    path == Path::FewTransposed ? rows_times_transposed_chunk : rows_times_matrix_chunk, &rj);
  }
  if (path == Path::Small) {
    // Large enough to share: blocks of kSmallCols columns, one per task (each block's scratch is
    // its own K x cols slice; the split is the shape's, and each output's chain is unchanged).
    if (pool.size() > 1 && s.M * s.N * s.K >= (int64_t(1) << 18) && s.N > kSmallCols) {
      SmallJob sj{&s, A, B, C, scratch, isa, accumulate};
      return pool.run(ceil_div(s.N, kSmallCols), small_columns, &sj);
    }
    return sgemm_block(s, A, B, C, scratch, isa, accumulate);
  }
  GemmJob j = packed_job(s, A, B, C, scratch, isa, accumulate);
  const bool tiny = s.M * s.N * s.K < (1 << 15);
  const int64_t kc = k_block(s);
  j.kblock = kc;
  const bool stream = !packed_b && !tiny && isa >= 2 && s.M * kc <= kStreamFloats;
  const StreamJob sj{&j, stream_panels(j, pool.size())};
  if ((stream || packed_b) && !tiny && a_all_blocks(s)) {
    // Every task runs every K block: one barrier for the product, not two per K block.
    j.all_blocks = true;
    j.kb0 = 0, j.kb1 = ceil_div(s.K, kc);
    j.packed_b = packed_b;
    j.pb = scratch + j.mp * j.mr * s.K;  // the streamed panels' buffers (B packed ahead: at_block's)
    if (!(j.a_rows && s.M % j.mr == 0)) pool.run(j.mp * j.kb1, pack_a_block, &j);
    if (stream) return pool.run(ceil_div(j.np, sj.panels), stream_chunk, &sj);
    return pool.run(gemm_chunks(j), compute_chunk, &j);
  }
  j.pb = scratch + j.mp * j.mr * std::min(s.K, kGemmKC);
  for (j.k0 = 0; j.k0 < s.K; j.k0 += kc) {
    j.kc = std::min(kc, s.K - j.k0);
    j.kb0 = j.k0 / kc, j.kb1 = j.kb0 + 1;
    if (packed_b) j.pb = packed_block(const_cast<float*>(packed_b), j);  // read only
    const int64_t tasks = j.mp + (packed_b ? 0 : b_pack_tasks(j));
    if (tiny) {
      for (int64_t i = 0; i < tasks; ++i) pack_chunk(&j, i);
      for (int64_t ch = 0; ch < gemm_chunks(j); ++ch) compute_chunk(&j, ch);
      continue;
    }
    if (stream) {
      if (!(j.a_rows && s.M % j.mr == 0)) pool.run(j.mp, pack_chunk, &j);  // A only (none to pack: read in place)
      pool.run(ceil_div(j.np, sj.panels), stream_chunk, &sj);
      continue;
    }
    pool.run(tasks, pack_chunk, &j);
    pool.run(gemm_chunks(j), compute_chunk, &j);
  }
}

void dgemm(const GemmShape& s, const double* A, const double* B, double* C, bool accumulate) {
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) {
      double acc = accumulate ? C[m * s.c_rs + n] : 0;
      for (int64_t k = 0; k < s.K; ++k)
        acc = std::fma(A[m * s.a_rs + k * s.a_cs], B[k * s.b_rs + n * s.b_cs], acc);
      C[m * s.c_rs + n] = acc;
    }
}

}  // namespace synoros::kernels
