// The transforms of the 3x3 convolution op (winograd.cpp), written once over the vector traits
// and built for each instruction set (winograd_scalar.cpp, winograd_avx2.cpp, winograd_avx512.cpp).
// Every value is a fixed sequence of float additions and subtractions, lane by lane (no
// product, so nothing to contract into an FMA), so every build gives the same bits. The
// includer defines SYNOROS_ISA_NS and, for the vector builds, includes its VecF traits first
// and defines SYNOROS_WINOGRAD_VEC.
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
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
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

// y[2k + b] for the n lanes of e (b = 0) and o (b = 1), as far as 2k + b < cols.
inline void interleave(R e, R o, float* y, int64_t n, int64_t cols) {
#if defined(SYNOROS_WINOGRAD_VEC) && SYNOROS_WINOGRAD_VEC == 512
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const int64_t c = std::min(2 * n, cols);
  st(y, _mm512_permutex2var_ps(e, lo, o), std::min<int64_t>(16, c));
  if (c > 16) st(y + 16, _mm512_permutex2var_ps(e, hi, o), c - 16);
#elif defined(SYNOROS_WINOGRAD_VEC)
  const __m256 l = _mm256_unpacklo_ps(e, o), h = _mm256_unpackhi_ps(e, o);
  const int64_t c = std::min(2 * n, cols);
  st(y, _mm256_permute2f128_ps(l, h, 0x20), std::min<int64_t>(8, c));
  if (c > 8) st(y + 8, _mm256_permute2f128_ps(l, h, 0x31), c - 8);
#else
  (void)n;
  y[0] = e;
  if (cols > 1) y[1] = o;
#endif
}
}  // namespace

// One input row split into its even and odd columns of the zero-padded row (n of each):
// e[k] = row[2k - p], o[k] = row[2k + 1 - p], zero outside [0, W). `tmp`: 2n + 32 floats.
void winograd_split_row(const float* src, int64_t W, int64_t p, int64_t n, float* e, float* o,
                        float* tmp) {
  const int64_t len = 2 * n;
  for (int64_t k = 0; k < p; ++k) tmp[k] = 0.0f;
  const int64_t copy = std::min(W, len - p);
  std::memcpy(tmp + p, src, sizeof(float) * size_t(copy));
  for (int64_t k = p + copy; k < len + 32; ++k) tmp[k] = 0.0f;
  int64_t k = 0;
#if defined(SYNOROS_WINOGRAD_VEC) && SYNOROS_WINOGRAD_VEC == 512
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (; k < n; k += 16) {
    const __m512 a = _mm512_loadu_ps(tmp + 2 * k), b = _mm512_loadu_ps(tmp + 2 * k + 16);
    st(e + k, _mm512_permutex2var_ps(a, ie, b), std::min<int64_t>(16, n - k));
    st(o + k, _mm512_permutex2var_ps(a, io, b), std::min<int64_t>(16, n - k));
  }
#elif defined(SYNOROS_WINOGRAD_VEC)
  for (; k < n; k += 8) {
    const __m256 a = _mm256_loadu_ps(tmp + 2 * k), b = _mm256_loadu_ps(tmp + 2 * k + 8);
    const __m256 ev = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    const __m256 od = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
    st(e + k, ev, std::min<int64_t>(8, n - k));
    st(o + k, od, std::min<int64_t>(8, n - k));
  }
#else
  for (; k < n; ++k) e[k] = tmp[2 * k], o[k] = tmp[2 * k + 1];
#endif
}

// The tile rows ty < nty of one channel: the padded input rows 2 ty .. 2 ty + 3 as even columns
// and odd columns (tw + 1 of each; a padded row is `ld` floats, its even columns first) to
// V[xi * ldv + ty * tw + tx], xi = 4 i + j, tx < tw. V = B^T d B for
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]: the rows first, (d0 - d2, d1 + d2, d2 - d1,
// d1 - d3), then the same over the columns. Each block of tiles is computed in registers from the
// rows (the row pass twice: at columns k and k + 1).
void winograd_input_rows(const float* pad, int64_t ldr, int64_t tw, int64_t nty, float* v,
                         int64_t ldv) {
  for (int64_t ty = 0; ty < nty; ++ty) {
    const float* e = pad + 2 * ty * ldr;
    const float* o = e + tw + 1;
    float* vt = v + ty * tw;
    for (int64_t k = 0; k < tw; k += kL) {
      const int64_t n = std::min(kL, tw - k);
      R te[2][4], to[2][4];  // [shift][i]
      for (int s = 0; s < 2; ++s) {
        const float* pe = e + k + s;
        const float* po = o + k + s;
        const R e0 = ld(pe, n), e1 = ld(pe + ldr, n), e2 = ld(pe + 2 * ldr, n),
                e3 = ld(pe + 3 * ldr, n);
        const R o0 = ld(po, n), o1 = ld(po + ldr, n), o2 = ld(po + 2 * ldr, n),
                o3 = ld(po + 3 * ldr, n);
        te[s][0] = V::sub(e0, e2), te[s][1] = V::add(e1, e2), te[s][2] = V::sub(e2, e1),
        te[s][3] = V::sub(e1, e3);
        to[s][0] = V::sub(o0, o2), to[s][1] = V::add(o1, o2), to[s][2] = V::sub(o2, o1),
        to[s][3] = V::sub(o1, o3);
      }
      for (int i = 0; i < 4; ++i) {
        st(vt + (4 * i + 0) * ldv + k, V::sub(te[0][i], te[1][i]), n);  // e[k] - e[k + 1]
        st(vt + (4 * i + 1) * ldv + k, V::add(to[0][i], te[1][i]), n);  // o[k] + e[k + 1]
        st(vt + (4 * i + 2) * ldv + k, V::sub(te[1][i], to[0][i]), n);  // e[k + 1] - o[k]
        st(vt + (4 * i + 3) * ldv + k, V::sub(to[0][i], to[1][i]), n);  // o[k] - o[k + 1]
      }
    }
  }
}

// The tile rows ty < nty of one output channel: m[xi * ldm + ty * tw + tx] (xi = 4 i + j) to the
// 2 x 2 outputs Y = A^T m A, A^T = [1 1 1 0; 0 1 -1 -1], rows first, ((m0 + m1) + m2,
// (m1 - m2) - m3), then the same over the columns: y[(2 ty + a) * ldy + 2 tx + b] for the rows
// 2 ty + a < rows and the columns 2 tx + b < cols.
void winograd_output_rows(const float* m, int64_t ldm, int64_t tw, int64_t nty, float* y,
                          int64_t ldy, int64_t rows, int64_t cols) {
  for (int64_t ty = 0; ty < nty; ++ty) {
    const float* mt = m + ty * tw;
    float* yt = y + 2 * ty * ldy;
    const int64_t out_rows = std::min<int64_t>(2, rows - 2 * ty);
    for (int64_t k = 0; k < tw; k += kL) {
      const int64_t n = std::min(kL, tw - k);
      R r[2][4];
      for (int j = 0; j < 4; ++j) {
        const R m0 = ld(mt + (0 + j) * ldm + k, n), m1 = ld(mt + (4 + j) * ldm + k, n);
        const R m2 = ld(mt + (8 + j) * ldm + k, n), m3 = ld(mt + (12 + j) * ldm + k, n);
        r[0][j] = V::add(V::add(m0, m1), m2);
        r[1][j] = V::sub(V::sub(m1, m2), m3);
      }
      for (int a = 0; a < out_rows; ++a) {
        const R ev = V::add(V::add(r[a][0], r[a][1]), r[a][2]);
        const R od = V::sub(V::sub(r[a][1], r[a][2]), r[a][3]);
        interleave(ev, od, yt + a * ldy + 2 * k, n, cols - 2 * k);
      }
    }
  }
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
