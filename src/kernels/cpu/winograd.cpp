// The 3x3 convolution op, conv3x3(x, w) with attr::Conv3x3 {pad, flipped}, by Winograd's
// F(4x4, 3x3): each 4 x 4 block of outputs (a tile) is A^T [sum_c U_c (.) V_c] A, with U = G g G^T the weights of
// (o, c) and V = B^T d B the 6 x 6 input patch d of channel c: 36 multiplications per tile and
// channel pair where the direct chain takes 144.
//
// The bits are the op's definition, the same on every instruction set and thread count:
//   U[xi][o][c]  G g G^T computed in double (Lavin and Gray's G; g6), rounded once to float;
//   V[c][xi][t]  B^T d B, rows first, then the columns, in the order of bt6 (winograd_impl.hpp);
//   M[o][xi][t]  one FMA chain over c = 0, 1, ..., C-1 from +0 (the canonical GEMM);
//   y            A^T M A, rows first, then the columns, in the order of at6;
// with xi = 6 i + j the position in the 6 x 6 transform, t the tile, and zeros outside the image.
// The transforms are float additions and multiplications by small constants, each rounded
// (winograd_impl.hpp, built per instruction set); the products are the canonical GEMM's, which
// gives the same bits on every instruction set. Work is split over groups of images (or bands of
// tile rows of one large image) and blocks of tiles and output channels, which changes no value.
// A weight held in a parameter is transformed once per version of its buffer, so an inference
// plan transforms its weights at its first call only (at batch 1 the transform had been most of
// the op's time); a training step's weights change every call and are transformed every call.
// The float64 oracle is the direct sum; the tests hold this to it.
#include "kernels/cpu/winograd.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/packed_weights.hpp"
#include "kernels/onednn_conv.hpp"

namespace synoros::kernels {

namespace {

using InputTile = void (*)(const float*, int64_t, int64_t, float*, int64_t);
using OutputTile = void (*)(const float*, int64_t, int64_t, float*, int64_t, int64_t, int, int);

struct WinoArgs {
  const float* x;  // [N, C, H, W]
  const float* w;  // [O, C, 3, 3], or flipped: [C, O, 3, 3] read as w[c][o][2 - a][2 - b]
  float* y;        // [N, O, OH, OW]
  float* u;        // [36][C][O]: the transformed weights
  // The weights' parameter buffer (null: an input, borrowed memory or a probe), and the version of
  // it u holds: a weight that has not changed since the last call is not transformed again (an
  // inference plan's every call; a training step's weights change every call and are).
  const Buffer* w_src;
  mutable uint64_t u_version;
  int64_t N, C, H, W, O, OH, OW, p;
  bool flipped;
  int64_t th, tw;                  // tile rows and columns of an image
  int64_t imgs, bands, band_rows;  // a task's images; bands per image and tile rows per band
  int64_t tasks, scratch_floats;   // per task
  int isa;
  InputTile input_tile;
  OutputTile output_tile;
};

// The products' blocks: up to 64 output channels by as many tiles as 128 KB of products hold.
constexpr int64_t kOutBlock = 64, kBlockFloats = 32768;

// G v for the three values of a row or column of weights: Lavin and Gray's G, whose rows are
// (1/4, 0, 0), -(1, 1, 1)/6, -(1, -1, 1)/6, (1, 2, 4)/24, (1, -2, 4)/24 and (0, 0, 1), in double.
inline void g6(double v0, double v1, double v2, double* s, int64_t ld) {
  const double e = v0 + v2, f = v0 + 4 * v2;
  s[0] = v0 / 4;
  s[ld] = -(e + v1) / 6;
  s[2 * ld] = -(e - v1) / 6;
  s[3 * ld] = (f + 2 * v1) / 24;
  s[4 * ld] = (f - 2 * v1) / 24;
  s[5 * ld] = v2;
}

// U for output channels [8 task, 8 task + 8): G g G^T in double, rounded once.
void weight_task(const void* p, int64_t task) {
  const WinoArgs& a = *static_cast<const WinoArgs*>(p);
  const int64_t o1 = std::min(a.O, 8 * task + 8);
  for (int64_t o = 8 * task; o < o1; ++o)
    for (int64_t c = 0; c < a.C; ++c) {
      double g[3][3], s[6][3], u[6][6];
      for (int r = 0; r < 3; ++r)
        for (int q = 0; q < 3; ++q)
          g[r][q] = a.flipped ? a.w[((c * a.O + o) * 3 + 2 - r) * 3 + 2 - q]
                              : a.w[((o * a.C + c) * 3 + r) * 3 + q];
      for (int q = 0; q < 3; ++q) g6(g[0][q], g[1][q], g[2][q], &s[0][q], 3);
      for (int i = 0; i < 6; ++i) g6(s[i][0], s[i][1], s[i][2], &u[i][0], 1);
      for (int xi = 0; xi < 36; ++xi) a.u[(xi * a.C + c) * a.O + o] = float(u[xi / 6][xi % 6]);
    }
}

void conv_task(const void* p, int64_t task) {
  const WinoArgs& a = *static_cast<const WinoArgs*>(p);
  int64_t n0, ni, ty0, nty;
  if (a.bands == 1) {
    n0 = task * a.imgs, ni = std::min(a.imgs, a.N - n0), ty0 = 0, nty = a.th;
  } else {
    n0 = task / a.bands, ni = 1, ty0 = task % a.bands * a.band_rows,
    nty = std::min(a.band_rows, a.th - ty0);
  }
  const int64_t tw = a.tw, T = ni * nty * tw, C = a.C, O = a.O;
  const int64_t rows = 4 * nty + 2, wp = 4 * tw + 2;        // the padded input's rows and columns
  const int64_t yrows = std::min(4 * nty, a.OH - 4 * ty0);  // output rows of the task
  const int64_t ob = std::min<int64_t>(O, kOutBlock),
                tb = std::max<int64_t>(1, kBlockFloats / (36 * ob));
  float* next = task_scratch(size_t(a.scratch_floats));
  auto take = [&next](int64_t floats) {  // 64-byte aligned pieces
    float* r = next;
    next += (floats + 15) / 16 * 16;
    return r;
  };
  float* pad = take(ni * rows * wp * C);    // [image][row][column][channel]
  float* v = take(36 * T * C);              // [xi][tile][channel]
  float* m = take(36 * tb * ob);            // [tile][xi][output channel]
  float* yt = take(ni * yrows * a.OW * O);  // [image][row][column][output channel]
  float* gs = take(C * ob);
  // The padded input, channels last.
  std::memset(pad, 0, sizeof(float) * size_t(ni * rows * wp * C));
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = 4 * ty0 + r - a.p;
      if (h < 0 || h >= a.H) continue;
      float* dst = pad + ((i * rows + r) * wp + a.p) * C;
      const float* src = a.x + ((n0 + i) * C * a.H + h) * a.W;  // channel ch's row at ch H W
      if (a.isa > 0) {
        transpose_rows(src, a.H * a.W, C, a.W, dst, C);
      } else {
        for (int64_t ch = 0; ch < C; ++ch)
          for (int64_t w = 0; w < a.W; ++w) dst[w * C + ch] = src[ch * a.H * a.W + w];
      }
    }
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t ty = 0; ty < nty; ++ty)
      for (int64_t tx = 0; tx < tw; ++tx)
        a.input_tile(pad + ((i * rows + 4 * ty) * wp + 4 * tx) * C, wp * C, C,
                     v + ((i * nty + ty) * tw + tx) * C, T * C);
  // Blocks of tiles by blocks of output channels: a block's 36 products land in M[tile][xi][o]
  // in the core's cache, and the output transform reads them there.
  for (int64_t o0 = 0; o0 < O; o0 += ob) {
    const int64_t oc = std::min(ob, O - o0);
    for (int64_t t0 = 0; t0 < T; t0 += tb) {
      const int64_t tc = std::min(tb, T - t0);
      for (int xi = 0; xi < 36; ++xi) {
        const GemmShape s{tc, oc, C, C, 1, O, 1, 36 * oc};
        sgemm_block(s, v + (xi * T + t0) * C, a.u + xi * C * O + o0, m + xi * oc, gs, a.isa);
      }
      for (int64_t t = t0; t < t0 + tc; ++t) {
        const int64_t i = t / (nty * tw), ty = t / tw % nty, tx = t % tw;
        a.output_tile(m + (t - t0) * 36 * oc, oc, oc,
                      yt + ((i * yrows + 4 * ty) * a.OW + 4 * tx) * O + o0, a.OW * O, O,
                      int(std::min<int64_t>(4, yrows - 4 * ty)),
                      int(std::min<int64_t>(4, a.OW - 4 * tx)));
      }
    }
  }
  // The outputs back to [N, O, OH, OW].
  for (int64_t i = 0; i < ni; ++i)
    for (int64_t r = 0; r < yrows; ++r) {
      float* dst = a.y + ((n0 + i) * O * a.OH + 4 * ty0 + r) * a.OW;  // channel o's row at o OH OW
      const float* src = yt + (i * yrows + r) * a.OW * O;
      if (a.isa > 0) {
        transpose_rows(src, O, a.OW, O, dst, a.OH * a.OW);
      } else {
        for (int64_t o = 0; o < O; ++o)
          for (int64_t w = 0; w < a.OW; ++w) dst[o * a.OH * a.OW + w] = src[w * O + o];
      }
    }
}

void wino_launch(const void* p, ThreadPool& pool) {
  const WinoArgs& a = *static_cast<const WinoArgs*>(p);
  const uint64_t v = a.w_src ? a.w_src->version() : ~uint64_t(0);
  if (!a.w_src || a.u_version != v) {
    a.u_version = ~uint64_t(0);  // until the transform below is done
    pool.run((a.O + 7) / 8, weight_task, p);
    a.u_version = v;
  }
  pool.run(a.tasks, conv_task, p);
}

// The launch over these buffers (shapes as the op's attrs say).
Launch make_launch(PlanStorage& storage, ValueId node, const Shape& xs, const Shape& ws, int64_t p,
                   bool flipped, const float* x, const float* w, float* y, const Buffer* w_src = nullptr) {
  auto* a = storage.make<WinoArgs>();
  a->x = x, a->w = w, a->y = y;
  a->w_src = may_keep_derived_copy(w_src) ? w_src : nullptr;
  a->u_version = ~uint64_t(0);
  a->N = xs[0], a->C = xs[1], a->H = xs[2], a->W = xs[3];
  a->O = flipped ? ws[1] : ws[0];
  a->OH = a->H + 2 * p - 2, a->OW = a->W + 2 * p - 2, a->p = p, a->flipped = flipped;
  a->th = (a->OH + 3) / 4, a->tw = (a->OW + 3) / 4;
  // About 300 KB of transformed inputs per task (whole images when they fit).
  const int64_t target = std::max<int64_t>(2048 / a->C, a->tw);
  if (a->th * a->tw <= target) {
    a->imgs = std::clamp<int64_t>(target / (a->th * a->tw), 1, a->N);
    a->bands = 1, a->band_rows = a->th;
    a->tasks = (a->N + a->imgs - 1) / a->imgs;
  } else {
    a->imgs = 1, a->band_rows = std::max<int64_t>(1, target / a->tw);
    a->bands = (a->th + a->band_rows - 1) / a->band_rows;
    a->tasks = a->N * a->bands;
  }
  const int64_t T = a->imgs * a->band_rows * a->tw, rows = 4 * a->band_rows + 2, wp = 4 * a->tw + 2;
  const int64_t ob = std::min<int64_t>(a->O, kOutBlock),
                tb = std::max<int64_t>(1, kBlockFloats / (36 * ob));
  a->scratch_floats = a->imgs * rows * wp * a->C + 36 * T * a->C + 36 * tb * ob +
                      a->imgs * 4 * a->band_rows * a->OW * a->O + a->C * ob + 5 * 16;
  const Isa isa = active_isa();
  a->isa = isa == Isa::Avx512 ? 2 : isa == Isa::Avx2 ? 1 : 0;
  a->input_tile = isa == Isa::Avx512 ? avx512::winograd_input_tile
                  : isa == Isa::Avx2 ? avx2::winograd_input_tile
                                     : scalar::winograd_input_tile;
  a->output_tile = isa == Isa::Avx512 ? avx512::winograd_output_tile
                   : isa == Isa::Avx2 ? avx2::winograd_output_tile
                                      : scalar::winograd_output_tile;
  a->u = storage.sizing()
             ? nullptr
             : static_cast<float*>(storage.persistent(sizeof(float) * size_t(36 * a->O * a->C)));
  return Launch{wino_launch, a, node};
}
}  // namespace

Launch lower_conv3x3(LowerCtx& c) {
  const Node& n = c.node;
  if (n.dtype != DType::F32) throw Error("conv3x3: float32 only");
  const Shape &xs = c.in_shape(0), &ws = c.in_shape(1);
  const int64_t p = n.attr<attr::Conv3x3>().pad;
  const bool flipped = n.attr<attr::Conv3x3>().flipped;
  const auto* x = static_cast<const float*>(c.in[0]);
  const auto* w = static_cast<const float*>(c.in[1]);
  const Buffer* w_src = c.in_param.size() > 1 ? c.in_param[1] : nullptr;
  Launch own = make_launch(c.storage, c.id, xs, ws, p, flipped, x, w, static_cast<float*>(c.out), w_src);
  c.kernel = "winograd";
  if (!fast_kernels()) return own;
  // Fast mode: oneDNN's convolutions may be chosen instead (they round differently). The flipped
  // form is the data gradient of the convolution with weights w ([O, C, 3, 3]) and padding 2 - p.
  const Shape& ys = n.shape;
  passes::ConvGeom g{};
  g.KH = g.KW = 3, g.sh = g.sw = g.dh = g.dw = 1;
  if (!flipped) {
    g.kind = passes::ConvKind::Forward;
    g.N = xs[0], g.C = xs[1], g.H = xs[2], g.W = xs[3], g.O = ys[1], g.OH = ys[2], g.OW = ys[3];
    g.pt = g.pl = g.pb = g.pr = p;
  } else {
    g.kind = passes::ConvKind::BwdData;
    g.N = xs[0], g.O = xs[1], g.OH = xs[2], g.OW = xs[3], g.C = ys[1], g.H = ys[2], g.W = ys[3];
    g.pt = g.pl = g.pb = g.pr = 2 - p;
  }
  const ValueId id = c.id;
  ProbeLowering on_probe = [id, xs, ws, p, flipped](PlanStorage& storage, float* px, float* pw,
                                                    float* py) {
    return make_launch(storage, id, xs, ws, p, flipped, px, pw, py);
  };
  return select_onednn(c, g, x, w, own, on_probe, "winograd");
}

}  // namespace synoros::kernels
