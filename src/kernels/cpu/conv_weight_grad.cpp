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
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/conv_tiles.hpp"
#include "kernels/cpu/gemm.hpp"

namespace synoros::kernels {

namespace {
using passes::ConvGeom;

// Most rows a tile has (24 accumulators of AVX-512), and the widest tile (3 AVX-512 vectors).
constexpr int kMaxRows = 24, kMaxWidth = 48;

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

int64_t tile_groups(const WgradArgs& a, int64_t v) {
  return a.avx512 ? avx512::wgrad_groups(a.kwt, v) : avx2::wgrad_groups(a.kwt, v);
}

// The tile of v vectors from o0 over groups `bases` (see conv_tiles.hpp).
void run_tile(const WgradArgs& a, int64_t v, int64_t ni, const float* const* bases, float* acc,
              int64_t ld, int64_t o0, bool first) {
  const WgradTileArgs t{a.dyt, a.Op, a.OH, a.OW, a.Hp, a.Wp, a.sh, a.sw, a.dw_};
  if (a.avx512) return avx512::wgrad_tile(a.kwt, v, t, ni, bases, acc, ld, o0, first);
  avx2::wgrad_tile(a.kwt, v, t, ni, bases, acc, ld, o0, first);
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
  const float* bases[kMaxRows];
  for (int64_t g = 0; g < gpt; ++g)  // groups past the end repeat the last (results dropped)
    bases[g] = a.pad + a.gofs[std::min(g0 + g, a.groups - 1)];
  const int64_t rows = std::min(gpt, a.groups - g0) * a.kwt;
  float* acc = a.acc + g0 * a.kwt * a.Op + o0;
  if (rows == gpt * a.kwt) {
    run_tile(a, v, j.ni, bases, acc, a.Op, o0, j.first);
    return;
  }
  // The last, partial tile: its chains in a side buffer of whole-tile height.
  alignas(64) float side[kMaxRows * kMaxWidth] = {};  // (rows past `rows`: computed, dropped)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(side + r * kMaxWidth, acc + r * a.Op, sizeof(float) * size_t(v * a.lanes));
  run_tile(a, v, j.ni, bases, side, kMaxWidth, o0, j.first);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(acc + r * a.Op, side + r * kMaxWidth, sizeof(float) * size_t(v * a.lanes));
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
  if (!conv_direct_applies(c)) return std::nullopt;
  const Isa isa = active_isa();
  if (g.kind != passes::ConvKind::BwdWeights || g.kswap || g.KH * g.KW < 2) return std::nullopt;
  WgradArgs args{};  // filled and checked before the plan keeps a copy
  WgradArgs* a = &args;
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
  // Windows (above: a 1 x 1 convolution's gather is no larger than its input, and a strided one
  // reads a fraction of it) that fill a tile: a tile mostly of repeated groups wastes its FMAs.
  if (a->groups < a->gpt) return std::nullopt;
  a = c.args<WgradArgs>();
  *a = args;
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
