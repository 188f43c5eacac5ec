// The window contraction's weight-column form on AVX2: out[.., o, .., l] = sum_r X[.., l + .., r]
// * W[o, .., r] where an output label o comes from the weights alone (a convolution's output
// channels, or the input channels of a stride-1 data gradient). As gather + GEMM this
// materialises the unfolded X (the window's size times the input) and packs it again; here a
// block of cb values of o keeps cb x NV vector accumulators per output row, and every masked
// load of X (zeros where the padding gates are off) feeds all cb of them.
//
// Bits: each output is one FMA chain from +0 over r in ascending order, gated elements
// contributing fma(0, w, acc) -- exactly what the gather + GEMM lowering computes.
#include <immintrin.h>

#include "kernels/cpu/window_args.hpp"

namespace synoros::kernels::window {

namespace {

// One output row of len values from NV accumulators: whole vectors stored as they are, the last
// one's head through a buffer (a masked store costs tens of cycles on some CPUs).
template <int NV>
__attribute__((target("avx2,fma"), always_inline)) inline void store_row(float* d, const __m256* acc, int64_t len) {
  const int64_t whole = len / 8;
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    if (v < whole) {
      _mm256_storeu_ps(d + 8 * v, acc[v]);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, acc[v]);
      for (int64_t i = 0; i < len - 8 * v; ++i) d[8 * v + i] = t[i];
    }
  }
}

// Every accumulator of a block at +0, where each chain starts.
template <int R, int NV>
__attribute__((target("avx2,fma"), always_inline)) inline void zero_all(__m256 (&acc)[R][NV]) {
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
}

__attribute__((target("avx2,fma"), always_inline)) inline __m256 load_x(bool on, unsigned full, int v,
                                                                        const float* xp, const int32_t* m) {
  if (!on) return _mm256_setzero_ps();
  if ((full >> v) & 1u) return _mm256_loadu_ps(xp + 8 * v);
  return _mm256_maskload_ps(xp + 8 * v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + 8 * v)));
}

// GATED: the row's row gates (the image rows of a padded window) must be checked per r; a row
// inside the image passes them all and skips the checks.
template <int NV, int CB, bool GATED>
__attribute__((target("avx2,fma"))) void cols_block(const ColsArgs& ca, const RowBase& b) {
  const WindowArgs& a = ca.w;
  __m256 acc[CB][NV];
  zero_all(acc);
  const int width = 2 + a.n_gates;
  const int nrg = GATED ? a.n_row_gates : 0;
  int col[kMaxGates];
  uint64_t lim[kMaxGates];
  int64_t gb[kMaxGates];
  for (int j = 0; j < nrg; ++j) {
    int g = a.row_gate[j];
    col[j] = 2 + g, lim[j] = uint64_t(a.gate_limit[g]), gb[j] = b.gate[g];
  }
  const float* xb = a.x + b.x;
  const float* wb = a.w + b.w;
  const int64_t* e = a.red;
  for (int64_t r = 0; r < a.nred; ++r, e += width) {
    bool on = true;
    for (int j = 0; j < nrg; ++j) on = on && uint64_t(gb[j] + e[col[j]]) < lim[j];
    const float* wr = wb + e[1];
    const int32_t k = ca.lane_index[r];
    const int32_t* m = ca.lane_masks + k * 64;
    const unsigned full = on ? ca.lane_full[k] : 0;  // vectors whose lanes are all on: plain loads
    const float* xp = xb + e[0];
    // A gated-off input row loads zeros, which still enter each chain.
    if constexpr (NV <= 3) {
      // Short rows: the X vectors stay in registers, each weight one broadcast feeding NV FMAs.
      __m256 x[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) x[v] = load_x(on, full, v, xp, m);
#pragma GCC unroll 8
      for (int j = 0; j < CB; ++j) {
        const __m256 w = _mm256_broadcast_ss(wr + j * ca.col_w);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[j][v] = _mm256_fmadd_ps(x[v], w, acc[j][v]);
      }
    } else {
      // Long rows: the CB weights stay in registers, each X vector feeding CB FMAs.
      __m256 w[CB];
#pragma GCC unroll 8
      for (int j = 0; j < CB; ++j) w[j] = _mm256_broadcast_ss(wr + j * ca.col_w);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const __m256 x = load_x(on, full, v, xp, m);
#pragma GCC unroll 8
        for (int j = 0; j < CB; ++j) acc[j][v] = _mm256_fmadd_ps(x, w[j], acc[j][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < CB; ++j) store_row<NV>(a.out + b.out + j * ca.col_out, acc[j], a.len);
}

// Registers within 16: CB * NV accumulators plus NV X vectors and one weight (short rows), or
// plus CB weights and one X vector (long rows).
constexpr int cb_for(int nv) { return nv == 1 ? 8 : nv == 2 ? 6 : nv == 3 ? 4 : nv == 4 ? 3 : nv <= 6 ? 2 : 1; }

// Without a column label (depthwise), RB rows along the last outer label that lie inside the
// image share each weight broadcast: RB * NV chains in flight instead of NV. Each output's chain
// is the same as in cols_block.
template <int NV, int RB>
__attribute__((target("avx2,fma"))) void rows_block(const ColsArgs& ca, const RowBase& b) {
  const WindowArgs& a = ca.w;
  const int64_t sx = a.outer_x[a.n_outer - 1];
  __m256 acc[RB][NV];
  zero_all(acc);
  const int width = 2 + a.n_gates;
  const float* xb = a.x + b.x;
  const float* wb = a.w + b.w;
  const int64_t* e = a.red;
  for (int64_t r = 0; r < a.nred; ++r, e += width) {
    const __m256 w = _mm256_broadcast_ss(wb + e[1]);
    const int32_t k = ca.lane_index[r];
    const int32_t* m = ca.lane_masks + k * 64;
    const unsigned full = ca.lane_full[k];
#pragma GCC unroll 8
    for (int q = 0; q < RB; ++q) {
      const float* xp = xb + q * sx + e[0];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[q][v] = _mm256_fmadd_ps(load_x(true, full, v, xp, m), w, acc[q][v]);
    }
  }
#pragma GCC unroll 8
  for (int q = 0; q < RB; ++q) store_row<NV>(a.out + b.out + q * a.len, acc[q], a.len);
}

constexpr int rb_for(int nv) { return nv == 1 ? 8 : nv == 2 ? 6 : nv == 3 ? 4 : nv == 4 ? 3 : nv <= 7 ? 2 : 1; }

template <int NV, int CB>
void block_of(const ColsArgs& a, const RowBase& b, int n, bool inside) {
  if constexpr (CB >= 1) {
    if (n == CB) return inside ? cols_block<NV, CB, false>(a, b) : cols_block<NV, CB, true>(a, b);
    return block_of<NV, CB - 1>(a, b, n, inside);
  }
}

// Whether every row gate passes for every r (a gate's coordinate is its row part plus r's part).
bool inside(const WindowArgs& a, const RowBase& b) {
  for (int j = 0; j < a.n_row_gates; ++j) {
    int g = a.row_gate[j];
    if (b.gate[g] + a.row_gate_min[j] < 0 || b.gate[g] + a.row_gate_max[j] >= a.gate_limit[g]) return false;
  }
  return true;
}

// Rows [o0, o1) that start a block of the column label; runs of rows that differ only in the
// last outer label (when that is not the column label) step their offsets instead of recomputing
// them.
template <int NV>
void rows(const ColsArgs& ca, int64_t o0, int64_t o1) {
  const WindowArgs& a = ca.w;
  const int64_t inner = ca.col_out / a.len;  // rows per step of the column label
  const int last = a.n_outer - 1;
  const bool step = last >= 0 && last != ca.col_dim;
  const int64_t run = step ? a.outer_size[last] : 1;
  constexpr int RB = rb_for(NV);
  const bool row_blocks = RB > 1 && ca.col_dim < 0 && step && a.outer_w[last] == 0;
  auto advance = [&](RowBase& b, int64_t k) {
    b.x += k * a.outer_x[last], b.w += k * a.outer_w[last], b.out += k * a.len;
    for (int g = 0; g < a.n_gates; ++g) b.gate[g] += k * a.outer_gate[g][last];
  };
  for (int64_t o = o0; o < o1;) {
    int64_t end = std::min(o1, (o / run + 1) * run);
    int n = ca.block[(o / inner) % ca.col_size];  // 0: another block's rows
    if (n) {
      RowBase b = row_base(a, o);
      while (o < end) {
        if (row_blocks && o + RB <= end && inside(a, b)) {
          RowBase lastrow = b;
          advance(lastrow, RB - 1);
          if (inside(a, lastrow)) {  // (a gate's coordinate is affine in the row: both ends suffice)
            rows_block<NV, RB>(ca, b);
            advance(b, RB);
            o += RB;
            continue;
          }
        }
        block_of<NV, cb_for(NV)>(ca, b, n, inside(a, b));
        ++o;
        if (step) advance(b, 1);
      }
    }
    o = end;
  }
}
}  // namespace

int cols_block_size(int64_t len) { return cb_for(int((len + 7) / 8)); }

void cols_chunk(const void* p, int64_t ch) {
  const ColsArgs& ca = *static_cast<const ColsArgs*>(p);
  const WindowArgs& a = ca.w;
  int64_t o0 = ch * a.rows_per_chunk, o1 = std::min(a.rows, (ch + 1) * a.rows_per_chunk);
  switch ((a.len + 7) / 8) {
    case 1: return rows<1>(ca, o0, o1);
    case 2: return rows<2>(ca, o0, o1);
    case 3: return rows<3>(ca, o0, o1);
    case 4: return rows<4>(ca, o0, o1);
    case 5: return rows<5>(ca, o0, o1);
    case 6: return rows<6>(ca, o0, o1);
    case 7: return rows<7>(ca, o0, o1);
    default: return rows<8>(ca, o0, o1);
  }
}

}  // namespace synoros::kernels::window
