// The convolution tiles (see conv_tiles.hpp) over the vector traits VecF of the including file,
// which enables its instruction set and defines SYNOROS_ISA_NS.
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/conv_tiles.hpp"

namespace synoros::kernels::SYNOROS_ISA_NS {

namespace {
using R = VecF::R;
constexpr int64_t kL = VecF::kLanes;
// Registers for a weight-gradient tile's accumulators: 24 of AVX-512's 32, 12 of AVX2's 16.
constexpr int kAcc = kL == 16 ? 24 : 12;
constexpr int kRows = kL == 16 ? 8 : 4;

template <int RW>
void conv_tile_t(int64_t K, const float* w, int64_t ldw, const int64_t* off, const float* b,
                 float* c, int64_t ldc) {
  R acc[RW][kConvVectors];
#pragma GCC unroll 8
  for (int i = 0; i < RW; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kConvVectors; ++v) acc[i][v] = VecF::set(0.0f);
  for (int64_t k = 0; k < K; ++k) {
    const float* p = b + off[k];
    R b0 = VecF::load(p), b1 = VecF::load(p + kL), b2 = VecF::load(p + 2 * kL);
#pragma GCC unroll 8
    for (int i = 0; i < RW; ++i) {
      R a = VecF::set(w[i * ldw + k]);
      acc[i][0] = VecF::fma(a, b0, acc[i][0]);
      acc[i][1] = VecF::fma(a, b1, acc[i][1]);
      acc[i][2] = VecF::fma(a, b2, acc[i][2]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < RW; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kConvVectors; ++v) VecF::store(c + i * ldc + kL * v, acc[i][v]);
}

constexpr int groups_for(int kwt, int v) {
  return std::max(1, kAcc / (kwt * v));
}

template <int KWT, int V>
void wgrad_tile_t(const WgradTileArgs& a, int64_t ni, const float* const* bases, float* acc,
                  int64_t ld, int64_t o0, bool first) {
  constexpr int G = groups_for(KWT, V);
  R c[G * KWT][V];
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      c[r][v] = first ? VecF::set(0.0f) : VecF::load(acc + r * ld + kL * v);
  const float* b[G];
  for (int g = 0; g < G; ++g) b[g] = bases[g];
  const int64_t step = a.Op, dwv = a.dw;
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      const float* d = a.dyt + ((i * a.OH + oh) * a.OW) * a.Op + o0;
      const int64_t q0 = (i * a.Hp + oh * a.sh) * a.Wp;
      for (int64_t ow = 0, q = q0; ow < a.OW; ++ow, q += a.sw, d += step) {
        R y[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) y[v] = VecF::load(d + kL * v);
#pragma GCC unroll 24
        for (int g = 0; g < G; ++g)
#pragma GCC unroll 5
          for (int t = 0; t < KWT; ++t) {
            R xv = VecF::set(b[g][q + t * dwv]);
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v) c[g * KWT + t][v] = VecF::fma(xv, y[v], c[g * KWT + t][v]);
          }
      }
    }
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) VecF::store(acc + r * ld + kL * v, c[r][v]);
}

template <int KWT>
void wgrad_tile_v(int64_t v, const WgradTileArgs& a, int64_t ni, const float* const* bases,
                  float* acc, int64_t ld, int64_t o0, bool first) {
  if (v == 1) return wgrad_tile_t<KWT, 1>(a, ni, bases, acc, ld, o0, first);
  if (v == 2) return wgrad_tile_t<KWT, 2>(a, ni, bases, acc, ld, o0, first);
  return wgrad_tile_t<KWT, 3>(a, ni, bases, acc, ld, o0, first);
}
}  // namespace

int conv_tile_rows() {
  return kRows;
}
int64_t conv_tile_lanes() {
  return kConvVectors * kL;
}

void conv_tile(int64_t rows, int64_t K, const float* w, int64_t ldw, const int64_t* off,
               const float* b, float* c, int64_t ldc) {
  switch (rows) {
    case 1:
      return conv_tile_t<1>(K, w, ldw, off, b, c, ldc);
    case 2:
      return conv_tile_t<2>(K, w, ldw, off, b, c, ldc);
    case 3:
      return conv_tile_t<3>(K, w, ldw, off, b, c, ldc);
#if SYNOROS_CONV_TILES_WIDE
    case 4:
      return conv_tile_t<4>(K, w, ldw, off, b, c, ldc);
    case 5:
      return conv_tile_t<5>(K, w, ldw, off, b, c, ldc);
    case 6:
      return conv_tile_t<6>(K, w, ldw, off, b, c, ldc);
    case 7:
      return conv_tile_t<7>(K, w, ldw, off, b, c, ldc);
#endif
    default:
      return conv_tile_t<kRows>(K, w, ldw, off, b, c, ldc);
  }
}

int64_t wgrad_groups(int kwt, int64_t v) {
  return groups_for(kwt == 3 || kwt == 5 ? kwt : 1, int(v));
}

void wgrad_tile(int kwt, int64_t v, const WgradTileArgs& a, int64_t ni, const float* const* bases,
                float* acc, int64_t ld, int64_t o0, bool first) {
  if (kwt == 3) return wgrad_tile_v<3>(v, a, ni, bases, acc, ld, o0, first);
  if (kwt == 5) return wgrad_tile_v<5>(v, a, ni, bases, acc, ld, o0, first);
  return wgrad_tile_v<1>(v, a, ni, bases, acc, ld, o0, first);
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
