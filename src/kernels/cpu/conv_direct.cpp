// Stride-1 convolutions as an implicit GEMM over a zero-padded copy of the input. The gather +
// GEMM lowering materialises the unfolded input (KH x KW times the input's size) and the GEMM
// packs it once more; here each group of images is copied once into a padded buffer laid out so
// that every tap (c, kh, kw) of every output is a fixed offset from the output's position:
//
//   per channel, rows of Wp = W + max(pl, pr) floats (a row's right padding is the next row's
//   left padding), Rimg = H + max(pt, pb) rows per image (an image's bottom padding is the next
//   one's top padding), zeros everywhere but the images' pixels.
//
// Output (image i, oh, ow) sits at position q = (i Rimg + oh) Wp + ow and reads tap (c, kh, kw)
// at q + c plane + kh dh Wp + kw dw. Positions whose ow >= OW or oh >= OH are computed and thrown
// away (7% of the work for 28 x 28 images, 23% for 7 x 7). A tile of R output channels by three
// vectors of positions keeps 3R accumulators; each tap loads three vectors and broadcasts R
// weights.
//
// Bits: each output is one FMA chain from +0 over the taps in the weights' order, padding taps
// contributing fma(w, 0, acc) -- exactly what the gather + GEMM lowering computes. Outputs never
// read what a thrown-away position reads, so non-finite inputs reach the same outputs as there.
#include "kernels/cpu/conv_direct.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "synoros/config.hpp"

namespace synoros::kernels {

namespace {
using passes::ConvGeom;
using passes::ConvKind;

bool& enabled_slot() {
  static bool on = config::flag("SYNOROS_CONV_DIRECT", true);
  return on;
}

constexpr int kV = 3;  // vectors of positions per tile

struct DirectArgs {
  const float* x;  // [N, C, H, W]
  const float* w;  // [O, K], K = C KH KW taps
  float* y;        // [N, O, OH, OW]
  int64_t N, C, H, W, O, OH, OW, K;
  int64_t pt, pl, Wp, Rimg;
  int64_t imgs, chunks;       // images per chunk, chunks
  int64_t groups, per_group;  // output-channel groups per chunk, channels per group
  int64_t plane, nq_max;  // floats per channel plane of the padded copy; positions of a full chunk
  int64_t lanes, rows;    // positions per tile (kV vectors), output channels per tile
  const int64_t* off;     // per tap: its offset from the output's position
  bool avx512;
};

// Tile: `c` (rows of ldc) = R output channels (weights rows of ldw) x kV vectors of positions
// from b, each a chain over the K taps.
template <int R>
__attribute__((target("avx512f,fma"))) void tile_avx512(int64_t K, const float* w, int64_t ldw,
                                                        const int64_t* off, const float* b,
                                                        float* c, int64_t ldc) {
  __m512 acc[R][kV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kV; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* p = b + off[k];
    __m512 b0 = _mm512_loadu_ps(p), b1 = _mm512_loadu_ps(p + 16), b2 = _mm512_loadu_ps(p + 32);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      __m512 a = _mm512_set1_ps(w[i * ldw + k]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(a, b2, acc[i][2]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kV; ++v) _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

template <int R>
__attribute__((target("avx2,fma"))) void tile_avx2(int64_t K, const float* w, int64_t ldw,
                                                   const int64_t* off, const float* b, float* c,
                                                   int64_t ldc) {
  __m256 acc[R][kV];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kV; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const float* p = b + off[k];
    __m256 b0 = _mm256_loadu_ps(p), b1 = _mm256_loadu_ps(p + 8), b2 = _mm256_loadu_ps(p + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m256 a = _mm256_broadcast_ss(w + i * ldw + k);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(a, b2, acc[i][2]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < kV; ++v) _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
}

void tile(const DirectArgs& a, int64_t rows, const float* w, const float* b, float* c,
          int64_t ldc) {
  if (a.avx512) {
    switch (rows) {
#define SYNOROS_TILE(R) \
  case R:               \
    return tile_avx512<R>(a.K, w, a.K, a.off, b, c, ldc);
      SYNOROS_TILE(1)
      SYNOROS_TILE(2) SYNOROS_TILE(3) SYNOROS_TILE(4) SYNOROS_TILE(5) SYNOROS_TILE(6)
          SYNOROS_TILE(7)
#undef SYNOROS_TILE
              default : return tile_avx512<8>(a.K, w, a.K, a.off, b, c, ldc);
    }
  }
  switch (rows) {
    case 1:
      return tile_avx2<1>(a.K, w, a.K, a.off, b, c, ldc);
    case 2:
      return tile_avx2<2>(a.K, w, a.K, a.off, b, c, ldc);
    case 3:
      return tile_avx2<3>(a.K, w, a.K, a.off, b, c, ldc);
    default:
      return tile_avx2<4>(a.K, w, a.K, a.off, b, c, ldc);
  }
}

// One task: the output channels of one group for the images of one chunk.
void direct_task(const void* p, int64_t task) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  const int64_t chunk = task / a.groups, o0 = (task % a.groups) * a.per_group;
  const int64_t oc = std::min(a.per_group, a.O - o0);
  const int64_t n0 = chunk * a.imgs, ni = std::min(a.imgs, a.N - n0);
  const int64_t nq = ((ni - 1) * a.Rimg + a.OH) * a.Wp;
  const int64_t nqp = (nq + a.lanes - 1) / a.lanes * a.lanes;
  // The padded copy and the computed positions, per thread (grown once, then reused).
  static thread_local std::vector<float> scratch;
  const size_t need = size_t(a.C * a.plane + oc * nqp) + 16;
  if (scratch.size() < need) scratch.resize(need);
  float* pad = scratch.data();
  while (reinterpret_cast<uintptr_t>(pad) % 64) ++pad;
  float* out = pad + a.C * a.plane;
  std::memset(pad, 0, sizeof(float) * size_t(a.C * a.plane));
  for (int64_t ch = 0; ch < a.C; ++ch)
    for (int64_t i = 0; i < ni; ++i) {
      const float* src = a.x + ((n0 + i) * a.C + ch) * a.H * a.W;
      float* dst = pad + ch * a.plane + (i * a.Rimg + a.pt) * a.Wp + a.pl;
      for (int64_t h = 0; h < a.H; ++h)
        std::memcpy(dst + h * a.Wp, src + h * a.W, sizeof(float) * size_t(a.W));
    }
  for (int64_t q0 = 0; q0 < nqp; q0 += a.lanes)
    for (int64_t r = 0; r < oc; r += a.rows)
      tile(a, std::min(a.rows, oc - r), a.w + (o0 + r) * a.K, pad + q0, out + r * nqp + q0, nqp);
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < ni; ++i)
      for (int64_t oh = 0; oh < a.OH; ++oh)
        std::memcpy(a.y + (((n0 + i) * a.O + o0 + o) * a.OH + oh) * a.OW,
                    out + o * nqp + (i * a.Rimg + oh) * a.Wp, sizeof(float) * size_t(a.OW));
}

void direct_launch(const void* p, ThreadPool& pool) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  pool.run(a.chunks * a.groups, direct_task, p);
}
}  // namespace

bool conv_direct_enabled() {
  return enabled_slot();
}
void set_conv_direct(bool on) {
  enabled_slot() = on;
}

std::optional<Launch> lower_conv_direct(LowerCtx& c, const ConvGeom& g, const float* x,
                                        const float* w) {
  const Isa isa = active_isa();
  if (!conv_direct_enabled() || (isa != Isa::Avx512 && isa != Isa::Avx2) ||
      c.node.dtype != DType::F32)
    return std::nullopt;
  if (g.kind != ConvKind::Forward || g.sh != 1 || g.sw != 1) return std::nullopt;
  // The shared paddings hold only when an output row and column fit in one padded row and image.
  const int64_t Wp = g.W + std::max(g.pl, g.pr), Rimg = g.H + std::max(g.pt, g.pb);
  if (g.OW > Wp || g.OH > Rimg || g.OW < 1 || g.OH < 1) return std::nullopt;
  auto* a = c.args<DirectArgs>();
  a->x = x, a->w = w, a->y = static_cast<float*>(c.out);
  a->N = g.N, a->C = g.C, a->H = g.H, a->W = g.W, a->O = g.O, a->OH = g.OH, a->OW = g.OW;
  a->K = g.C * g.KH * g.KW;
  a->pt = g.pt, a->pl = g.pl, a->Wp = Wp, a->Rimg = Rimg;
  a->avx512 = isa == Isa::Avx512;
  a->lanes = kV * (a->avx512 ? 16 : 8);
  a->rows = a->avx512 ? 8 : 4;
  // About 512 positions per chunk: the padded copy and the outputs stay in the core's caches.
  a->imgs = std::clamp<int64_t>(512 / (Rimg * Wp), 1, g.N);
  a->chunks = (g.N + a->imgs - 1) / a->imgs;
  // Few chunks (a small batch): split the output channels too, in whole tiles.
  const int64_t tiles = (g.O + a->rows - 1) / a->rows;
  a->groups = a->chunks >= 8 ? 1 : std::min(tiles, (8 + a->chunks - 1) / a->chunks);
  a->per_group = (tiles + a->groups - 1) / a->groups * a->rows;
  a->groups = (g.O + a->per_group - 1) / a->per_group;
  a->nq_max = ((a->imgs - 1) * Rimg + g.OH) * Wp;
  const int64_t nqp = (a->nq_max + a->lanes - 1) / a->lanes * a->lanes;
  const int64_t reach = (g.KH - 1) * g.dh * Wp + (g.KW - 1) * g.dw;
  const int64_t data_end = ((a->imgs - 1) * Rimg + g.pt + g.H) * Wp;
  a->plane = (std::max(nqp + reach, data_end) + 15) / 16 * 16;
  auto* off = static_cast<int64_t*>(c.storage.persistent(size_t(a->K) * sizeof(int64_t)));
  // Taps in the weights' order: (c, kh, kw), or (c, kw, kh) for weights laid out [O, C, KW, KH].
  const int64_t n1 = g.kswap ? g.KW : g.KH, n2 = g.kswap ? g.KH : g.KW;
  const int64_t s1 = g.kswap ? g.dw : g.dh * Wp, s2 = g.kswap ? g.dh * Wp : g.dw;
  for (int64_t ch = 0, k = 0; ch < g.C; ++ch)
    for (int64_t t1 = 0; t1 < n1; ++t1)
      for (int64_t t2 = 0; t2 < n2; ++t2) off[k++] = ch * a->plane + t1 * s1 + t2 * s2;
  a->off = off;
  c.kernel = "engine-conv";
  return Launch{direct_launch, a, c.id};
}

}  // namespace synoros::kernels
