// The arguments of a window contraction (see window_einsum.cpp) and the index arithmetic its
// kernels share: the AVX-512 kernels there and the AVX2 weight-column kernel in window_cols.cpp.
#pragma once

#include <algorithm>
#include <cstdint>

namespace synoros::kernels::window {

constexpr int kMaxOuter = 12, kMaxGates = 4;
constexpr int64_t kMaxReduce = 4096;

struct WindowArgs {
  const float* x;
  const float* w;
  float* out;
  int64_t rows, len;  // outer output positions, innermost output length
  int n_outer, n_gates;
  int64_t outer_size[kMaxOuter], outer_x[kMaxOuter], outer_w[kMaxOuter];
  int64_t outer_gate[kMaxGates][kMaxOuter];
  int64_t gate_c0[kMaxGates], gate_limit[kMaxGates], gate_l[kMaxGates];  // gate_l: cstride along l
  int64_t nred;
  const int64_t* red;  // per r: x offset, w offset, then one coordinate part per gate
  int64_t rows_per_chunk;
  // Fast form (len <= 64, every gate either constant along the row or independent of the outer
  // labels): per r, the AVX-512 lane masks of the row's (up to) four vectors from the
  // row-independent gates; the other gates only switch a whole (row, r) pair on or off.
  bool fast;
  const uint16_t* masks;  // [nred][4]
  int n_row_gates;
  int row_gate[kMaxGates];  // the gates constant along the row
  int64_t row_gate_min[kMaxGates], row_gate_max[kMaxGates];  // of their parts over r
  // The grid form (a stride-1 3x3 window, e.g. a depthwise convolution): r = kh * grid_kw + kw
  // reads input row (output row + kh) at column shift kw, through one row gate (the input row's
  // coordinate, +1 per output row and per kh) and lane masks that depend on kw only; the
  // weights do not vary along the rows. A block of RB output rows then reads each of its
  // RB + kh - 1 input rows once per kw and feeds every accumulator that uses it.
  bool grid;
  int grid_kh, grid_kw, grid_gate;
  int64_t grid_x0, grid_g0;  // x offset and row-gate part of r = 0
};

inline int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// The output positions [lo, hi) of a row whose gates all pass, given each gate's coordinate
// at position 0 of the row.
inline void valid_range(const WindowArgs& a, const int64_t* g0, int64_t& lo, int64_t& hi) {
  lo = 0, hi = a.len;
  for (int g = 0; g < a.n_gates; ++g) {
    int64_t s = a.gate_l[g], c = g0[g], lim = a.gate_limit[g];
    if (s == 1) {  // the usual case (an unfold along the row): no division
      lo = std::max(lo, -c);
      hi = std::min(hi, lim - c);
    } else if (s == 0) {
      if (c < 0 || c >= lim) hi = 0;
    } else if (s > 0) {  // 0 <= c + i*s < lim
      lo = std::max(lo, floor_div(-c + s - 1, s));
      hi = std::min(hi, floor_div(lim - c + s - 1, s));
    } else {  // s < 0: i > (c - lim) / -s ..., i <= c / -s
      int64_t t = -s;
      lo = std::max(lo, floor_div(c - lim, t) + 1);
      hi = std::min(hi, floor_div(c, t) + 1);
    }
  }
  if (hi < lo) hi = lo;
}

struct RowBase {
  int64_t x, w, out;
  int64_t gate[kMaxGates];
};

inline RowBase row_base(const WindowArgs& a, int64_t o) {
  RowBase b{0, 0, o * a.len, {}};
  for (int g = 0; g < a.n_gates; ++g) b.gate[g] = a.gate_c0[g];
  for (int d = a.n_outer - 1; d >= 0; --d) {
    int64_t i = o % a.outer_size[d];
    o /= a.outer_size[d];
    b.x += i * a.outer_x[d];
    b.w += i * a.outer_w[d];
    for (int g = 0; g < a.n_gates; ++g) b.gate[g] += i * a.outer_gate[g][d];
  }
  return b;
}

// Reduction entry r: x offset, w offset, gate coordinates at position 0 of the row.
inline void red_entry(const WindowArgs& a, const RowBase& b, int64_t r, int64_t& xo, int64_t& wo, int64_t* g0) {
  const int64_t* e = a.red + r * (2 + a.n_gates);
  xo = b.x + e[0];
  wo = b.w + e[1];
  for (int g = 0; g < a.n_gates; ++g) g0[g] = b.gate[g] + e[2 + g];
}

// The weight-column form (window_cols.cpp): blocks of `cb` consecutive values of the output
// label `col_dim` that only the weights carry (a convolution's output channels) share every
// load of X. Its lane masks come from lane_index: per r, an index into lane_masks, the distinct
// 8-lane masks ([index][vector]) of the row-independent gates.
struct ColsArgs {
  WindowArgs w;
  int col_dim;
  int64_t col_size, col_w, col_out;  // the label's size, weight stride and output stride
  const int32_t* block;  // per value of the label: the size of the block it starts, else 0
  const int32_t* lane_index;
  const int32_t* lane_masks;  // [distinct][8 vectors][8 lanes]: -1 on, 0 off
  const uint8_t* lane_full;   // [distinct]: bit v set when vector v's lanes are all on
};
void cols_chunk(const void* p, int64_t chunk);
// The most column values one pass takes for rows of `len` outputs (<= 64).
int cols_block_size(int64_t len);

}  // namespace synoros::kernels::window
