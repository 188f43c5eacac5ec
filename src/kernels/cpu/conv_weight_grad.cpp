// A convolution's weight gradient dW[o, c, kh, kw] = sum over (n, oh, ow) of dY[n, o, oh, ow] *
// X[n, c, oh s + kh d - pt, ow s + kw d - pl] without the unfolded gather. The gather + GEMM
// lowering copies X unfolded (KH KW times its size) and runs a GEMM whose rows are the few output
// channels. Here, a chunk of images at a time, X is copied once into a zero-padded buffer and dY
// transposed to [position][o]; a tile keeps V vectors of output channels for each of R taps
// (c, kh, kw) in registers and, for each position in order, loads dY's V vectors and broadcasts
// the R values of X the taps read. Tiles run in parallel; each continues its chains across the
// chunks through a buffer.
//
// Bits: each dW element is one FMA chain from +0 over (n, oh, ow) ascending, padding reading 0 --
// exactly the chain gather + GEMM computes (the positions are its K, in this order).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/gemm.hpp"

namespace synoros::kernels {

namespace {
using passes::ConvGeom;

// Registers for accumulators: 24 zmm (AVX-512, 16 lanes) or 12 ymm (AVX2, 8 lanes).
constexpr int kAcc512 = 24, kAcc256 = 12;

struct WgradArgs {
  const float* x;          // [N, C, H, W]
  const float* dy;         // [N, O, OH, OW]
  float* dw;               // [O, C KH KW]
  float *pad, *dyt, *acc;  // scratch: padded chunk, transposed dY chunk, the chains [M][Op]
  int64_t N, C, H, W, O, OH, OW, KH, KW, M, Op;
  int64_t sh, sw, dh, dw_, pt, pl, Hp, Wp, plane;  // plane: floats per channel of the padded chunk
  int64_t imgs, chunks;
  int kwt;               // taps per group: KW (a group is (c, kh)) or 1 (a group is a tap)
  int64_t groups;        // M / kwt
  int64_t gpt, oblocks;  // groups per tile, blocks of output channels
  int64_t lanes, vmax;   // lanes per vector, vectors per block
  const int64_t* gofs;   // per group: its offset in the padded chunk
  bool avx512;
};

// The tile's chains over the chunk's positions: rows g * KWT + t (group g, tap t) x V vectors of
// output channels from o0; `bases` the groups' padded-chunk pointers, `acc` (rows of ld) the
// tile's chains to continue (`first`: start them at +0).
template <int G, int KWT, int V>
__attribute__((target("avx512f,fma"))) void wgrad_tile512(const WgradArgs& a, int64_t ni,
                                                          const float* const* bases, float* acc,
                                                          int64_t ld, int64_t o0, bool first) {
  __m512 c[G * KWT][V];
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      c[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + r * ld + 16 * v);
  const float* b[G];
  for (int g = 0; g < G; ++g) b[g] = bases[g];
  const int64_t step = a.Op, dwv = a.dw_;
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      const float* d = a.dyt + ((i * a.OH + oh) * a.OW) * a.Op + o0;
      const int64_t q0 = (i * a.Hp + oh * a.sh) * a.Wp;
      for (int64_t ow = 0, q = q0; ow < a.OW; ++ow, q += a.sw, d += step) {
        __m512 y[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) y[v] = _mm512_loadu_ps(d + 16 * v);
#pragma GCC unroll 24
        for (int g = 0; g < G; ++g)
#pragma GCC unroll 5
          for (int t = 0; t < KWT; ++t) {
            __m512 xv = _mm512_set1_ps(b[g][q + t * dwv]);
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v)
              c[g * KWT + t][v] = _mm512_fmadd_ps(xv, y[v], c[g * KWT + t][v]);
          }
      }
    }
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + r * ld + 16 * v, c[r][v]);
}

template <int G, int KWT, int V>
__attribute__((target("avx2,fma"))) void wgrad_tile256(const WgradArgs& a, int64_t ni,
                                                       const float* const* bases, float* acc,
                                                       int64_t ld, int64_t o0, bool first) {
  __m256 c[G * KWT][V];
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      c[r][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * ld + 8 * v);
  const float* b[G];
  for (int g = 0; g < G; ++g) b[g] = bases[g];
  const int64_t step = a.Op, dwv = a.dw_;
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t oh = 0; oh < a.OH; ++oh) {
      const float* d = a.dyt + ((i * a.OH + oh) * a.OW) * a.Op + o0;
      const int64_t q0 = (i * a.Hp + oh * a.sh) * a.Wp;
      for (int64_t ow = 0, q = q0; ow < a.OW; ++ow, q += a.sw, d += step) {
        __m256 y[V];
#pragma GCC unroll 3
        for (int v = 0; v < V; ++v) y[v] = _mm256_loadu_ps(d + 8 * v);
#pragma GCC unroll 12
        for (int g = 0; g < G; ++g)
#pragma GCC unroll 5
          for (int t = 0; t < KWT; ++t) {
            __m256 xv = _mm256_broadcast_ss(b[g] + q + t * dwv);
#pragma GCC unroll 3
            for (int v = 0; v < V; ++v)
              c[g * KWT + t][v] = _mm256_fmadd_ps(xv, y[v], c[g * KWT + t][v]);
          }
      }
    }
#pragma GCC unroll 24
  for (int r = 0; r < G * KWT; ++r)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc + r * ld + 8 * v, c[r][v]);
}

using TileFn = void (*)(const WgradArgs&, int64_t, const float* const*, float*, int64_t, int64_t,
                        bool);

// Groups per tile for KWT taps and V vectors: as many as the accumulators allow.
constexpr int groups_for(int budget, int kwt, int v) {
  return std::max(1, budget / (kwt * v));
}

template <int KWT, int V>
TileFn tile_fn(bool avx512) {
  if (avx512) return wgrad_tile512<groups_for(kAcc512, KWT, V), KWT, V>;
  return wgrad_tile256<groups_for(kAcc256, KWT, V), KWT, V>;
}

template <int KWT>
TileFn tile_fn(bool avx512, int64_t v) {
  if (v == 1) return tile_fn<KWT, 1>(avx512);
  if (v == 2) return tile_fn<KWT, 2>(avx512);
  return tile_fn<KWT, 3>(avx512);
}

TileFn pick_tile(const WgradArgs& a, int64_t v) {
  if (a.kwt == 3) return tile_fn<3>(a.avx512, v);
  if (a.kwt == 5) return tile_fn<5>(a.avx512, v);
  return tile_fn<1>(a.avx512, v);
}

int64_t tile_groups(const WgradArgs& a, int64_t v) {
  return groups_for(a.avx512 ? kAcc512 : kAcc256, int(a.kwt), int(v));
}

struct ChunkJob {
  const WgradArgs* a;
  int64_t n0, ni;
  bool first;
};

// Fill: task i < ni pads image i of the chunk, task ni + i transposes its dY.
void fill_task(const void* p, int64_t task) {
  const ChunkJob& j = *static_cast<const ChunkJob*>(p);
  const WgradArgs& a = *j.a;
  const int64_t i = task % j.ni, n = j.n0 + i;
  if (task < j.ni) {
    for (int64_t ch = 0; ch < a.C; ++ch) {
      float* dst = a.pad + ch * a.plane + i * a.Hp * a.Wp;
      std::memset(dst, 0, sizeof(float) * size_t(a.Hp * a.Wp));
      const float* src = a.x + (n * a.C + ch) * a.H * a.W;
      for (int64_t h = 0; h < a.H; ++h)
        std::memcpy(dst + (h + a.pt) * a.Wp + a.pl, src + h * a.W, sizeof(float) * size_t(a.W));
    }
    return;
  }
  const int64_t ohw = a.OH * a.OW;
  float* dst = a.dyt + i * ohw * a.Op;
  const float* src = a.dy + n * a.O * ohw;
  transpose_rows(src, ohw, a.O, ohw, dst, a.Op);
  if (a.Op > a.O)
    for (int64_t q = 0; q < ohw; ++q) std::fill(dst + q * a.Op + a.O, dst + (q + 1) * a.Op, 0.0f);
}

// Tile task: output-channel block (task % oblocks) for groups [g0, g0 + gpt) of its width.
void tile_task(const void* p, int64_t task) {
  const ChunkJob& j = *static_cast<const ChunkJob*>(p);
  const WgradArgs& a = *j.a;
  const int64_t ob = task % a.oblocks, gt = task / a.oblocks;
  const int64_t o0 = ob * a.vmax * a.lanes, v = std::min(a.vmax, (a.Op - o0) / a.lanes);
  const int64_t gpt = tile_groups(a, v), g0 = gt * gpt;
  if (g0 >= a.groups) return;  // narrower blocks have fewer tiles
  const float* bases[kAcc512];
  for (int64_t g = 0; g < gpt; ++g)  // groups past the end repeat the last (results dropped)
    bases[g] = a.pad + a.gofs[std::min(g0 + g, a.groups - 1)];
  const int64_t rows = std::min(gpt, a.groups - g0) * a.kwt;
  float* acc = a.acc + g0 * a.kwt * a.Op + o0;
  if (rows == gpt * a.kwt) {
    pick_tile(a, v)(a, j.ni, bases, acc, a.Op, o0, j.first);
    return;
  }
  // The last, partial tile: its chains in a side buffer of whole-tile height.
  alignas(64) float side[kAcc512 * 48];
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(side + r * 48, acc + r * a.Op, sizeof(float) * size_t(v * a.lanes));
  pick_tile(a, v)(a, j.ni, bases, side, 48, o0, j.first);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(acc + r * a.Op, side + r * 48, sizeof(float) * size_t(v * a.lanes));
}

void wgrad_launch(const void* p, ThreadPool& pool) {
  const WgradArgs& a = *static_cast<const WgradArgs*>(p);
  const int64_t tiles_per_block = (a.groups + a.gpt - 1) / a.gpt;
  for (int64_t ch = 0; ch < a.chunks; ++ch) {
    ChunkJob j{&a, ch * a.imgs, std::min(a.imgs, a.N - ch * a.imgs), ch == 0};
    pool.run(2 * j.ni, fill_task, &j);
    pool.run(a.oblocks * tiles_per_block, tile_task, &j);
  }
  for (int64_t o = 0; o < a.O; ++o)
    for (int64_t m = 0; m < a.M; ++m) a.dw[o * a.M + m] = a.acc[m * a.Op + o];
}
}  // namespace

std::optional<Launch> lower_conv_weight_grad_direct(LowerCtx& c, const ConvGeom& g, const float* x,
                                                    const float* dy) {
  const Isa isa = active_isa();
  if (!conv_direct_enabled() || (isa != Isa::Avx512 && isa != Isa::Avx2) ||
      c.node.dtype != DType::F32)
    return std::nullopt;
  if (g.kind != passes::ConvKind::BwdWeights || g.kswap) return std::nullopt;
  auto* a = c.args<WgradArgs>();
  a->x = x, a->dy = dy, a->dw = static_cast<float*>(c.out);
  a->N = g.N, a->C = g.C, a->H = g.H, a->W = g.W, a->O = g.O, a->OH = g.OH, a->OW = g.OW,
  a->KH = g.KH, a->KW = g.KW;
  a->M = g.C * g.KH * g.KW;
  // Output channels are the lanes: eight or fewer fill an AVX2 vector better than an AVX-512 one.
  a->avx512 = isa == Isa::Avx512 && g.O > 8;
  a->lanes = a->avx512 ? 16 : 8;
  a->vmax = a->avx512 ? 3 : 2;
  a->Op = (g.O + a->lanes - 1) / a->lanes * a->lanes;
  a->oblocks = (a->Op / a->lanes + a->vmax - 1) / a->vmax;
  a->sh = g.sh, a->sw = g.sw, a->dh = g.dh, a->dw_ = g.dw, a->pt = g.pt, a->pl = g.pl;
  // Every read position, padding included, inside the padded image.
  a->Hp = std::max(g.pt + g.H, (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1);
  a->Wp = std::max(g.pl + g.W, (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1);
  a->kwt = (g.KW == 3 || g.KW == 5) ? int(g.KW) : 1;
  a->groups = a->M / a->kwt;
  a->gpt = tile_groups(*a, std::min(a->vmax, a->Op / a->lanes));
  // Windows that fill a tile: a 1 x 1 convolution's gather is no larger than its input (and a
  // strided one reads a fraction of it), and a tile mostly of repeated groups wastes its FMAs.
  if (g.KH * g.KW < 2 || a->groups < a->gpt) return std::nullopt;
  // About 512 KB of padded images and transposed dY per chunk: they stay in the core's caches,
  // and the two parallel steps a chunk takes are few (each is a wake-up of the pool).
  const int64_t per_image = g.C * a->Hp * a->Wp + g.OH * g.OW * a->Op;
  a->imgs = std::clamp<int64_t>((int64_t(1) << 17) / std::max<int64_t>(per_image, 1), 1, g.N);
  a->chunks = (g.N + a->imgs - 1) / a->imgs;
  a->plane = a->imgs * a->Hp * a->Wp;
  a->pad = static_cast<float*>(c.storage.scratch(size_t(g.C * a->plane + 16) * sizeof(float)));
  a->dyt =
      static_cast<float*>(c.storage.scratch(size_t(a->imgs * g.OH * g.OW * a->Op) * sizeof(float)));
  a->acc = static_cast<float*>(c.storage.scratch(size_t(a->M * a->Op) * sizeof(float)));
  std::vector<int64_t> gofs(size_t(a->groups));
  for (int64_t grp = 0; grp < a->groups; ++grp) {
    // A group is (c, kh) with its KW taps, or one tap (c, kh, kw).
    const int64_t m = grp * a->kwt, ch = m / (g.KH * g.KW), kh = m / g.KW % g.KH, kw = m % g.KW;
    gofs[size_t(grp)] = ch * a->plane + kh * g.dh * a->Wp + kw * g.dw;
  }
  auto* go = static_cast<int64_t*>(c.storage.persistent(gofs.size() * sizeof(int64_t)));
  std::copy(gofs.begin(), gofs.end(), go);
  a->gofs = go;
  c.kernel = "engine-conv-weights";
  return Launch{wgrad_launch, a, c.id};
}

}  // namespace synoros::kernels
