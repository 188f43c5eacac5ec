// Affine views: chains of permute, slice, stride, expand and (stride-compatible) reshape read
// straight from their base buffer as (offset, strides), so they need never be materialised.
#pragma once

#include <optional>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros::passes {

struct AffineView {
  ValueId base = kNoValue;
  int64_t offset = 0;            // elements
  Shape shape;
  std::vector<int64_t> strides;  // elements; 0 along broadcast dims
};

bool is_affine_view_op(Op op);  // permute, slice, stride, expand, reshape

// Applies one affine view op to `v`; false if it cannot be expressed (a reshape across
// non-mergeable strides).
bool apply_view(const Node& n, AffineView& v);

// Strides for viewing (shape, strides) as new_shape without copying, numpy's rule.
bool reshape_strides(const Shape& shape, const std::vector<int64_t>& strides, const Shape& new_shape,
                     std::vector<int64_t>& out);

}  // namespace synoros::passes
