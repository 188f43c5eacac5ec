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

// ---- Special values: what each op gives for NaN, infinities, signed zeros and denormals.
//
// PyTorch's rules (CPU, float32). Every kernel path (scalar, AVX2, AVX-512, fused or not, every
// reduction form) and the float64 oracle follow them; tests/nan_rules_test.cpp checks them
// against PyTorch's own results (tests/torch_special_values.py). Rules for all ops:
//  * A NaN in gives NaN out unless the table says otherwise. A NaN's sign and payload are not
//    part of any rule.
//  * Arithmetic the table does not spell out is IEEE 754's: inf - inf, 0 * inf, 0 / 0 and
//    inf / inf give NaN, x / +-0 gives +-inf, x + (-0) gives x.
//  * Denormals are numbers like any other, never flushed to zero. (Below the smallest normal
//    float, exp, sigmoid, tanh and pow are accurate to 2^-126 absolute rather than to ulps.)
//  * Where PyTorch's element-by-element kernels and its vectorised ones disagree (noted "PyTorch
//    differs"), the rule is the element-by-element result.
//
//  op               rule
//  neg              -x: -(+-inf) = -+inf, -(+-0) = -+0
//  exp              exp(inf) = inf, exp(-inf) = +0, exp(+-0) = 1
//  log              x < 0 (-inf, -denormals included): NaN; log(+-0) = -inf; log(inf) = inf
//  sqrt             x < 0: NaN; sqrt(-0) = -0; sqrt(inf) = inf
//  rsqrt            1 / sqrt(x): x < 0: NaN; rsqrt(+-0) = +-inf; rsqrt(inf) = +0
//  abs              abs(-0) = +0, abs(-inf) = inf
//  relu             x < 0 ? +0 : x: relu(NaN) = NaN, relu(-0) = -0, relu(-inf) = +0
//  gelu             x/2 (1 + erf(x / sqrt 2)): gelu(inf) = inf, gelu(-inf) = NaN (-inf * 0);
//                   the result has x's sign on the whole line: x < 0 gives a negative number or
//                   -0, gelu(-0) = -0 (PyTorch differs: its vectorised path gives +0 for -0 and
//                   for the far tail)
//  sigmoid          sigmoid(inf) = 1, sigmoid(-inf) = +0, sigmoid(+-0) = 0.5
//  tanh             tanh(+-inf) = +-1, tanh(+-0) = +-0
//  cast             float32 <-> float64 keeps NaN, +-inf, -0 and denormals; float -> integer of
//                   NaN, +-inf or an out-of-range value is not defined
//  add sub mul div  IEEE 754
//  pow              C99's pow (Annex F): pow(x, +-0) = 1 and pow(1, y) = 1 even for a NaN x or y,
//                   pow(-1, +-inf) = 1, pow(x < 0, non-integer y) = NaN, pow(-0, odd y < 0) =
//                   -inf, pow(+-0, y < 0) = inf otherwise, pow(-inf, odd y > 0) = -inf
//  max min          NaN if either operand is NaN (torch.maximum, torch.minimum); equal operands,
//                   +0 and -0 included, give the first (PyTorch differs: its vectorised path
//                   gives the second)
//  cmp_lt cmp_eq    a comparison with NaN is false: 0; -0 == +0
//  relu_grad(g, y)  y <= 0 ? +0 : g (PyTorch's threshold_backward): a NaN y passes g, and where
//                   y <= 0 the result is +0 even for a NaN or infinite g
//  gelu_grad(g, x)  g (cdf(x) + x pdf(x)): x = +-inf gives NaN (inf * 0), gelu_grad(g, +-0) = g / 2
//  where(c, a, b)   c != 0 ? a : b: a NaN condition selects a, a -0 condition selects b
//  sum mean         any NaN: NaN; inf and -inf together: NaN; a sum of zeros is +0 (the sum
//                   starts from +0, as PyTorch's)
//  reduce_max       any NaN: NaN (torch.amax); a zero maximum of zeros of both signs is either
//                   zero, the same one on every instruction set (PyTorch's choice depends on the
//                   zeros' positions)
//  reduce_max_grad  (x == y) * (g / count), count the elements equal to the max: ties (+0 and -0
//                   alike) share g; a window whose max is NaN has no element equal to it, so
//                   every element of it is NaN; an infinite g gives NaN on the other elements
//                   (0 * inf) -- all as torch.amax's backward
//  softmax          a NaN or +inf in the row, or a row of -inf only, makes the whole row NaN;
//  log_softmax      a -inf entry beside finite ones gives 0 (log_softmax: -inf)
//  cross_entropy    log_softmax's rules: a NaN or +inf logit gives NaN; a -inf target logit
//                   among finite others gives +inf
//  layernorm        IEEE through (x - mean) / sqrt(var + eps): a NaN or +-inf in a row makes the
//  batchnorm        row NaN; the sign of a zero result is not part of the rule
//  dropout          kept: x * (1 / (1 - p)); dropped: x * 0 (PyTorch's product with the mask), so
//                   a dropped NaN or +-inf gives NaN and a dropped -x gives -0
//  einsum           IEEE sums of products (inf * 0 = NaN); the sign of a zero sum is not part of
//                   the rule
//  views embedding  copy bits; pad fills +0
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
