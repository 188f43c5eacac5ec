#pragma once

#include <cstdint>

#include "synoros/ir.hpp"

namespace synoros::kernels {

// out[0..n) = F(in0[i*s0], in1[i*s1], ...): one run of an elementwise map.
using LineFn = void (*)(void* out, const void* const* in, const int64_t* s, int64_t n);

// The sum of term(0) .. term(n - 1) as the reductions sum a row: term t into lane t % 8 of its
// 4096-element segment, the lanes combined pairwise, the segments added in order from +0. The
// scalar definition that the vector builds of the row kernels reproduce.
template <class F>
auto canonical_sum(int64_t n, F term) {
  using T = decltype(term(int64_t(0)));
  T total = 0;
  for (int64_t seg = 0; seg < n; seg += 4096) {
    T l[8] = {};
    for (int64_t k = seg; k < (n < seg + 4096 ? n : seg + 4096); ++k) l[(k - seg) % 8] += term(k);
    total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  }
  return total;
}

namespace scalar { LineFn pick_line(Op op, DType t); }
namespace avx2 { LineFn pick_line(Op op, DType t); }
namespace avx512 { LineFn pick_line(Op op, DType t); }
// AVX2 builds of the canonical float softmax's steps on a contiguous row (composite.cpp):
// the row's maximum, y = exp(x - m) with the sum of y in the canonical order (y null: the sum
// alone), y /= s.
namespace avx2 {
float row_max(const float* x, int64_t n);
float softmax_exp_sum(const float* x, float* y, int64_t n, float m);
void divide_row(float* y, int64_t n, float s);
// y *= s, and y = y a + x (a product and a sum, each rounded): attention's scaling and rescaling.
void scale_row(float* y, int64_t n, float s);
void scale_add_row(float* y, const float* x, int64_t n, float a);
// Attention's score row: y *= s over its first `seen` elements, -inf over the rest (keys after
// the query); returns the maximum of the scaled elements (NaN skipped), as row_max would.
float scale_mask_max(float* y, int64_t seen, int64_t n, float s);
// The canonical float layernorm's steps (composite.cpp): the mean and 1/sqrt(var + eps) of
// `rows` consecutive rows of n, y = ((x - mean) r) w + b of one row (w and b null: without them),
// the gradient's two means (of gw = g w and of gw xh) for `rows` rows, and dx of one row.
void layernorm_stats(const float* x, int64_t n, int64_t rows, float eps, float* mean, float* r);
void layernorm_apply(const float* x, float* y, int64_t n, float mean, float r, const float* w, const float* b);
void layernorm_grad_sums(const float* x, const float* g, const float* w, int64_t n, int64_t rows, const float* mean,
                         const float* r, float* mg, float* mgx);
// Adds g xh and g of `rows` rows into dw and db (one chain per column, rows in order).
void layernorm_param_rows(const float* x, const float* g, int64_t n, int64_t rows, const float* mean, const float* r,
                          float* dw, float* db);
void layernorm_grad_apply(const float* x, const float* g, const float* w, float* dx, int64_t n, float mean, float r,
                          float mg, float mgx);
// layernorm_grad_apply and layernorm_param_rows of one row in one pass: the same operations, so
// the same bits as the two calls.
void layernorm_grad_apply_param(const float* x, const float* g, const float* w, float* dx, int64_t n, float mean,
                                float r, float mg, float mgx, float* dw, float* db);
// out[j] = canonical_sum of the rounded products a[j a_rs + k] b[j b_rs + k] over k < n, for
// `rows` rows (attention's row sums of g o).
void row_dots(const float* a, int64_t a_rs, const float* b, int64_t b_rs, int64_t n, int64_t rows, float* out);
}  // namespace avx2
namespace avx512 {
float softmax_exp_sum(const float* x, float* y, int64_t n, float m);
void softmax_exp_sum4(const float* const* x, float* const* y, int64_t n, const float* m, float* out);
// avx2's row steps sixteen floats at a time: the same operations on each element, so the same
// bits. A maximum of zeros may differ in its sign alone (as the scalar and AVX2 builds' already
// do), which no consumer's bits depend on: a row holding +0 and -0 sums to at least 2, so
// exp(x - m), (x - m) - log(s), m + log(l) and the comparisons m == m' come out the same.
float row_max(const float* x, int64_t n);
float scale_mask_max(float* y, int64_t seen, int64_t n, float s);
void divide_row(float* y, int64_t n, float s);
void scale_row(float* y, int64_t n, float s);
void scale_add_row(float* y, const float* x, int64_t n, float a);
}
// The row steps above in one vector build: AVX-512's for isa 2 (Isa::Avx512), else AVX2's.
struct RowSteps {
  float (*max)(const float* x, int64_t n);
  float (*scale_mask_max)(float* y, int64_t seen, int64_t n, float s);
  void (*divide)(float* y, int64_t n, float s);
  void (*scale)(float* y, int64_t n, float s);
  void (*scale_add)(float* y, const float* x, int64_t n, float a);
};
const RowSteps& row_steps(int isa);
// avx2::softmax_exp_sum in the widest build the active instruction set has (AVX-512's takes
// sixteen exps at a time and adds them in AVX2's order: the same bits).
float softmax_exp_sum_vec(const float* x, float* y, int64_t n, float m);
// The same for four rows (row j: x[j] to y[j] (null: the sum alone), its own m[j], its sum to out[j]): one row's sum
// is a chain of dependent adds, so AVX-512 keeps four rows' chains in flight. Each row's bits
// are softmax_exp_sum_vec's.
void softmax_exp_sum4_vec(const float* const* x, float* const* y, int64_t n, const float* m, float* out);
// The active ISA's line kernel for an elementwise op, or nullptr.
LineFn pick_line(Op op, DType t);

// A cheap float op folded into the operand its consumer reads: the operand passes through up
// to kMaxStages of them in registers on its way in, each exactly the op it replaces (same
// operation, same operand order), so a fused chain needs no pass over the block per cheap op.
enum class StageKind : uint8_t { MulC, CMul, AddC, CAdd, SubC, CSub, Relu };  // C: the scalar's side
struct Stage {
  StageKind kind;
  const float* c;  // the scalar operand, read at run time (null for Relu)
};
constexpr int kMaxStages = 4;
struct Stages {
  int n[2] = {0, 0};  // per operand
  Stage s[2][kMaxStages];
};
using StagedLineFn = void (*)(void* out, const void* const* in, const int64_t* s, int64_t n, const Stages& st);
namespace scalar { StagedLineFn pick_staged(Op op, DType t); }
namespace avx2 { StagedLineFn pick_staged(Op op, DType t); }
namespace avx512 { StagedLineFn pick_staged(Op op, DType t); }
// The active ISA's staged line kernel, or nullptr where operands cannot take stages.
StagedLineFn pick_staged(Op op, DType t);

}  // namespace synoros::kernels
