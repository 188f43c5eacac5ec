// The op table, expanded from the op list (include/synoros/ops.def). Every pass reads op facts
// from here.
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
Cost cost_view(const Graph& g, const Node& n) { return {0, in_bytes(g, n) + out_bytes(n)}; }
// conv3x3: the direct convolution's multiply-adds (what the work is worth, as for the einsum form).
Cost cost_conv3x3(const Graph& g, const Node& n) {
  const double cin = double(g.shape(n.in[0])[1]);
  return {2 * 9 * cin * double(numel(n.shape)), in_bytes(g, n) + out_bytes(n)};
}
// Attention: the two products' multiply-adds and an exp per score (causal: about half of them);
// its gradient recomputes the scores and takes five products.
Cost cost_attention(const Graph& g, const Node& n) {
  const Shape& q = g.shape(n.in[0]);
  const size_t r = q.size();
  double rows = double(numel(q)) / double(q[r - 1]), Tk = double(g.shape(n.in[1])[r - 2]), D = double(q[r - 1]);
  double pairs = rows * Tk * (n.attr<attr::Attention>().causal ? 0.5 : 1.0);
  double flops = n.op == Op::Attention ? pairs * (4 * D + 20) : pairs * (14 * D + 40);
  return {flops, in_bytes(g, n) + out_bytes(n)};
}
Cost cost_einsum(const Graph& g, const Node& n) {
  std::vector<Shape> shapes;
  for (ValueId v : n.in) shapes.push_back(g.shape(v));
  EinsumSpec e = parse_einsum(n.attr<attr::Einsum>().spec, shapes);
  double iters = 1;
  for (char c : e.labels()) iters *= double(e.size[int(c)]);
  return {2 * iters, in_bytes(g, n) + out_bytes(n)};
}

// 1 where a row's vjp column is no_vjp (not differentiable), else 0: decided by the preprocessor,
// since comparing function addresses is not a constant expression under -fsanitize=undefined.
#define SYNOROS_SECOND_(a, b, ...) b
#define SYNOROS_SECOND(...) SYNOROS_SECOND_(__VA_ARGS__)
#define SYNOROS_NOT_DIFFERENTIABLE_no_vjp ~, 1
#define SYNOROS_NOT_DIFFERENTIABLE(vjp) SYNOROS_SECOND(SYNOROS_NOT_DIFFERENTIABLE_##vjp, 0, ~)
#define SYNOROS_DIFFERENTIABLE(vjp) (SYNOROS_NOT_DIFFERENTIABLE(vjp) ? nullptr : vjp)

constexpr OpInfo kOps[] = {
#define SYNOROS_OP(Enum, ident, arity, kind, infer, vjp, oracle, cost, lower, props, attrs) \
  {Op::Enum, #ident, arity, OpKind::kind, infer, SYNOROS_DIFFERENTIABLE(vjp), oracle, cost, props,   \
   attr_index<attr::attrs>()},
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props)                        \
  {Op::Enum, #ident, arity, OpKind::Elementwise, infer_map##arity, SYNOROS_DIFFERENTIABLE(vjp), oracle_map, \
   cost_map<flops>, unsigned(kMap | (props)), attr_index<attr::None>()},
#include "synoros/ops.def"
};

}  // namespace

const OpInfo& op_info(Op op) {
  size_t i = size_t(op);
  if (i >= kOpCount) throw Error("op_info: unknown op id " + std::to_string(i));
  return kOps[i];
}

}  // namespace synoros
