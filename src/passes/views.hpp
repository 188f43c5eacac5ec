// Affine views: chains of permute, slice, stride, expand and (stride-compatible) reshape read
// straight from their base buffer as (offset, strides), so they need never be materialised.
#pragma once

#include <optional>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros::passes {

// A zero-padding gate: the element at index i reads the base only when the coordinate
// c0 + sum_d i_d * cstride_d lies in [0, limit), else it is 0. Pad and (zero-padded) Unfold add
// one gate each.
struct ViewGate {
  std::vector<int64_t> cstride;
  int64_t c0 = 0, limit = 0;
  bool operator==(const ViewGate&) const = default;
};

struct AffineView {
  ValueId base = kNoValue;
  int64_t offset = 0;            // elements; may point before the base when gates guard it
  Shape shape;
  std::vector<int64_t> strides;  // elements; 0 along broadcast dims
  std::vector<ViewGate> gates;   // empty for a pure strided view
};

bool is_affine_view_op(Op op);  // permute, slice, stride, expand, reshape
bool is_gated_view_op(Op op);   // pad, unfold: affine plus a zero-padding gate

// A value that is its input's bytes from the first one on, so it takes no launch and no buffer
// of its own: a reshape (kAlias), or a slice from 0 along an axis with only size-1 axes before it
// (the first elements of its contiguous input, as dx is of layernorm_backward's stacked result).
bool is_alias(const Graph& g, const Node& n);

// Applies one view op to `v`; false if it cannot be expressed (a reshape across non-mergeable
// strides, or a gated op when `allow_gates` is off).
bool apply_view(const Node& n, AffineView& v, bool allow_gates = false);

// A [..., T, D] operand read row by row (attention's q, k, v, o and g): batch item b (the leading
// dims flattened) starts at (b / inner) * outer + (b % inner) * inner_stride elements, its T rows
// row_stride apart, each row's D values contiguous.
struct RowsView {
  int64_t row_stride, inner, outer, inner_stride;
  int64_t item(int64_t b) const { return b / inner * outer + b % inner * inner_stride; }
};
// (shape, strides) as a RowsView; none when the innermost stride is not 1 or the leading dims do
// not merge into two (a q of [B, H, T, D] sliced and permuted from [B, T, 3 H D] has two).
std::optional<RowsView> rows_view(const Shape& shape, const std::vector<int64_t>& strides);

// Strides for viewing (shape, strides) as new_shape without copying, numpy's rule.
bool reshape_strides(const Shape& shape, const std::vector<int64_t>& strides, const Shape& new_shape,
                     std::vector<int64_t>& out);

}  // namespace synoros::passes
