// Convolutions as an implicit GEMM over a zero-padded copy of the input. The gather +
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
// away (7% of the work for 28 x 28 images, 23% for 7 x 7). A strided convolution's padded input
// is split into phase planes first (see lower_conv_direct), each tap reading one of them. A tile of
// R output channels by three vectors of positions keeps 3R accumulators; each tap loads three
// vectors and broadcasts R weights.
//
// Bits: each output is one FMA chain from +0 over the taps in the weights' order, padding taps
// contributing fma(w, 0, acc) -- exactly what the gather + GEMM lowering computes. A real output
// reads only its own taps (pixels or zeros), so non-finite inputs reach the same outputs as there;
// what the thrown-away positions compute is never stored.
#include "kernels/cpu/conv_direct.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_tiles.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "synoros/config.hpp"

namespace synoros::kernels {

float* task_scratch(size_t floats) {
  static thread_local std::vector<float> scratch;
  if (scratch.size() < floats + 16) scratch.resize(floats + 16);
  float* p = scratch.data();
  while (reinterpret_cast<uintptr_t>(p) % 64) ++p;
  return p;
}

namespace {
using passes::ConvGeom;
using passes::ConvKind;

bool& enabled_slot() {
  static bool on = config::flag("SYNOROS_CONV_DIRECT", true);
  return on;
}

struct DirectArgs {
  const float* x;  // [N, C, H, W]
  const float* w;  // [O, K], K = C KH KW taps
  float* y;        // [N, O, OH, OW]
  int64_t N, C, H, W, O, OH, OW, K;
  int64_t pt, pl, Wp, Rimg;
  int64_t sh, sw, phase;      // strides; floats per phase plane (strided: see lower_conv_direct)
  int64_t imgs, chunks;       // images per chunk, chunks
  int64_t groups, per_group;  // output-channel groups per chunk, channels per group
  int64_t plane, nq_max;  // floats per channel plane of the padded copy; positions of a full chunk
  int64_t lanes, rows;    // positions per tile, output channels per tile
  const int64_t* off;     // per tap: its offset from the output's position
  // With several groups per chunk (a small batch): every chunk's padded copy, made once by
  // pad_task before the groups' tasks read it; null: each task makes its own.
  float* shared;
  bool avx512;
};

// rows x lanes outputs of a chain over K (see conv_tiles.hpp).
void tile(bool wide, int64_t rows, int64_t K, const float* w, int64_t ldw, const int64_t* off,
          const float* b, float* c, int64_t ldc) {
  if (wide) return avx512::conv_tile(rows, K, w, ldw, off, b, c, ldc);
  avx2::conv_tile(rows, K, w, ldw, off, b, c, ldc);
}

// The padded copy of chunk `chunk`'s images (a.C planes of a.plane floats) into pad.
void fill_pad(const DirectArgs& a, int64_t chunk, float* pad) {
  const int64_t n0 = chunk * a.imgs, ni = std::min(a.imgs, a.N - n0);
  std::memset(pad, 0, sizeof(float) * size_t(a.C * a.plane));
  if (a.phase == 0) {
    for (int64_t ch = 0; ch < a.C; ++ch)
      for (int64_t i = 0; i < ni; ++i) {
        const float* src = a.x + ((n0 + i) * a.C + ch) * a.H * a.W;
        float* dst = pad + ch * a.plane + (i * a.Rimg + a.pt) * a.Wp + a.pl;
        for (int64_t h = 0; h < a.H; ++h)
          std::memcpy(dst + h * a.Wp, src + h * a.W, sizeof(float) * size_t(a.W));
      }
  } else {  // phase plane (ph, pw), row r of image i, column cc: the padded input's (ph + sh r,
            // pw + sw cc)
    for (int64_t ch = 0; ch < a.C; ++ch)
      for (int64_t ph = 0; ph < a.sh; ++ph)
        for (int64_t pw = 0; pw < a.sw; ++pw) {
          const int64_t lo = std::max<int64_t>(0, (a.pl - pw + a.sw - 1) / a.sw);
          const int64_t hi = std::min(a.Wp, (a.W + a.pl - pw + a.sw - 1) / a.sw);
          for (int64_t i = 0; i < ni; ++i)
            for (int64_t r = 0; r < a.Rimg; ++r) {
              const int64_t h = ph + a.sh * r - a.pt;
              if (h < 0 || h >= a.H) continue;
              const float* src = a.x + (((n0 + i) * a.C + ch) * a.H + h) * a.W;
              float* dst =
                  pad + ch * a.plane + (ph * a.sw + pw) * a.phase + (i * a.Rimg + r) * a.Wp;
              for (int64_t cc = lo; cc < hi; ++cc) dst[cc] = src[pw + a.sw * cc - a.pl];
            }
        }
  }
}

void pad_task(const void* p, int64_t chunk) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  fill_pad(a, chunk, a.shared + chunk * a.C * a.plane);
}

// One task: the output channels of one group for the images of one chunk.
void direct_task(const void* p, int64_t task) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  const int64_t chunk = task / a.groups, o0 = (task % a.groups) * a.per_group;
  const int64_t oc = std::min(a.per_group, a.O - o0);
  const int64_t n0 = chunk * a.imgs, ni = std::min(a.imgs, a.N - n0);
  const int64_t nq = ((ni - 1) * a.Rimg + a.OH) * a.Wp;
  const int64_t nqp = (nq + a.lanes - 1) / a.lanes * a.lanes;
  // The padded copy (unless shared), then the positions.
  float* out = task_scratch(size_t((a.shared ? 0 : a.C * a.plane) + oc * nqp));
  const float* pad = out;
  if (a.shared) {
    pad = a.shared + chunk * a.C * a.plane;
  } else {
    fill_pad(a, chunk, out);
    out += a.C * a.plane;
  }
  for (int64_t q0 = 0; q0 < nqp; q0 += a.lanes)
    for (int64_t r = 0; r < oc; r += a.rows)
      tile(a.avx512, std::min(a.rows, oc - r), a.K, a.w + (o0 + r) * a.K, a.K, a.off, pad + q0,
           out + r * nqp + q0, nqp);
  for (int64_t o = 0; o < oc; ++o)
    for (int64_t i = 0; i < ni; ++i)
      for (int64_t oh = 0; oh < a.OH; ++oh)
        std::memcpy(a.y + (((n0 + i) * a.O + o0 + o) * a.OH + oh) * a.OW,
                    out + o * nqp + (i * a.Rimg + oh) * a.Wp, sizeof(float) * size_t(a.OW));
}

void direct_launch(const void* p, ThreadPool& pool) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  if (a.shared) pool.run(a.chunks, pad_task, p);
  pool.run(a.chunks * a.groups, direct_task, p);
}

// ---- the data gradient of a strided convolution: fold(fold(einsum(dY, W))) in one pass per
// (group of images, block of input channels). The einsum's unfolded values U[c, kh, kw, oh, ow]
// (each a chain over o from +0) are tiles like the forward's, held in the core's cache instead of a
// buffer of KH KW times the input's size; the two folds then add them exactly as the fold
// kernels do: t = 0 + U over kw ascending, dX = 0 + t over kh ascending.
struct DataGradArgs {
  const float* dy;                   // [N, O, OH, OW]
  const float* w;                    // [O, C, KH, KW]
  float* wt;                         // [C KH KW, O]: the weights transposed at each launch
  float* dx;                         // [N, C, H, W]
  int64_t N, C, O, H, W, OW, T, KW;  // T = KH KW taps
  int64_t ohw, imgs, groups,
      pp;  // dY's plane; images per task, their groups; positions per task in whole tiles
  int64_t cb, cblocks;               // input channels per task, blocks
  const int64_t* off;                // k pp for k < O
  const int64_t *hfirst, *hin, *hj;  // the second fold's taps of each h: (oh, kh)
  int64_t ws, pw;                    // the first fold's stride (phases of a row), values per phase
  const int64_t* wtaps;              // per kw: offset into the phases, first and end ow
  const int64_t* masks;              // AVX-512: per (phase, block of 16, kw), the lanes kw reaches
  bool avx512;
  int64_t lanes, rows;
};

// The lanes [lo, hi) of a block of `width` starting at the row's phase place at0 that tap kw's
// values reach (r: its wtaps entry; kw's values go to r[0] + ow, r[1] <= ow < r[2]); empty: lo >= hi.
struct TapLanes {
  int64_t ow0, lo, hi;  // ow0: the first lane's ow
};
TapLanes tap_lanes(const int64_t* r, int64_t at0, int64_t width) {
  const int64_t ow0 = at0 - r[0];
  return {ow0, std::max<int64_t>(0, r[1] - ow0), std::min<int64_t>(width, r[2] - ow0)};
}

// The row's phases in t (s1 of them, pw values apart) interleaved back into d's W values.
void interleave_phases(const float* t, int64_t s1, int64_t pw, int64_t W, float* d) {
  for (int64_t ph = 0; ph < s1; ++ph)
    for (int64_t j = 0, x = ph; x < W; ++j, x += s1) d[x] = t[ph * pw + j];
}

// Lanes k < 8 of p[k] with lo <= k < hi, +0 elsewhere (lanes outside are not read).
__attribute__((target("avx2"))) inline __m256 load_range(const float* p, int64_t lo, int64_t hi) {
  const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(k, _mm256_set1_epi32(int(lo) - 1)),
                                      _mm256_cmpgt_epi32(_mm256_set1_epi32(int(hi)), k));
  return _mm256_maskload_ps(p, in);
}

// dX's plane of one channel from its unfolded values uc (tap planes pp apart, rows OW long). The
// first fold's additions into w = ow s + (kw - center) d go to phase (w mod s) of the row, where
// they are contiguous in ow; a row is computed by phases, eight values at a time, in registers:
// t = 0, then + U over kw ascending, acc = 0, then + t over kh ascending -- each element sees
// exactly the fold kernels' additions, plus additions of +0 where a tap does not reach it, which
// change nothing (a sum that starts at +0 is never -0). `t`: a row of scratch.
__attribute__((target("avx2"))) void fold_plane(const DataGradArgs& a, const float* uc, float* t,
                                                float* d) {
  const int64_t s1 = a.ws, pw = a.pw;
  for (int64_t h = 0; h < a.H; ++h, d += a.W) {
    for (int64_t ph = 0; ph < s1; ++ph)
      for (int64_t j0 = 0; j0 < pw; j0 += 8) {
        const int64_t at0 = ph * pw + j0;  // the first lane's place in the row's phases
        __m256 acc = _mm256_setzero_ps();
        for (int64_t e = a.hfirst[h]; e < a.hfirst[h + 1]; ++e) {
          const float* row = uc + a.hj[e] * a.KW * a.pp + a.hin[e] * a.OW;  // U[c, kh, 0, oh, :]
          __m256 sum = _mm256_setzero_ps();
          for (int64_t kw = 0; kw < a.KW; ++kw) {
            const TapLanes l = tap_lanes(a.wtaps + 3 * kw, at0, 8);
            if (l.lo < l.hi) sum = _mm256_add_ps(sum, load_range(row + kw * a.pp + l.ow0, l.lo, l.hi));
          }
          acc = _mm256_add_ps(acc, sum);
        }
        _mm256_storeu_ps(t + at0, acc);  // t holds s1 pw + 8 floats
      }
    interleave_phases(t, s1, pw, a.W, d);
  }
}

// fold_plane on AVX-512: sixteen values of a phase at a time, the lanes each kw reaches a mask from
// the launch's table; a stride of 2 interleaves its two phases with two permutes. Each element
// sees the same additions in the same order as in fold_plane (more additions of +0 change
// nothing), so the same bits. `t`: a row of scratch, 16 floats past the phases.
__attribute__((target("avx512f"))) void fold_plane_avx512(const DataGradArgs& a, const float* uc, float* t,
                                                          float* d) {
  const int64_t s1 = a.ws, pw = a.pw, blocks = (pw + 15) / 16;
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  auto first_lanes = [](int64_t n) { return __mmask16(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1); };
  for (int64_t h = 0; h < a.H; ++h, d += a.W) {
    for (int64_t ph = 0; ph < s1; ++ph)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t at0 = ph * pw + b * 16;  // the first lane's place in the row's phases
        const int64_t* mk = a.masks + (ph * blocks + b) * a.KW;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t e = a.hfirst[h]; e < a.hfirst[h + 1]; ++e) {
          const float* row = uc + a.hj[e] * a.KW * a.pp + a.hin[e] * a.OW;  // U[c, kh, 0, oh, :]
          __m512 sum = _mm512_setzero_ps();
          for (int64_t kw = 0; kw < a.KW; ++kw)
            if (mk[kw])
              sum = _mm512_add_ps(
                  sum, _mm512_maskz_loadu_ps(__mmask16(mk[kw]), row + kw * a.pp + at0 - a.wtaps[3 * kw]));
          acc = _mm512_add_ps(acc, sum);
        }
        _mm512_storeu_ps(t + at0, acc);
      }
    if (s1 != 2) {
      interleave_phases(t, s1, pw, a.W, d);
      continue;
    }
    for (int64_t x0 = 0; x0 < a.W; x0 += 32) {  // d[x0 + 2j + ph] = t[ph pw + x0 / 2 + j]
      const __m512 even = _mm512_loadu_ps(t + x0 / 2), odd = _mm512_loadu_ps(t + pw + x0 / 2);
      _mm512_mask_storeu_ps(d + x0, first_lanes(a.W - x0), _mm512_permutex2var_ps(even, lo_idx, odd));
      _mm512_mask_storeu_ps(d + x0 + 16, first_lanes(a.W - x0 - 16), _mm512_permutex2var_ps(even, hi_idx, odd));
    }
  }
}

void data_grad_task(const void* p, int64_t task) {
  const DataGradArgs& a = *static_cast<const DataGradArgs*>(p);
  const int64_t n0 = task / a.cblocks * a.imgs, ni = std::min(a.imgs, a.N - n0);
  const int64_t c0 = (task % a.cblocks) * a.cb, cc = std::min(a.cb, a.C - c0);
  // dY's planes (whole tiles long), U, and a row of the folds (its phases and 16 floats past them)
  float* dy = task_scratch(size_t((a.O + cc * a.T) * a.pp + a.W + a.ws + 16));
  float* u = dy + a.O * a.pp;
  for (int64_t o = 0; o < a.O; ++o) {  // the images' planes back to back
    for (int64_t i = 0; i < ni; ++i)
      std::memcpy(dy + o * a.pp + i * a.ohw, a.dy + ((n0 + i) * a.O + o) * a.ohw,
                  sizeof(float) * size_t(a.ohw));
    std::memset(dy + o * a.pp + ni * a.ohw, 0, sizeof(float) * size_t(a.pp - ni * a.ohw));
  }
  const int64_t m0 = c0 * a.T, mc = cc * a.T;
  for (int64_t q0 = 0; q0 < ni * a.ohw; q0 += a.lanes)
    for (int64_t r = 0; r < mc; r += a.rows)
      tile(a.avx512, std::min(a.rows, mc - r), a.O, a.wt + (m0 + r) * a.O, a.O, a.off, dy + q0,
           u + r * a.pp + q0, a.pp);
  // The folds, a row of dX at a time (fold_plane).
  float* t = u + mc * a.pp;
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t c = 0; c < cc; ++c)
      (a.avx512 ? fold_plane_avx512 : fold_plane)(a, u + c * a.T * a.pp + i * a.ohw, t,
                                                 a.dx + ((n0 + i) * a.C + c0 + c) * a.H * a.W);
}

void data_grad_launch(const void* p, ThreadPool& pool) {
  const DataGradArgs& a = *static_cast<const DataGradArgs*>(p);
  const int64_t M = a.C * a.T;
  for (int64_t o = 0; o < a.O; ++o)
    for (int64_t m = 0; m < M; ++m) a.wt[m * a.O + o] = a.w[o * M + m];
  pool.run(a.groups * a.cblocks, data_grad_task, p);
}

int64_t* persistent_copy(PlanStorage& storage, const std::vector<int64_t>& v) {
  auto* p =
      static_cast<int64_t*>(storage.persistent(std::max<size_t>(v.size(), 1) * sizeof(int64_t)));
  std::copy(v.begin(), v.end(), p);
  return p;
}
}  // namespace

bool conv_direct_enabled() {
  return enabled_slot();
}
void set_conv_direct(bool on) {
  enabled_slot() = on;
}
bool conv_direct_applies(const LowerCtx& c) {
  const Isa isa = active_isa();
  return conv_direct_enabled() && (isa == Isa::Avx512 || isa == Isa::Avx2) &&
         c.node.dtype == DType::F32;
}

std::optional<Launch> lower_conv_direct(LowerCtx& c, const ConvGeom& g, const float* x,
                                        const float* w) {
  if (!conv_direct_applies(c)) return std::nullopt;
  const Isa isa = active_isa();
  if (g.kind != ConvKind::Forward || g.OW < 1 || g.OH < 1) return std::nullopt;
  const bool strided = g.sh != 1 || g.sw != 1;
  // A strided 1 x 1 convolution reads one phase of its input: its gather is a plain subsample.
  if (strided && g.KH * g.KW == 1) return std::nullopt;
  // Stride 1: the shared paddings, which hold when an output row and column fit in one padded row
  // and image. Strided: the padded input split into sh x sw phase planes (rows ph + sh r, columns
  // pw + sw c), each laid out like a stride-1 input without sharing, so that tap (kh, kw) is
  // phase ((kh dh) mod sh, (kw dw) mod sw) at a fixed offset again.
  const int64_t Wp = strided ? g.OW + (g.KW - 1) * g.dw / g.sw : g.W + std::max(g.pl, g.pr);
  const int64_t Rimg = strided ? g.OH + (g.KH - 1) * g.dh / g.sh : g.H + std::max(g.pt, g.pb);
  if (g.OW > Wp || g.OH > Rimg) return std::nullopt;
  auto* a = c.args<DirectArgs>();
  a->x = x, a->w = w, a->y = static_cast<float*>(c.out);
  a->N = g.N, a->C = g.C, a->H = g.H, a->W = g.W, a->O = g.O, a->OH = g.OH, a->OW = g.OW;
  a->K = g.C * g.KH * g.KW;
  a->pt = g.pt, a->pl = g.pl, a->Wp = Wp, a->Rimg = Rimg, a->sh = g.sh, a->sw = g.sw;
  a->avx512 = isa == Isa::Avx512;
  a->lanes = a->avx512 ? avx512::conv_tile_lanes() : avx2::conv_tile_lanes();
  a->rows = a->avx512 ? avx512::conv_tile_rows() : avx2::conv_tile_rows();
  // About 512 positions per chunk (one image at least, however large): for images up to about
  // 20 x 20 the padded copy and the outputs stay in the core's caches.
  a->imgs = std::clamp<int64_t>(512 / (Rimg * Wp), 1, g.N);
  a->chunks = (g.N + a->imgs - 1) / a->imgs;
  // Few chunks (a small batch): split the output channels too, in whole tiles.
  const int64_t tiles = (g.O + a->rows - 1) / a->rows;
  a->groups = a->chunks >= 8 ? 1 : std::min(tiles, (8 + a->chunks - 1) / a->chunks);
  a->per_group = (tiles + a->groups - 1) / a->groups * a->rows;
  a->groups = (g.O + a->per_group - 1) / a->per_group;
  a->nq_max = ((a->imgs - 1) * Rimg + g.OH) * Wp;
  const int64_t nqp = (a->nq_max + a->lanes - 1) / a->lanes * a->lanes;
  const int64_t reach = (g.KH - 1) * g.dh / g.sh * Wp + (g.KW - 1) * g.dw / g.sw;
  const int64_t data_end = strided ? a->imgs * Rimg * Wp : ((a->imgs - 1) * Rimg + g.pt + g.H) * Wp;
  const int64_t extent = (std::max(nqp + reach, data_end) + 15) / 16 * 16;
  a->phase = strided ? extent : 0;
  a->plane = extent * g.sh * g.sw;
  // Several groups of output channels read one chunk's padded copy: made once, not per group (at
  // batch 1, eight times over had been most of a downsampling convolution's time). Up to 8 MB of
  // copies in all (large images keep one copy per task, in the thread's scratch, as before).
  const int64_t shared_floats = a->chunks * g.C * a->plane;
  a->shared = a->groups > 1 && shared_floats <= (int64_t(1) << 21)
                  ? static_cast<float*>(c.storage.scratch(size_t(shared_floats) * sizeof(float)))
                  : nullptr;
  auto* off = static_cast<int64_t*>(c.storage.persistent(size_t(a->K) * sizeof(int64_t)));
  // Taps in the weights' order: (c, kh, kw), or (c, kw, kh) for weights laid out [O, C, KW, KH].
  auto tap = [&](int64_t kh, int64_t kw) {
    const int64_t rh = kh * g.dh, rw = kw * g.dw;
    return (rh % g.sh * g.sw + rw % g.sw) * extent + rh / g.sh * Wp + rw / g.sw;
  };
  const int64_t n1 = g.kswap ? g.KW : g.KH, n2 = g.kswap ? g.KH : g.KW;
  for (int64_t ch = 0, k = 0; ch < g.C; ++ch)
    for (int64_t t1 = 0; t1 < n1; ++t1)
      for (int64_t t2 = 0; t2 < n2; ++t2)
        off[k++] = ch * a->plane + (g.kswap ? tap(t2, t1) : tap(t1, t2));
  a->off = off;
  c.kernel = "engine-conv";
  return Launch{direct_launch, a, c.id};
}

}  // namespace synoros::kernels

namespace synoros::kernels {

std::optional<Launch> lower_conv_data_grad_direct(LowerCtx& c, const passes::ConvDataChain& m,
                                                  const float* dy, const float* w) {
  if (!conv_direct_applies(c))
    return std::nullopt;  // (the chain's nodes are all float32: its matcher)
  const Isa isa = active_isa();
  const Node& ne = c.g.node(m.e);
  const Node& n1 = c.g.node(m.f1);
  const Shape& u = ne.shape;                         // [N, C, OH, OW, KH, KW]
  const Shape& y = c.node.shape;                     // [N, C, H, W]
  const Shape& ys = c.g.shape(ne.in[size_t(m.dy)]);  // [N, O, OH, OW]
  if (u.size() != 6 || y.size() != 4 || ys.size() != 4) return std::nullopt;
  const opdefs::WindowArgs w1 = opdefs::window_args(n1, n1.shape.size());  // the first fold's
  if (w1.window != u[5] || w1.stride < 1) return std::nullopt;
  auto* a = c.args<DataGradArgs>();
  a->dy = dy, a->w = w, a->dx = static_cast<float*>(c.out);
  a->N = u[0], a->C = u[1], a->O = ys[1], a->H = y[2], a->W = y[3], a->OW = u[3], a->KW = u[5];
  a->T = u[4] * u[5];
  a->avx512 = isa == Isa::Avx512;
  a->lanes = a->avx512 ? avx512::conv_tile_lanes() : avx2::conv_tile_lanes();
  a->rows = a->avx512 ? avx512::conv_tile_rows() : avx2::conv_tile_rows();
  a->ohw = u[2] * u[3];
  // At least ~384 positions per task (small planes leave whole tiles mostly empty otherwise), and
  // about 64K unfolded values (256 KB, in the core's cache) -- one channel at least.
  a->imgs = std::clamp<int64_t>(384 / std::max<int64_t>(a->ohw, 1), 1, a->N);
  a->groups = (a->N + a->imgs - 1) / a->imgs;
  a->pp = (a->imgs * a->ohw + a->lanes - 1) / a->lanes * a->lanes;
  a->cb = std::clamp<int64_t>((int64_t(1) << 16) / std::max<int64_t>(a->T * a->pp, 1), 1, a->C);
  a->cblocks = (a->C + a->cb - 1) / a->cb;
  a->wt = static_cast<float*>(c.storage.persistent(size_t(a->C * a->T * a->O) * sizeof(float)));
  std::vector<int64_t> off(size_t(a->O));
  for (int64_t k = 0; k < a->O; ++k) off[size_t(k)] = k * a->pp;
  a->off = persistent_copy(c.storage, off);
  // The folds' own taps: the first adds the kw window into w, the second the kh window into h.
  a->ws = w1.stride, a->pw = (a->W + w1.stride - 1) / w1.stride;
  std::vector<int64_t> wtaps;
  for (int64_t kw = 0; kw < a->KW; ++kw) {
    const int64_t at = (kw - w1.center) * w1.dilation;  // w = ow s + at
    const int64_t phase = ((at % a->ws) + a->ws) % a->ws, shift = (at - phase) / a->ws;
    const int64_t count = (a->W - phase + a->ws - 1) / a->ws;  // values of w in this phase
    wtaps.insert(wtaps.end(), {phase * a->pw + shift, std::max<int64_t>(0, -shift),
                               std::min(a->OW, count - shift)});
  }
  a->wtaps = persistent_copy(c.storage, wtaps);
  std::vector<int64_t> masks;  // fold_plane_avx512's: the lanes of each tap_lanes range
  for (int64_t ph = 0, blocks = (a->pw + 15) / 16; a->avx512 && ph < a->ws; ++ph)
    for (int64_t b = 0; b < blocks; ++b)
      for (int64_t kw = 0; kw < a->KW; ++kw) {
        const TapLanes l = tap_lanes(wtaps.data() + 3 * kw, ph * a->pw + b * 16, 16);
        masks.push_back(l.lo < l.hi ? ((int64_t(1) << l.hi) - 1) & ~((int64_t(1) << l.lo) - 1) : 0);
      }
  a->masks = persistent_copy(c.storage, masks);
  FoldTaps ht = fold_taps(opdefs::window_args(c.node, y.size()), y[2], u[2]);
  a->hfirst = persistent_copy(c.storage, ht.first), a->hin = persistent_copy(c.storage, ht.in);
  a->hj = persistent_copy(c.storage, ht.j);
  c.kernel = "engine-conv-data";
  return Launch{data_grad_launch, a, c.id};
}

}  // namespace synoros::kernels
