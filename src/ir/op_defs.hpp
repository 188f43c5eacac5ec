// Declarations of the per-op functions the op table points at. Internal to the library.
#pragma once

#include <vector>

#include "synoros/ir.hpp"

namespace synoros::opdefs {

using GradIn = std::vector<ValueId>;
using OracleIn = std::vector<const HostTensor*>;

// Each op's shape and dtype rule (src/ir/shape_rules.cpp), VJP (src/autodiff/vjp.cpp: appends the
// nodes computing each input's adjoint, kNoValue where none flows) and float64 oracle
// (src/oracle/oracle_ops.cpp), declared from the op list. An elementwise map of N inputs shares
// infer_mapN, and every map oracle_map.
void infer_map1(const Graph&, Node&);
void infer_map2(const Graph&, Node&);
void infer_map3(const Graph&, Node&);
HostTensor oracle_map(const Node&, const OracleIn&);
void no_vjp(Graph&, ValueId, ValueId, GradIn&);  // marks an op as not differentiable
void vjp_none(Graph&, ValueId, ValueId, GradIn&);  // differentiable, with a zero gradient
#define SYNOROS_OP(Enum, ident, arity, kind, infer, vjp, oracle, ...) \
  void infer(const Graph&, Node&);                                    \
  void vjp(Graph&, ValueId, ValueId, GradIn&);                        \
  HostTensor oracle(const Node&, const OracleIn&);
#define SYNOROS_MAP(Enum, ident, arity, vjp, ...) void vjp(Graph&, ValueId, ValueId, GradIn&);
#include "synoros/ops.def"

// The views along one axis as (axis, a, b), the axis normalised: slice (start, end), pad (before,
// after), stride (step), shift (offset), unfold and fold (window, dilation).
struct AxisArgs {
  int axis;
  int64_t a, b;
};
AxisArgs axis_args(const Node& n, size_t rank);
// Unfold's and fold's attr::Window, checked, the axis normalised: unfold position i reads
// i * stride + (j - center) * dilation, center = (window - 1) / 2.
struct WindowArgs {
  int axis;
  int64_t window, dilation, stride, center, length;  // length: fold's output extent (-1: same)
};
WindowArgs window_args(const Node& n, size_t rank);
// attr::Reduce's axes normalised and sorted; none given means all axes.
std::vector<int> reduce_axes(const Node& n, const Shape& in);

}  // namespace synoros::opdefs
