// The single op table. Every pass reads op facts from here; nothing else switches over ops.
#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"

namespace synoros {

namespace {
using namespace opdefs;

double out_elems(const Graph&, const Node& n) { return double(numel(n.shape)); }
double in_bytes(const Graph& g, const Node& n) {
  double b = 0;
  for (ValueId v : n.in) b += double(numel(g.shape(v)) * int64_t(dtype_size(g.dtype(v))));
  return b;
}
double out_bytes(const Node& n) { return double(numel(n.shape) * int64_t(dtype_size(n.dtype))); }

Cost cost_none(const Graph&, const Node&) { return {}; }
template <int FlopsPerElem>
Cost cost_map(const Graph& g, const Node& n) {
  return {FlopsPerElem * out_elems(g, n), in_bytes(g, n) + out_bytes(n)};
}
Cost cost_reduce(const Graph& g, const Node& n) {
  return {double(numel(g.shape(n.in[0]))), in_bytes(g, n) + out_bytes(n)};
}
Cost cost_view(const Graph& g, const Node& n) {
  if (n.op == Op::Reshape) return {};  // an alias, no data moves
  return {0, in_bytes(g, n) + out_bytes(n)};
}
Cost cost_einsum(const Graph& g, const Node& n) {
  std::vector<Shape> shapes;
  for (ValueId v : n.in) shapes.push_back(g.shape(v));
  EinsumSpec e = parse_einsum(n.attrs.spec, shapes);
  double iters = 1;
  for (char c : e.labels()) iters *= double(e.size[int(c)]);
  return {2 * iters, in_bytes(g, n) + out_bytes(n)};
}

constexpr OpInfo kOps[] = {
    {Op::Input, "input", 0, OpKind::Leaf, infer_leaf, nullptr, oracle_leaf, cost_none},
    {Op::Param, "param", 0, OpKind::Leaf, infer_leaf, nullptr, oracle_leaf, cost_none},
    {Op::Const, "const", 0, OpKind::Leaf, infer_leaf, nullptr, oracle_leaf, cost_none},
    {Op::Neg, "neg", 1, OpKind::Elementwise, infer_unary_float, vjp_neg, oracle_unary, cost_map<1>},
    {Op::Exp, "exp", 1, OpKind::Elementwise, infer_unary_float, vjp_exp, oracle_unary, cost_map<20>},
    {Op::Log, "log", 1, OpKind::Elementwise, infer_unary_float, vjp_log, oracle_unary, cost_map<20>},
    {Op::Sqrt, "sqrt", 1, OpKind::Elementwise, infer_unary_float, vjp_sqrt, oracle_unary, cost_map<1>},
    {Op::Rsqrt, "rsqrt", 1, OpKind::Elementwise, infer_unary_float, vjp_rsqrt, oracle_unary,
     cost_map<2>},
    {Op::Abs, "abs", 1, OpKind::Elementwise, infer_unary_float, vjp_abs, oracle_unary, cost_map<1>},
    {Op::Relu, "relu", 1, OpKind::Elementwise, infer_unary_float, vjp_relu, oracle_unary, cost_map<1>},
    {Op::Gelu, "gelu", 1, OpKind::Elementwise, infer_unary_float, vjp_gelu, oracle_unary,
     cost_map<30>},
    {Op::Sigmoid, "sigmoid", 1, OpKind::Elementwise, infer_unary_float, vjp_sigmoid, oracle_unary,
     cost_map<22>},
    {Op::Tanh, "tanh", 1, OpKind::Elementwise, infer_unary_float, vjp_tanh, oracle_unary,
     cost_map<22>},
    {Op::Cast, "cast", 1, OpKind::Elementwise, infer_cast, vjp_cast, oracle_cast, cost_map<0>},
    {Op::Add, "add", 2, OpKind::Elementwise, infer_binary, vjp_add, oracle_binary, cost_map<1>},
    {Op::Sub, "sub", 2, OpKind::Elementwise, infer_binary, vjp_sub, oracle_binary, cost_map<1>},
    {Op::Mul, "mul", 2, OpKind::Elementwise, infer_binary, vjp_mul, oracle_binary, cost_map<1>},
    {Op::Div, "div", 2, OpKind::Elementwise, infer_binary, vjp_div, oracle_binary, cost_map<1>},
    {Op::Pow, "pow", 2, OpKind::Elementwise, infer_binary, vjp_pow, oracle_binary, cost_map<40>},
    {Op::Max, "max", 2, OpKind::Elementwise, infer_binary, vjp_max, oracle_binary, cost_map<1>},
    {Op::Min, "min", 2, OpKind::Elementwise, infer_binary, vjp_min, oracle_binary, cost_map<1>},
    {Op::CmpLt, "cmp_lt", 2, OpKind::Elementwise, infer_binary, vjp_none, oracle_binary, cost_map<1>},
    {Op::CmpEq, "cmp_eq", 2, OpKind::Elementwise, infer_binary, vjp_none, oracle_binary, cost_map<1>},
    {Op::ReluGrad, "relu_grad", 2, OpKind::Elementwise, infer_binary, nullptr, oracle_binary,
     cost_map<1>},
    {Op::GeluGrad, "gelu_grad", 2, OpKind::Elementwise, infer_binary, nullptr, oracle_binary,
     cost_map<40>},
    {Op::Where, "where", 3, OpKind::Elementwise, infer_where, vjp_where, oracle_where, cost_map<1>},
    {Op::Sum, "sum", 1, OpKind::Reduce, infer_reduce, vjp_sum, oracle_reduce, cost_reduce},
    {Op::ReduceMax, "reduce_max", 1, OpKind::Reduce, infer_reduce, vjp_reduce_max, oracle_reduce,
     cost_reduce},
    {Op::Mean, "mean", 1, OpKind::Reduce, infer_reduce, vjp_mean, oracle_reduce, cost_reduce},
    {Op::Reshape, "reshape", 1, OpKind::View, infer_reshape, vjp_reshape, oracle_view, cost_view},
    {Op::Permute, "permute", 1, OpKind::View, infer_permute, vjp_permute, oracle_view, cost_view},
    {Op::Expand, "expand", 1, OpKind::View, infer_expand, vjp_expand, oracle_view, cost_view},
    {Op::Slice, "slice", 1, OpKind::View, infer_slice, vjp_slice, oracle_view, cost_view},
    {Op::Pad, "pad", 1, OpKind::View, infer_pad, vjp_pad, oracle_view, cost_view},
    {Op::Stride, "stride", 1, OpKind::View, infer_stride, vjp_stride, oracle_view, cost_view},
    {Op::Shift, "shift", 1, OpKind::View, infer_shift, vjp_shift, oracle_view, cost_view},
    {Op::Unfold, "unfold", 1, OpKind::View, infer_unfold, vjp_unfold, oracle_view, cost_view},
    {Op::Fold, "fold", 1, OpKind::View, infer_fold, vjp_fold, oracle_fold, cost_view},
    {Op::Einsum, "einsum", -2, OpKind::Contraction, infer_einsum, vjp_einsum, oracle_einsum,
     cost_einsum},
    {Op::Softmax, "softmax", 1, OpKind::Composite, infer_softmax, vjp_softmax, oracle_softmax,
     cost_map<25>},
    {Op::LogSoftmax, "log_softmax", 1, OpKind::Composite, infer_softmax, vjp_log_softmax,
     oracle_softmax, cost_map<25>},
    {Op::SoftmaxGrad, "softmax_grad", 2, OpKind::Composite, infer_softmax_grad, nullptr,
     oracle_softmax_grad, cost_map<4>},
    {Op::LogSoftmaxGrad, "log_softmax_grad", 2, OpKind::Composite, infer_softmax_grad, nullptr,
     oracle_softmax_grad, cost_map<22>},
    {Op::LayerNorm, "layernorm", -3, OpKind::Composite, infer_layernorm, vjp_layernorm,
     oracle_layernorm, cost_map<8>},
    {Op::LayerNormGrad, "layernorm_grad", -3, OpKind::Composite, infer_layernorm_grad, nullptr,
     oracle_layernorm_grad, cost_map<12>},
    {Op::BatchNorm, "batchnorm", 5, OpKind::Composite, infer_batchnorm, vjp_batchnorm, oracle_batchnorm,
     cost_map<4>},
    {Op::BatchNormSums, "batchnorm_sums", 4, OpKind::Composite, infer_batchnorm_sums, nullptr,
     oracle_batchnorm_sums, cost_map<5>},
    {Op::CrossEntropy, "cross_entropy", 2, OpKind::Composite, infer_cross_entropy,
     vjp_cross_entropy, oracle_cross_entropy, cost_map<25>},
    {Op::CrossEntropyGrad, "cross_entropy_grad", 3, OpKind::Composite, infer_cross_entropy_grad,
     nullptr, oracle_cross_entropy_grad, cost_map<25>},
    {Op::Embedding, "embedding", 2, OpKind::Composite, infer_embedding, vjp_embedding,
     oracle_embedding, cost_map<0>},
    {Op::EmbeddingGrad, "embedding_grad", 2, OpKind::Composite, infer_embedding_grad, nullptr,
     oracle_embedding_grad, cost_map<1>},
    {Op::Dropout, "dropout", 1, OpKind::Composite, infer_dropout, vjp_dropout, oracle_dropout,
     cost_map<12>},
    {Op::ReduceMaxGrad, "reduce_max_grad", 3, OpKind::Composite, infer_reduce_max_grad, nullptr,
     oracle_reduce_max_grad, cost_map<3>},
};

// Adding an op to the enum without a row here (or out of order) fails to compile.
static_assert(std::size(kOps) == kOpCount, "op table and Op enum differ in length");
constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (size_t(kOps[i].op) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "op table rows must follow the Op enum order");
}  // namespace

const OpInfo& op_info(Op op) {
  size_t i = size_t(op);
  if (i >= kOpCount) throw Error("op_info: unknown op id " + std::to_string(i));
  return kOps[i];
}

}  // namespace synoros
