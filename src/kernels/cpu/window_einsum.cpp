// Window contractions: out[..., l] = sum_r X[..., l + ..., r] * W[..., r] where the weights W do
// not vary along the output's innermost label l and X reads it with unit stride, through
// zero-padding gates (depthwise and channel-window convolutions, 1-D convolutions along a row,
// a matrix times a vector along its rows). As batched GEMMs these degenerate into matrix-vector
// products over a gathered, window-times larger copy of X; here each output row is a few vector
// accumulators that every (r, row) pair updates with one broadcast weight and one masked load of
// X, and gated-off elements load as 0.
//
// Bits: each output is one FMA chain from +0 over the contracted labels in the first operand's
// order, gated elements contributing fma(0, w, acc) -- exactly what the gather + GEMM lowering
// computes. The kernel is AVX-512 only; on other instruction sets the contraction stays on the
// gather + GEMM path, which gives the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "synoros/config.hpp"
#include "ir/einsum_spec.hpp"
#include "kernels/cpu/window_args.hpp"
#include "kernels/cpu/window_einsum.hpp"

namespace synoros::kernels {

namespace {
using namespace window;

// Lanes [j0, j0 + 16) of the row restricted to [lo, hi).
inline __mmask16 lanes16(int64_t j0, int64_t lo, int64_t hi) {
  int64_t a = std::max<int64_t>(lo - j0, 0), b = std::min<int64_t>(hi - j0, 16);
  if (b <= a) return 0;
  uint32_t m = (b >= 32 ? ~0u : ((1u << b) - 1)) & ~((1u << a) - 1);
  return __mmask16(m);
}

template <int NV>
__attribute__((target("avx512f"))) void seg_avx512(const WindowArgs& a, const RowBase& b, int64_t j0) {
  __m512 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t r = 0; r < a.nred; ++r) {
    int64_t xo, wo, g0[kMaxGates], lo, hi;
    red_entry(a, b, r, xo, wo, g0);
    valid_range(a, g0, lo, hi);
    __m512 wv = _mm512_set1_ps(a.w[wo]);
    const float* xp = a.x + xo;
    for (int v = 0; v < NV; ++v) {
      int64_t j = j0 + 16 * v;
      __m512 xv = _mm512_maskz_loadu_ps(lanes16(j, lo, hi), xp + j);
      acc[v] = _mm512_fmadd_ps(xv, wv, acc[v]);
    }
  }
  float* y = a.out + b.out;
  for (int v = 0; v < NV; ++v) {
    int64_t j = j0 + 16 * v;
    _mm512_mask_storeu_ps(y + j, lanes16(j, 0, a.len), acc[v]);
  }
}

template <int NV, int RB, int NRG, bool SHARED_W>
__attribute__((target("avx512f"))) void rows_block_avx512(const WindowArgs& a, const RowBase& b0) {
  // Row q of the block is row 0 plus q steps along the last outer label.
  const int last = a.n_outer - 1;
  const int64_t sx = last >= 0 ? a.outer_x[last] : 0, sw = last >= 0 ? a.outer_w[last] : 0;
  __m512 acc[RB][NV];
  const float* xq[RB];
  const float* wq[RB];
  int64_t gb[RB][NRG > 0 ? NRG : 1];
#pragma GCC unroll 4
  for (int q = 0; q < RB; ++q) {
    xq[q] = a.x + (b0.x + q * sx), wq[q] = a.w + (b0.w + q * sw);
    for (int j = 0; j < NRG; ++j)
      gb[q][j] = b0.gate[a.row_gate[j]] + (last >= 0 ? q * a.outer_gate[a.row_gate[j]][last] : 0);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[q][v] = _mm512_setzero_ps();
  }
  const int width = 2 + a.n_gates;
  const int64_t nred = a.nred;
  const int64_t* e = a.red;
  const uint16_t* m = a.masks;
  int col[NRG > 0 ? NRG : 1];
  uint64_t lim[NRG > 0 ? NRG : 1];
  for (int j = 0; j < NRG; ++j) col[j] = 2 + a.row_gate[j], lim[j] = uint64_t(a.gate_limit[a.row_gate[j]]);
  for (int64_t r = 0; r < nred; ++r, e += width, m += 4) {
    __mmask16 k[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) k[v] = m[v];
    const int64_t ex = e[0], ew = e[1];
    // The rows of a block that differ along a label the weights do not carry (the image rows
    // of a depthwise convolution) share one broadcast weight per r.
    const __m512 w0 = _mm512_set1_ps(wq[0][ew]);
#pragma GCC unroll 4
    for (int q = 0; q < RB; ++q) {
      __mmask16 on = 0xFFFF;
      // the coordinate in [0, limit): one unsigned compare per gate
#pragma GCC unroll 2
      for (int j = 0; j < NRG; ++j) on &= uint64_t(gb[q][j] + e[col[j]]) < lim[j] ? 0xFFFF : 0;
      __m512 wv = SHARED_W ? w0 : _mm512_set1_ps(wq[q][ew]);
      const float* xp = xq[q] + ex;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[q][v] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(__mmask16(k[v] & on), xp + 16 * v), wv, acc[q][v]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < RB; ++q) {
    float* y = a.out + (b0.out + q * a.len);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(y + 16 * v, lanes16(16 * v, 0, a.len), acc[q][v]);
  }
}

// The grid form over RB rows: per input row i and column shift kw one masked load per vector
// (zeros for a row outside the image: gated taps still contribute fma(0, w, acc)), then one FMA
// into each output row q = i - kh it reaches. Each output still sees its taps in r order
// (kh-major, kw-minor), so the bits are those of the generic form.
template <int NV, int RB, int KH, int KW>
__attribute__((target("avx512f"))) void grid_block_avx512(const WindowArgs& a, const RowBase& b0) {
  const int last = a.n_outer - 1;
  const int64_t sx = a.outer_x[last];
  const int width = 2 + a.n_gates;
  __m512 wv[KH * KW];
#pragma GCC unroll 16
  for (int r = 0; r < KH * KW; ++r) wv[r] = _mm512_set1_ps(a.w[b0.w + a.red[r * width + 1]]);
  __m512 acc[RB][NV];
#pragma GCC unroll 4
  for (int q = 0; q < RB; ++q)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[q][v] = _mm512_setzero_ps();
  const float* x0 = a.x + b0.x + a.grid_x0;
  const int64_t g0 = b0.gate[a.grid_gate] + a.grid_g0;
  const uint64_t lim = uint64_t(a.gate_limit[a.grid_gate]);
  __mmask16 lane[KW][NV];
#pragma GCC unroll 4
  for (int kw = 0; kw < KW; ++kw)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) lane[kw][v] = __mmask16(a.masks[kw * 4 + v]);
#pragma GCC unroll 8
  for (int i = 0; i < RB + KH - 1; ++i) {
    const __mmask16 on = uint64_t(g0 + i) < lim ? __mmask16(0xFFFF) : __mmask16(0);
    const float* xi = x0 + i * sx;
#pragma GCC unroll 4
    for (int kw = 0; kw < KW; ++kw) {
      __m512 xv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) xv[v] = _mm512_maskz_loadu_ps(__mmask16(lane[kw][v] & on), xi + kw + 16 * v);
#pragma GCC unroll 4
      for (int kh = 0; kh < KH; ++kh) {
        const int q = i - kh;
        if (q < 0 || q >= RB) continue;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[q][v] = _mm512_fmadd_ps(xv[v], wv[kh * KW + kw], acc[q][v]);
      }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < RB; ++q) {
    float* y = a.out + (b0.out + q * a.len);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(y + 16 * v, lanes16(16 * v, 0, a.len), acc[q][v]);
  }
}

// The generic form with as many row-gate checks as the block needs (none inside the image).
template <int NV, int RB, bool SHARED_W>
void gated_block(const WindowArgs& a, const RowBase& rb, bool inside) {
  if (inside) return rows_block_avx512<NV, RB, 0, SHARED_W>(a, rb);  // also every block without row gates
  switch (a.n_row_gates) {
    case 1: return rows_block_avx512<NV, RB, 1, SHARED_W>(a, rb);
    case 2: return rows_block_avx512<NV, RB, 2, SHARED_W>(a, rb);
    case 3: return rows_block_avx512<NV, RB, 3, SHARED_W>(a, rb);
    default: return rows_block_avx512<NV, RB, 4, SHARED_W>(a, rb);
  }
}

template <int NV, int RB>
void rows_block(const WindowArgs& a, const RowBase& rb) {
  if (a.grid) return grid_block_avx512<NV, RB, 3, 3>(a, rb);
  // Rows whose row gates pass for every r (the interior of an image) skip the checks; a gate's
  // coordinate is affine in the row, so the block's first and last rows bound it.
  bool inside = true;
  const int last = a.n_outer - 1;
  for (int j = 0; j < a.n_row_gates; ++j) {
    int g = a.row_gate[j];
    int64_t c0 = rb.gate[g], c1 = rb.gate[g] + (RB - 1) * (last >= 0 ? a.outer_gate[g][last] : 0);
    inside = inside && std::min(c0, c1) + a.row_gate_min[j] >= 0 && std::max(c0, c1) + a.row_gate_max[j] < a.gate_limit[g];
  }
  if (last >= 0 && a.outer_w[last] == 0) return gated_block<NV, RB, true>(a, rb, inside);
  return gated_block<NV, RB, false>(a, rb, inside);
}

// Rows [o0, o1): runs of rows that differ only in the last outer label go in blocks of RB; the
// base offsets are computed once per run (one division per outer label).
template <int NV>
void rows_fast_avx512(const WindowArgs& a, int64_t o0, int64_t o1) {
  constexpr int RB = NV <= 2 ? 4 : 2;
  const int last = a.n_outer - 1;
  const int64_t run = last >= 0 ? a.outer_size[last] : 1;
  for (int64_t o = o0; o < o1;) {
    int64_t end = std::min(o1, (o / run + 1) * run);
    RowBase b = row_base(a, o);
    auto step = [&](int64_t k) {
      if (last < 0) return;
      b.x += k * a.outer_x[last], b.w += k * a.outer_w[last], b.out += k * a.len;
      for (int g = 0; g < a.n_gates; ++g) b.gate[g] += k * a.outer_gate[g][last];
    };
    for (; o + RB <= end; o += RB, step(RB)) rows_block<NV, RB>(a, b);
    for (; o < end; ++o, step(1)) rows_block<NV, 1>(a, b);
  }
}

__attribute__((target("avx512f"))) void row_avx512(const WindowArgs& a, int64_t o) {
  RowBase b = row_base(a, o);
  for (int64_t j0 = 0; j0 < a.len; j0 += 64) {
    int64_t nv = std::min<int64_t>((a.len - j0 + 15) / 16, 4);
    switch (nv) {
      case 1: seg_avx512<1>(a, b, j0); break;
      case 2: seg_avx512<2>(a, b, j0); break;
      case 3: seg_avx512<3>(a, b, j0); break;
      default: seg_avx512<4>(a, b, j0); break;
    }
  }
}

void window_chunk(const void* p, int64_t ch) {
  const WindowArgs& a = *static_cast<const WindowArgs*>(p);
  int64_t o0 = ch * a.rows_per_chunk, o1 = std::min(a.rows, (ch + 1) * a.rows_per_chunk);
  if (a.fast) {
    switch ((a.len + 15) / 16) {
      case 1: return rows_fast_avx512<1>(a, o0, o1);
      case 2: return rows_fast_avx512<2>(a, o0, o1);
      case 3: return rows_fast_avx512<3>(a, o0, o1);
      default: return rows_fast_avx512<4>(a, o0, o1);
    }
  }
  for (int64_t o = o0; o < o1; ++o) row_avx512(a, o);
}

void window_launch(const void* p, ThreadPool& pool) {
  const WindowArgs& a = *static_cast<const WindowArgs*>(p);
  pool.run((a.rows + a.rows_per_chunk - 1) / a.rows_per_chunk, window_chunk, p);
}

void cols_launch(const void* p, ThreadPool& pool) {
  const ColsArgs& ca = *static_cast<const ColsArgs*>(p);
  pool.run((ca.w.rows + ca.w.rows_per_chunk - 1) / ca.w.rows_per_chunk, cols_chunk, p);
}

bool has(const std::string& s, char l) { return s.find(l) != std::string::npos; }

bool& enabled_slot() {
  static bool on = config::flag("SYNOROS_WINDOW_EINSUM", true);
  return on;
}
}  // namespace

bool window_einsum_enabled() { return enabled_slot(); }
void set_window_einsum(bool on) { enabled_slot() = on; }

std::optional<Launch> lower_window_einsum(LowerCtx& c, const EinsumSpec& e) {
  // AVX-512 kernels, and on AVX2 the weight-column form (window_cols.cpp): elsewhere the gather +
  // GEMM path computes the same bits.
  const bool avx512 = active_isa() == Isa::Avx512, avx2 = active_isa() == Isa::Avx2;
  if (!window_einsum_enabled() || !(avx512 || avx2) || c.node.dtype != DType::F32 || e.in.size() != 2 ||
      e.out.empty())
    return std::nullopt;
  const std::string& lo = e.out;
  char l = lo.back();
  int64_t len = e.size[int(l)];
  if (len < 4) return std::nullopt;  // a few lanes per vector: the GEMM path does better
  int xi = has(e.in[0], l) ? 0 : 1;
  if (has(e.in[size_t(1 - xi)], l) || !has(e.in[size_t(xi)], l)) return std::nullopt;
  const std::string &lx = e.in[size_t(xi)], &lw = e.in[size_t(1 - xi)];
  std::vector<int64_t> sx = c.in_stride(size_t(xi)), sw = c.in_stride(size_t(1 - xi));
  std::vector<passes::ViewGate> gates = c.in_gate(size_t(xi));
  if (!c.in_gate(size_t(1 - xi)).empty() || gates.size() > size_t(kMaxGates)) return std::nullopt;
  if (sx[lx.find(l)] != 1) return std::nullopt;
  // A GEMM over the weights' own output labels (a pointwise or full convolution, even with few
  // output channels) reuses each loaded X several times. On AVX-512 those stay on the GEMM path
  // (and its measured convolution lowering); on AVX2 one such label (the output channels) takes
  // the weight-column form, whose blocks of channels share every X load, when its rows are short
  // (the unfolded gather is what costs there). Matrix-vector shapes come here.
  int64_t w_cols = 1, nred = 1;
  std::string red, wcol;
  for (char q : e.in[0])
    if (!has(lo, q)) red += q;  // contracted labels, in the first operand's order (the GEMM's K)
  for (char q : red) nred *= e.size[int(q)];
  for (char q : lo)
    if (has(lw, q) && !has(lx, q) && e.size[int(q)] > 1) w_cols *= e.size[int(q)], wcol += q;
  for (char q : lx)
    if (!has(lo, q) && !has(lw, q)) return std::nullopt;  // summed within one operand
  for (char q : lw)
    if (!has(lo, q) && !has(lx, q)) return std::nullopt;
  // On AVX2 every such contraction takes the column form (a depthwise one as blocks of one
  // column). Rows shorter than 7 (a weight gradient's kernel width) would leave most lanes idle;
  // with more than 16 columns the GEMM's higher FMA rate outweighs the gather it needs (measured
  // on AVX2: 16 -> 16 channels about even, 32 -> 64 channels 1.7x slower).
  // Only windows (X read through padding gates, or a contracted label stepping along the row as
  // the row's own label does): a plain matrix product needs no gather and stays a GEMM.
  bool windowed = !gates.empty();
  for (char q : red)
    if (has(lx, q) && e.size[int(q)] > 1 && sx[lx.find(q)] == 1) windowed = true;
  const bool cols = avx2;
  if (cols ? !windowed || wcol.size() > 1 || len > 64 || len < 7 || w_cols > 16 : w_cols > 1) return std::nullopt;
  if (nred > kMaxReduce || nred < 1 || lo.size() - 1 > size_t(kMaxOuter)) return std::nullopt;
  // Fewer than 4 output rows longer than 64 (a vector times a matrix, 1 x K @ K x N): the
  // general form's blocks of rows would run one or two FMA chains at a time, latency-bound
  // (32.6 us for 1x512x512, where the GEMM providers, many columns' chains in flight, take 12).
  int64_t outer_rows = 1;
  for (size_t d = 0; d + 1 < lo.size(); ++d) outer_rows *= e.size[int(lo[d])];
  if (outer_rows < 4 && len > 64) return std::nullopt;

  ColsArgs* ca = cols ? c.args<ColsArgs>() : nullptr;
  WindowArgs* a = cols ? &ca->w : c.args<WindowArgs>();
  a->x = static_cast<const float*>(c.in[size_t(xi)]);
  a->w = static_cast<const float*>(c.in[size_t(1 - xi)]);
  a->out = static_cast<float*>(c.out);
  a->len = len;
  a->n_outer = int(lo.size() - 1);
  a->n_gates = int(gates.size());
  a->rows = 1;
  auto stride_in = [&](const std::string& labels, const std::vector<int64_t>& st, char q) -> int64_t {
    size_t p = labels.find(q);
    return p == std::string::npos ? 0 : st[p];
  };
  auto gate_part = [&](const passes::ViewGate& g, char q) -> int64_t {
    size_t p = lx.find(q);
    return p == std::string::npos ? 0 : g.cstride[p];
  };
  for (int d = 0; d < a->n_outer; ++d) {
    char q = lo[size_t(d)];
    a->outer_size[d] = e.size[int(q)];
    a->rows *= e.size[int(q)];
    a->outer_x[d] = stride_in(lx, sx, q);
    a->outer_w[d] = stride_in(lw, sw, q);
    for (size_t g = 0; g < gates.size(); ++g) a->outer_gate[g][d] = gate_part(gates[g], q);
  }
  for (size_t g = 0; g < gates.size(); ++g) {
    a->gate_c0[g] = gates[g].c0;
    a->gate_limit[g] = gates[g].limit;
    a->gate_l[g] = gate_part(gates[g], l);
  }
  a->nred = nred;
  int64_t width = 2 + a->n_gates;
  auto* tab = static_cast<int64_t*>(c.storage.persistent(size_t(nred * width) * 8));
  std::vector<int64_t> idx(red.size(), 0);
  for (int64_t r = 0; r < nred; ++r) {
    int64_t* t = tab + r * width;
    std::fill(t, t + width, 0);
    for (size_t d = 0; d < red.size(); ++d) {
      t[0] += idx[d] * stride_in(lx, sx, red[d]);
      t[1] += idx[d] * stride_in(lw, sw, red[d]);
      for (size_t g = 0; g < gates.size(); ++g) t[2 + g] += idx[d] * gate_part(gates[g], red[d]);
    }
    for (size_t d = red.size(); d-- > 0;) {
      if (++idx[d] < e.size[int(red[d])]) break;
      idx[d] = 0;
    }
  }
  a->red = tab;
  // The fast form: every gate constant along the row (an on/off switch per row and r) or
  // independent of the outer labels (folded into per-r lane masks).
  a->fast = len <= 64;
  for (int g = 0; g < a->n_gates && a->fast; ++g)
    if (a->gate_l[g] != 0)
      for (int d = 0; d < a->n_outer; ++d) a->fast = a->fast && a->outer_gate[g][d] == 0;
  a->masks = nullptr;
  std::vector<std::pair<int64_t, int64_t>> lane_ranges;  // per r: the lanes its X loads cover
  if (a->fast) {
    auto* m = static_cast<uint16_t*>(c.storage.persistent(size_t(nred) * 4 * sizeof(uint16_t)));
    WindowArgs lane_gates = *a;  // the row-independent gates alone
    lane_gates.n_gates = 0;
    int64_t g0[kMaxGates];
    int k = 0;
    for (int g = 0; g < a->n_gates; ++g)
      if (a->gate_l[g] != 0) {
        lane_gates.gate_l[k] = a->gate_l[g], lane_gates.gate_limit[k] = a->gate_limit[g];
        ++k;
      }
    lane_gates.n_gates = k;
    for (int64_t r = 0; r < nred; ++r) {
      k = 0;
      for (int g = 0; g < a->n_gates; ++g)
        if (a->gate_l[g] != 0) g0[k++] = a->gate_c0[g] + tab[r * width + 2 + g];
      int64_t lo_r, hi_r;
      valid_range(lane_gates, g0, lo_r, hi_r);
      for (int v = 0; v < 4; ++v) m[r * 4 + v] = lanes16(16 * v, lo_r, hi_r);
      lane_ranges.push_back({lo_r, hi_r});
    }
    a->masks = m;
  }
  a->n_row_gates = 0;
  for (int g = 0; g < a->n_gates; ++g)
    if (a->gate_l[g] == 0) {
      int j = a->n_row_gates++;
      a->row_gate[j] = g;
      a->row_gate_min[j] = a->row_gate_max[j] = tab[2 + g];
      for (int64_t r = 1; r < nred; ++r) {
        a->row_gate_min[j] = std::min(a->row_gate_min[j], tab[r * width + 2 + g]);
        a->row_gate_max[j] = std::max(a->row_gate_max[j], tab[r * width + 2 + g]);
      }
    }
  // The grid form: one row gate and one lane gate, r = kh * KW + kw with the row gate's part
  // kh, the lane masks those of kw, x offsets kh * (the output rows' x stride) + kw, and the
  // same weights for every output row.
  a->grid = false;
  if (a->fast && a->n_row_gates == 1 && a->n_gates == 2 && a->n_outer >= 1 && a->outer_w[a->n_outer - 1] == 0) {
    const int last = a->n_outer - 1, g = a->row_gate[0];
    int kw = 1;
    while (kw < nred && tab[kw * width + 2 + g] == tab[2 + g]) ++kw;
    bool ok = a->outer_gate[g][last] == 1 && kw == 3 && nred == 9;  // the 3x3 window, unrolled
    for (int64_t r = 0; r < nred && ok; ++r) {
      int64_t kh = r / kw, col = r % kw;
      const int64_t* t = tab + r * width;
      ok = t[0] == tab[0] + kh * a->outer_x[last] + col && t[2 + g] == tab[2 + g] + kh;
      for (int v = 0; v < 4 && ok; ++v) ok = a->masks[r * 4 + v] == a->masks[col * 4 + v];
    }
    if (ok) {
      a->grid = true;
      a->grid_kh = int(nred / kw), a->grid_kw = int(kw), a->grid_gate = g;
      a->grid_x0 = tab[0], a->grid_g0 = tab[2 + g];
    }
  }
  // Chunks of about 32K multiply-adds: a fixed split of the rows, whatever the thread count.
  a->rows_per_chunk = std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, nred * len));
  if (cols) {
    if (!a->fast) return std::nullopt;
    a->grid = false;
    // Without a column label (depthwise): one column, every row a block of its own.
    ca->col_dim = wcol.empty() ? -1 : int(lo.find(wcol[0]));
    ca->col_size = wcol.empty() ? 1 : e.size[int(wcol[0])];
    ca->col_w = wcol.empty() ? 0 : a->outer_w[ca->col_dim];
    ca->col_out = len;
    if (!wcol.empty())
      for (int d = ca->col_dim + 1; d < a->n_outer; ++d) ca->col_out *= a->outer_size[d];
    // Blocks as even as the register budget allows (6 channels: 3 + 3, not 5 + 1).
    int64_t most = cols_block_size(len), nblocks = (ca->col_size + most - 1) / most;
    auto* block = static_cast<int32_t*>(c.storage.persistent(size_t(ca->col_size) * sizeof(int32_t)));
    std::fill(block, block + ca->col_size, 0);
    for (int64_t bi = 0, start = 0; bi < nblocks; ++bi) {
      int64_t size = ca->col_size / nblocks + (bi < ca->col_size % nblocks ? 1 : 0);
      block[start] = int32_t(size);
      start += size;
    }
    ca->block = block;
    // The distinct lane masks, 8 vectors of 8 lanes each; index 0 is the whole row's.
    std::vector<std::pair<int64_t, int64_t>> distinct = {{0, len}};
    auto* index = static_cast<int32_t*>(c.storage.persistent(size_t(nred) * sizeof(int32_t)));
    for (int64_t r = 0; r < nred; ++r) {
      size_t k = 0;
      while (k < distinct.size() && distinct[k] != lane_ranges[size_t(r)]) ++k;
      if (k == distinct.size()) distinct.push_back(lane_ranges[size_t(r)]);
      index[r] = int32_t(k);
    }
    auto* masks = static_cast<int32_t*>(c.storage.persistent(distinct.size() * 64 * sizeof(int32_t)));
    for (size_t k = 0; k < distinct.size(); ++k)
      for (int64_t i = 0; i < 64; ++i) masks[k * 64 + size_t(i)] = i >= distinct[k].first && i < distinct[k].second ? -1 : 0;
    auto* full = static_cast<uint8_t*>(c.storage.persistent(distinct.size()));
    for (size_t k = 0; k < distinct.size(); ++k) {
      full[k] = 0;
      for (int v = 0; v < 8; ++v)
        if (distinct[k].first <= 8 * v && 8 * v + 8 <= distinct[k].second) full[k] = uint8_t(full[k] | (1u << v));
    }
    ca->lane_index = index;
    ca->lane_masks = masks;
    ca->lane_full = full;
    c.kernel = "window-cols";  // (no streamed epilogue: a chunk's blocks write other chunks' rows too)
    return Launch{cols_launch, ca, c.id};
  }
  c.kernel = a->grid ? "window-3x3" : "window";
  c.chunks = {window_chunk, a, (a->rows + a->rows_per_chunk - 1) / a->rows_per_chunk, a->rows_per_chunk * len};
  return Launch{window_launch, a, c.id};
}

}  // namespace synoros::kernels
