// The transforms of the 3x3 convolution op (winograd.cpp), Winograd's F(4x4, 3x3), written once
// over the vector traits and built for each instruction set (winograd_scalar.cpp,
// winograd_avx2.cpp, winograd_avx512.cpp). Every value is a fixed sequence of float additions,
// subtractions and multiplications by the constants 2, 4, 5 and 8, lane by lane, each rounded
// (the build never contracts them into FMAs), so every build gives the same bits. The includer
// defines SYNOROS_ISA_NS and, for the vector builds, includes its VecF traits first and defines
// SYNOROS_WINOGRAD_VEC (256 or 512).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/winograd.hpp"

namespace synoros::kernels::SYNOROS_ISA_NS {

namespace {
#ifdef SYNOROS_WINOGRAD_VEC
using V = VecF;
#else
struct V {  // one float at a time
  using R = float;
  static constexpr int64_t kLanes = 1;
  static R load(const float* p) { return *p; }
  static void store(float* p, R v) { *p = v; }
  static R load_n(const float* p, int64_t) { return *p; }
  static void store_n(float* p, R v, int64_t) { *p = v; }
  static R set(float v) { return v; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
};
#endif
constexpr int64_t kL = V::kLanes;
using R = V::R;

inline R ld(const float* p, int64_t n) {
  return n == kL ? V::load(p) : V::load_n(p, n);
}
inline void st(float* p, R v, int64_t n) {
  if (n == kL)
    V::store(p, v);
  else
    V::store_n(p, v, n);
}
inline R add(R a, R b) {
  return V::add(a, b);
}
inline R sub(R a, R b) {
  return V::sub(a, b);
}
inline R times(R a, float c) {
  return V::mul(a, V::set(c));
}

// B^T d over six values: the input transform's rows (and, again, its columns).
inline void bt6(const R d[6], R t[6]) {
  t[0] = add(sub(times(d[0], 4.0f), times(d[2], 5.0f)), d[4]);
  t[1] = sub(add(d[3], d[4]), times(add(d[1], d[2]), 4.0f));
  t[2] = add(sub(d[4], d[3]), times(sub(d[1], d[2]), 4.0f));
  t[3] = add(sub(d[4], d[2]), times(sub(d[3], d[1]), 2.0f));
  t[4] = sub(sub(d[4], d[2]), times(sub(d[3], d[1]), 2.0f));
  t[5] = add(sub(times(d[1], 4.0f), times(d[3], 5.0f)), d[5]);
}
// A^T m over six values: the output transform's rows (and its columns).
inline void at6(const R m[6], R y[4]) {
  const R p = add(m[1], m[2]), q = sub(m[1], m[2]), r = add(m[3], m[4]), s = sub(m[3], m[4]);
  y[0] = add(add(m[0], p), r);
  y[1] = add(q, times(s, 2.0f));
  y[2] = add(p, times(r, 4.0f));
  y[3] = add(add(q, times(s, 8.0f)), m[5]);
}

#if defined(SYNOROS_WINOGRAD_VEC) && SYNOROS_WINOGRAD_VEC == 256
// The even and the odd lanes of (a, b), in order.
inline __m256 even(__m256 a, __m256 b) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
}
inline __m256 odd(__m256 a, __m256 b) {
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}
#endif

// y[4k + b] = o[b] lane k, for the n lanes, as far as 4k + b < cols.
inline void interleave4(const R o[4], float* y, int64_t n, int64_t cols) {
  const int64_t c = std::min(4 * n, cols);
#if defined(SYNOROS_WINOGRAD_VEC) && SYNOROS_WINOGRAD_VEC == 512
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i plo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11),
                phi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512d a0 = _mm512_castps_pd(_mm512_permutex2var_ps(o[0], lo, o[1]));
  const __m512d a1 = _mm512_castps_pd(_mm512_permutex2var_ps(o[0], hi, o[1]));
  const __m512d b0 = _mm512_castps_pd(_mm512_permutex2var_ps(o[2], lo, o[3]));
  const __m512d b1 = _mm512_castps_pd(_mm512_permutex2var_ps(o[2], hi, o[3]));
  const __m512 out[4] = {_mm512_castpd_ps(_mm512_permutex2var_pd(a0, plo, b0)),
                         _mm512_castpd_ps(_mm512_permutex2var_pd(a0, phi, b0)),
                         _mm512_castpd_ps(_mm512_permutex2var_pd(a1, plo, b1)),
                         _mm512_castpd_ps(_mm512_permutex2var_pd(a1, phi, b1))};
  for (int q = 0; q < 4 && 16 * q < c; ++q)
    st(y + 16 * q, out[q], std::min<int64_t>(16, c - 16 * q));
#elif defined(SYNOROS_WINOGRAD_VEC)
  const __m256 a0 = _mm256_unpacklo_ps(o[0], o[1]), a1 = _mm256_unpackhi_ps(o[0], o[1]);
  const __m256 b0 = _mm256_unpacklo_ps(o[2], o[3]), b1 = _mm256_unpackhi_ps(o[2], o[3]);
  const __m256 l0 =
      _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a0), _mm256_castps_pd(b0)));
  const __m256 h0 =
      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a0), _mm256_castps_pd(b0)));
  const __m256 l1 =
      _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a1), _mm256_castps_pd(b1)));
  const __m256 h1 =
      _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a1), _mm256_castps_pd(b1)));
  const __m256 out[4] = {_mm256_permute2f128_ps(l0, h0, 0x20), _mm256_permute2f128_ps(l1, h1, 0x20),
                         _mm256_permute2f128_ps(l0, h0, 0x31),
                         _mm256_permute2f128_ps(l1, h1, 0x31)};
  for (int q = 0; q < 4 && 8 * q < c; ++q) st(y + 8 * q, out[q], std::min<int64_t>(8, c - 8 * q));
#else
  (void)n;
  for (int b = 0; b < 4 && b < c; ++b) y[b] = o[b];
#endif
}
}  // namespace

// One input row split into the four phases of the zero-padded row's columns (n of each, phase q
// at out + q n): out[q n + k] = row[4k + q - p], zero outside [0, W). `tmp`: 4n + 64 floats.
// (W + p <= 4 n.)
void winograd_split_row(const float* src, int64_t W, int64_t p, int64_t n, float* out, float* tmp) {
  // The row zero-padded in tmp, as far as the loads below read (whole blocks of 4 kL).
  const int64_t len = (n + kL - 1) / kL * kL * 4;
  const int64_t copy = std::max<int64_t>(0, std::min(W, len - p));
  std::memset(tmp, 0, sizeof(float) * size_t(p));
  std::memcpy(tmp + p, src, sizeof(float) * size_t(copy));
  std::memset(tmp + p + copy, 0, sizeof(float) * size_t(len - p - copy));
  float *o0 = out, *o1 = out + n, *o2 = out + 2 * n, *o3 = out + 3 * n;
  int64_t k = 0;
#if defined(SYNOROS_WINOGRAD_VEC) && SYNOROS_WINOGRAD_VEC == 512
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (; k < n; k += 16) {
    const float* t = tmp + 4 * k;
    const __m512 a = _mm512_loadu_ps(t), b = _mm512_loadu_ps(t + 16), c = _mm512_loadu_ps(t + 32),
                 d = _mm512_loadu_ps(t + 48);
    const __m512 eab = _mm512_permutex2var_ps(a, ie, b), oab = _mm512_permutex2var_ps(a, io, b);
    const __m512 ecd = _mm512_permutex2var_ps(c, ie, d), ocd = _mm512_permutex2var_ps(c, io, d);
    const int64_t m = std::min<int64_t>(16, n - k);
    st(o0 + k, _mm512_permutex2var_ps(eab, ie, ecd), m);
    st(o1 + k, _mm512_permutex2var_ps(oab, ie, ocd), m);
    st(o2 + k, _mm512_permutex2var_ps(eab, io, ecd), m);
    st(o3 + k, _mm512_permutex2var_ps(oab, io, ocd), m);
  }
#elif defined(SYNOROS_WINOGRAD_VEC)
  for (; k < n; k += 8) {
    const float* t = tmp + 4 * k;
    const __m256 a = _mm256_loadu_ps(t), b = _mm256_loadu_ps(t + 8), c = _mm256_loadu_ps(t + 16),
                 d = _mm256_loadu_ps(t + 24);
    const __m256 eab = even(a, b), oab = odd(a, b), ecd = even(c, d), ocd = odd(c, d);
    const int64_t m = std::min<int64_t>(8, n - k);
    st(o0 + k, even(eab, ecd), m);
    st(o1 + k, even(oab, ocd), m);
    st(o2 + k, odd(eab, ecd), m);
    st(o3 + k, odd(oab, ocd), m);
  }
#else
  for (; k < n; ++k)
    o0[k] = tmp[4 * k], o1[k] = tmp[4 * k + 1], o2[k] = tmp[4 * k + 2], o3[k] = tmp[4 * k + 3];
#endif
}

// The tile rows ty < nty of one channel: the padded input rows 4 ty .. 4 ty + 5 (`ld` floats
// apart, each its four column phases of tw + 1 values) to V[xi * ldv + ty * tw + tx],
// xi = 6 i + j, tx < tw. V = B^T d B (bt6 over the rows, then over the columns); a tile's six
// columns are phases 0-3 at tx and phases 0-1 at tx + 1.
void winograd_input_rows(const float* pad, int64_t ldr, int64_t tw, int64_t nty, float* v,
                         int64_t ldv) {
  const int64_t np = tw + 1;
  for (int64_t ty = 0; ty < nty; ++ty) {
    const float* base = pad + 4 * ty * ldr;
    float* vt = v + ty * tw;
    for (int64_t k = 0; k < tw; k += kL) {
      const int64_t n = std::min(kL, tw - k);
      R t[6][6];  // [column j][row i]
      for (int j = 0; j < 6; ++j) {
        const float* col = base + (j & 3) * np + k + (j >> 2);
        R d[6];
        for (int i = 0; i < 6; ++i) d[i] = ld(col + i * ldr, n);
        bt6(d, t[j]);
      }
      for (int i = 0; i < 6; ++i) {
        const R e[6] = {t[0][i], t[1][i], t[2][i], t[3][i], t[4][i], t[5][i]};
        R u[6];
        bt6(e, u);
        for (int j = 0; j < 6; ++j) st(vt + (6 * i + j) * ldv + k, u[j], n);
      }
    }
  }
}

// The tile rows ty < nty of one output channel: m[xi * ldm + ty * tw + tx] (xi = 6 i + j) to the
// 4 x 4 outputs Y = A^T m A (at6 over the rows, then over the columns):
// y[(4 ty + a) * ldy + 4 tx + b] for the rows 4 ty + a < rows and the columns 4 tx + b < cols.
void winograd_output_rows(const float* m, int64_t ldm, int64_t tw, int64_t nty, float* y,
                          int64_t ldy, int64_t rows, int64_t cols) {
  for (int64_t ty = 0; ty < nty; ++ty) {
    const float* mt = m + ty * tw;
    float* yt = y + 4 * ty * ldy;
    const int64_t out_rows = std::min<int64_t>(4, rows - 4 * ty);
    for (int64_t k = 0; k < tw; k += kL) {
      const int64_t n = std::min(kL, tw - k);
      R r[6][4];  // [column j][output row a]
      for (int j = 0; j < 6; ++j) {
        R c[6];
        for (int i = 0; i < 6; ++i) c[i] = ld(mt + (6 * i + j) * ldm + k, n);
        at6(c, r[j]);
      }
      for (int a = 0; a < out_rows; ++a) {
        const R e[6] = {r[0][a], r[1][a], r[2][a], r[3][a], r[4][a], r[5][a]};
        R o[4];
        at6(e, o);
        interleave4(o, yt + a * ldy + 4 * k, n, cols - 4 * k);
      }
    }
  }
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
