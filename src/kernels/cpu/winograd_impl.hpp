// The transforms of the 3x3 convolution op (winograd.cpp), Winograd's F(4x4, 3x3), written once
// over the vector traits and built for each instruction set (winograd_scalar.cpp,
// winograd_avx2.cpp, winograd_avx512.cpp). Every value is a fixed sequence of float additions,
// subtractions and multiplications by the constants 2, 4, 5 and 8, lane by lane, each rounded
// (the build never contracts them into FMAs), so every build gives the same bits. The includer
// defines SYNOROS_ISA_NS and, for the vector builds, includes its VecF traits first and defines
// SYNOROS_WINOGRAD_VEC (256 or 512).
#include <algorithm>
#include <cstdint>

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

}  // namespace

// One tile: the 6 x 6 patch of the zero-padded input at p (channels last: rows `ldr` floats
// apart, columns C apart) to v[xi * ldxi + c] for c < C, xi = 6 i + j. V = B^T d B: bt6 over the
// rows of each column, then over the columns of each row; vectors run over the channels.
void winograd_input_tile(const float* p, int64_t ldr, int64_t C, float* v, int64_t ldxi) {
  for (int64_t c = 0; c < C; c += kL) {
    const int64_t n = std::min(kL, C - c);
    R t[6][6];  // [column j][row i]
    for (int j = 0; j < 6; ++j) {
      R d[6];
      for (int i = 0; i < 6; ++i) d[i] = ld(p + i * ldr + j * C + c, n);
      bt6(d, t[j]);
    }
    for (int i = 0; i < 6; ++i) {
      const R e[6] = {t[0][i], t[1][i], t[2][i], t[3][i], t[4][i], t[5][i]};
      R u[6];
      bt6(e, u);
      for (int j = 0; j < 6; ++j) st(v + (6 * i + j) * ldxi + c, u[j], n);
    }
  }
}

// One tile: its 36 products m[xi * ldxi + o] (o < O) to the outputs Y = A^T m A (at6 over the
// rows of each column, then over the columns), channels last: y[a * ldr + b * ldc + o] for the
// rows a < rows and the columns b < cols of the tile.
void winograd_output_tile(const float* m, int64_t ldxi, int64_t O, float* y, int64_t ldr,
                          int64_t ldc, int rows, int cols) {
  for (int64_t o = 0; o < O; o += kL) {
    const int64_t n = std::min(kL, O - o);
    R r[6][4];  // [column j][output row a]
    for (int j = 0; j < 6; ++j) {
      R c[6];
      for (int i = 0; i < 6; ++i) c[i] = ld(m + (6 * i + j) * ldxi + o, n);
      at6(c, r[j]);
    }
    for (int a = 0; a < rows; ++a) {
      const R e[6] = {r[0][a], r[1][a], r[2][a], r[3][a], r[4][a], r[5][a]};
      R out[4];
      at6(e, out);
      for (int b = 0; b < cols; ++b) st(y + a * ldr + b * ldc + o, out[b], n);
    }
  }
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
