// Declarations of the per-op functions the op table points at. Internal to the library.
#pragma once

#include <vector>

#include "synoros/ir.hpp"

namespace synoros::opdefs {

// ---- shape and dtype rules (src/ir/shape_rules.cpp)
void infer_leaf(const Graph&, Node&);
void infer_unary_float(const Graph&, Node&);
void infer_cast(const Graph&, Node&);
void infer_binary(const Graph&, Node&);
void infer_where(const Graph&, Node&);
void infer_reduce(const Graph&, Node&);
void infer_reshape(const Graph&, Node&);
void infer_permute(const Graph&, Node&);
void infer_expand(const Graph&, Node&);
void infer_slice(const Graph&, Node&);
void infer_pad(const Graph&, Node&);
void infer_stride(const Graph&, Node&);
void infer_shift(const Graph&, Node&);
void infer_unfold(const Graph&, Node&);
void infer_fold(const Graph&, Node&);
void infer_einsum(const Graph&, Node&);
void infer_softmax(const Graph&, Node&);
void infer_softmax_grad(const Graph&, Node&);
void infer_layernorm(const Graph&, Node&);
void infer_layernorm_grad(const Graph&, Node&);
void infer_batchnorm(const Graph&, Node&);
void infer_batchnorm_sums(const Graph&, Node&);
void infer_reduce_max_grad(const Graph&, Node&);
void infer_cross_entropy(const Graph&, Node&);
void infer_cross_entropy_grad(const Graph&, Node&);
void infer_embedding(const Graph&, Node&);
void infer_embedding_grad(const Graph&, Node&);
void infer_dropout(const Graph&, Node&);

// Attribute accessors with the layout each view op uses: ints = (axis, a, b).
struct AxisArgs {
  int axis;
  int64_t a, b;
};
AxisArgs axis_args(const Node& n, size_t rank);
// Unfold (axis, window, dilation[, stride]) and fold (axis, window, dilation[, stride, length]):
// unfold position i reads i * stride + (j - center) * dilation, center = (window - 1) / 2.
struct WindowArgs {
  int axis;
  int64_t window, dilation, stride, center, length;  // length: fold's output extent (-1: same)
};
WindowArgs window_args(const Node& n, size_t rank);
// Reduction axes normalised and sorted; empty attr means all axes.
std::vector<int> reduce_axes(const Node& n, const Shape& in);

// ---- VJPs (src/autodiff/vjp_*.cpp)
using GradIn = std::vector<ValueId>;
void vjp_neg(Graph&, ValueId, ValueId, GradIn&);
void vjp_exp(Graph&, ValueId, ValueId, GradIn&);
void vjp_log(Graph&, ValueId, ValueId, GradIn&);
void vjp_sqrt(Graph&, ValueId, ValueId, GradIn&);
void vjp_rsqrt(Graph&, ValueId, ValueId, GradIn&);
void vjp_abs(Graph&, ValueId, ValueId, GradIn&);
void vjp_relu(Graph&, ValueId, ValueId, GradIn&);
void vjp_gelu(Graph&, ValueId, ValueId, GradIn&);
void vjp_sigmoid(Graph&, ValueId, ValueId, GradIn&);
void vjp_tanh(Graph&, ValueId, ValueId, GradIn&);
void vjp_cast(Graph&, ValueId, ValueId, GradIn&);
void vjp_add(Graph&, ValueId, ValueId, GradIn&);
void vjp_sub(Graph&, ValueId, ValueId, GradIn&);
void vjp_mul(Graph&, ValueId, ValueId, GradIn&);
void vjp_div(Graph&, ValueId, ValueId, GradIn&);
void vjp_pow(Graph&, ValueId, ValueId, GradIn&);
void vjp_max(Graph&, ValueId, ValueId, GradIn&);
void vjp_min(Graph&, ValueId, ValueId, GradIn&);
void vjp_where(Graph&, ValueId, ValueId, GradIn&);
void vjp_sum(Graph&, ValueId, ValueId, GradIn&);
void vjp_reduce_max(Graph&, ValueId, ValueId, GradIn&);
void vjp_mean(Graph&, ValueId, ValueId, GradIn&);
void vjp_reshape(Graph&, ValueId, ValueId, GradIn&);
void vjp_permute(Graph&, ValueId, ValueId, GradIn&);
void vjp_expand(Graph&, ValueId, ValueId, GradIn&);
void vjp_slice(Graph&, ValueId, ValueId, GradIn&);
void vjp_pad(Graph&, ValueId, ValueId, GradIn&);
void vjp_stride(Graph&, ValueId, ValueId, GradIn&);
void vjp_shift(Graph&, ValueId, ValueId, GradIn&);
void vjp_unfold(Graph&, ValueId, ValueId, GradIn&);
void vjp_fold(Graph&, ValueId, ValueId, GradIn&);
void vjp_einsum(Graph&, ValueId, ValueId, GradIn&);
void vjp_softmax(Graph&, ValueId, ValueId, GradIn&);
void vjp_log_softmax(Graph&, ValueId, ValueId, GradIn&);
void vjp_layernorm(Graph&, ValueId, ValueId, GradIn&);
void vjp_batchnorm(Graph&, ValueId, ValueId, GradIn&);
void vjp_cross_entropy(Graph&, ValueId, ValueId, GradIn&);
void vjp_embedding(Graph&, ValueId, ValueId, GradIn&);
void vjp_dropout(Graph&, ValueId, ValueId, GradIn&);
void vjp_none(Graph&, ValueId, ValueId, GradIn&);

// ---- float64 oracle (src/oracle/oracle_*.cpp)
using OracleIn = std::vector<const HostTensor*>;
HostTensor oracle_leaf(const Node&, const OracleIn&);
HostTensor oracle_unary(const Node&, const OracleIn&);
HostTensor oracle_cast(const Node&, const OracleIn&);
HostTensor oracle_binary(const Node&, const OracleIn&);
HostTensor oracle_where(const Node&, const OracleIn&);
HostTensor oracle_reduce(const Node&, const OracleIn&);
HostTensor oracle_view(const Node&, const OracleIn&);
HostTensor oracle_fold(const Node&, const OracleIn&);
HostTensor oracle_einsum(const Node&, const OracleIn&);
HostTensor oracle_softmax(const Node&, const OracleIn&);
HostTensor oracle_softmax_grad(const Node&, const OracleIn&);
HostTensor oracle_layernorm(const Node&, const OracleIn&);
HostTensor oracle_batchnorm(const Node&, const OracleIn&);
HostTensor oracle_batchnorm_sums(const Node&, const OracleIn&);
HostTensor oracle_reduce_max_grad(const Node&, const OracleIn&);
HostTensor oracle_layernorm_grad(const Node&, const OracleIn&);
HostTensor oracle_cross_entropy(const Node&, const OracleIn&);
HostTensor oracle_cross_entropy_grad(const Node&, const OracleIn&);
HostTensor oracle_embedding(const Node&, const OracleIn&);
HostTensor oracle_embedding_grad(const Node&, const OracleIn&);
HostTensor oracle_dropout(const Node&, const OracleIn&);

// Scalar definitions shared by the oracle (in double) — the mathematical definition of each op.
double ref_gelu(double x);
double ref_gelu_grad(double x);

}  // namespace synoros::opdefs
