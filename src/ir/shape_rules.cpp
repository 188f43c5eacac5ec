// Shape and dtype rules. Each throws Error with the cause; Graph::add prefixes op and shapes.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/thread_scratch.hpp"
#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"

namespace synoros::opdefs {

namespace {
const Shape& in_shape(const Graph& g, const Node& n, size_t i) { return g.shape(n.in[i]); }
DType in_dtype(const Graph& g, const Node& n, size_t i) { return g.dtype(n.in[i]); }
void require_float(const Graph& g, const Node& n, size_t i) {
  if (!is_float(in_dtype(g, n, i)))
    throw Error("input " + std::to_string(i) + " must be f32 or f64, got " +
                dtype_name(in_dtype(g, n, i)));
}
void require_int(const Graph& g, const Node& n, size_t i) {
  if (is_float(in_dtype(g, n, i)))
    throw Error("input " + std::to_string(i) + " must be i32 or i64, got " +
                dtype_name(in_dtype(g, n, i)));
}
}  // namespace

AxisArgs axis_args(const Node& n, size_t rank) {
  AxisArgs a{};
  int64_t axis = 0;
  switch (n.op) {
    case Op::Slice: {
      const auto& s = n.attr<attr::Slice>();
      axis = s.axis, a.a = s.start, a.b = s.end;
      break;
    }
    case Op::Pad: {
      const auto& p = n.attr<attr::Pad>();
      axis = p.axis, a.a = p.before, a.b = p.after;
      break;
    }
    case Op::Stride: {
      const auto& s = n.attr<attr::Stride>();
      axis = s.axis, a.a = s.step;
      break;
    }
    case Op::Shift: {
      const auto& s = n.attr<attr::Shift>();
      axis = s.axis, a.a = s.offset;
      break;
    }
    case Op::Unfold:
    case Op::Fold: {
      const auto& w = n.attr<attr::Window>();
      axis = w.axis, a.a = w.window, a.b = w.dilation;
      break;
    }
    default: throw Error(std::string(op_name(n.op)) + " is not a view along one axis");
  }
  a.axis = normalize_axis(axis, rank, op_name(n.op), {});
  return a;
}

WindowArgs window_args(const Node& n, size_t rank) {
  const auto& v = n.attr<attr::Window>();
  if (n.op != Op::Fold && v.length != -1) throw Error("the length is fold's: unfold takes -1");
  WindowArgs w;
  w.axis = normalize_axis(v.axis, rank, op_name(n.op), {});
  w.window = v.window;
  w.dilation = v.dilation;
  w.stride = v.stride;
  w.length = v.length;
  if (w.window < 1 || w.dilation < 1 || w.stride < 1) throw Error("window, dilation and stride must be >= 1");
  w.center = (w.window - 1) / 2;
  return w;
}

std::vector<int> reduce_axes(const Node& n, const Shape& in) {
  std::vector<int> axes;
  const auto& r = n.attr<attr::Reduce>();
  if (r.axes.empty()) {
    for (size_t i = 0; i < in.size(); ++i) axes.push_back(int(i));
    return axes;
  }
  for (int64_t a : r.axes) axes.push_back(normalize_axis(a, in.size(), op_name(n.op), in));
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    throw Error("reduction axes repeat");
  return axes;
}

void infer_leaf(const Graph&, Node&) {}

void infer_map1(const Graph& g, Node& n) {
  require_float(g, n, 0);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in_shape(g, n, 0);
}

void infer_cast(const Graph& g, Node& n) { n.shape = in_shape(g, n, 0); }

void infer_map2(const Graph& g, Node& n) {
  DType a = in_dtype(g, n, 0), b = in_dtype(g, n, 1);
  if (a != b)
    throw Error(std::string("dtype mismatch: ") + dtype_name(a) + " vs " + dtype_name(b));
  if (!op_info(n.op).has(kIntegers)) require_float(g, n, 0);
  n.dtype = a;
  n.shape = broadcast_shapes(in_shape(g, n, 0), in_shape(g, n, 1), op_name(n.op));
}

void infer_map3(const Graph& g, Node& n) {
  if (in_dtype(g, n, 1) != in_dtype(g, n, 2))
    throw Error(std::string("dtype mismatch between branches: ") + dtype_name(in_dtype(g, n, 1)) +
                " vs " + dtype_name(in_dtype(g, n, 2)));
  if (in_dtype(g, n, 0) != in_dtype(g, n, 1))
    throw Error(std::string("condition dtype ") + dtype_name(in_dtype(g, n, 0)) +
                " must match the branches' dtype " + dtype_name(in_dtype(g, n, 1)));
  n.dtype = in_dtype(g, n, 1);
  Shape s = broadcast_shapes(in_shape(g, n, 0), in_shape(g, n, 1), "where");
  n.shape = broadcast_shapes(s, in_shape(g, n, 2), "where");
}

void infer_reduce(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  require_float(g, n, 0);
  std::vector<int> axes = reduce_axes(n, in);
  if (n.op == Op::ReduceMax) {
    for (int a : axes)
      if (in[size_t(a)] == 0) throw Error("max over an empty axis has no value");
  }
  n.dtype = in_dtype(g, n, 0);
  n.shape.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    bool red = std::find(axes.begin(), axes.end(), int(i)) != axes.end();
    if (!red) n.shape.push_back(in[i]);
    else if (n.attr<attr::Reduce>().keepdim) n.shape.push_back(1);
  }
}

void infer_reshape(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  const Shape& t = n.attr<attr::Target>().shape;
  for (int64_t d : t)
    if (d < 0) throw Error("negative dimension in target shape " + shape_str(t));
  if (numel(t) != numel(in))
    throw Error("cannot reshape " + std::to_string(numel(in)) + " elements into " + shape_str(t));
  n.dtype = in_dtype(g, n, 0);
  n.shape = t;
}

void infer_permute(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  const auto& p = n.attr<attr::Permute>().perm;
  if (p.size() != in.size())
    throw Error("permutation " + shape_str(p) + " does not match rank " + std::to_string(in.size()));
  std::vector<bool> seen(in.size(), false);
  n.shape.resize(in.size());
  for (size_t i = 0; i < p.size(); ++i) {
    int a = normalize_axis(p[i], in.size(), "permute", in);
    if (seen[size_t(a)]) throw Error("permutation " + shape_str(p) + " repeats an axis");
    seen[size_t(a)] = true;
    n.shape[i] = in[size_t(a)];
  }
  n.dtype = in_dtype(g, n, 0);
}

void infer_expand(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  const Shape& t = n.attr<attr::Target>().shape;
  if (t.size() < in.size())
    throw Error("cannot expand rank " + std::to_string(in.size()) + " to " + shape_str(t));
  size_t lead = t.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != t[lead + i] && in[i] != 1)
      throw Error("cannot expand dimension " + std::to_string(i) + " of size " +
                  std::to_string(in[i]) + " to " + std::to_string(t[lead + i]));
  }
  n.dtype = in_dtype(g, n, 0);
  n.shape = t;
}

void infer_slice(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  AxisArgs a = axis_args(n, in.size());
  if (a.a < 0 || a.b < a.a || a.b > in[size_t(a.axis)])
    throw Error("slice [" + std::to_string(a.a) + ", " + std::to_string(a.b) +
                ") is out of range for axis " + std::to_string(a.axis));
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
  n.shape[size_t(a.axis)] = a.b - a.a;
}

void infer_pad(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  AxisArgs a = axis_args(n, in.size());
  if (a.a < 0 || a.b < 0) throw Error("padding must be non-negative");
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
  n.shape[size_t(a.axis)] += a.a + a.b;
}

void infer_stride(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  AxisArgs a = axis_args(n, in.size());
  if (a.a < 1) throw Error("stride must be >= 1");
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
  n.shape[size_t(a.axis)] = (in[size_t(a.axis)] + a.a - 1) / a.a;
}

void infer_shift(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  axis_args(n, in.size());
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

void infer_unfold(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  WindowArgs w = window_args(n, in.size());
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
  int64_t L = in[size_t(w.axis)];
  n.shape[size_t(w.axis)] = L == 0 ? 0 : (L - 1) / w.stride + 1;
  n.shape.push_back(w.window);
}

void infer_fold(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  if (in.size() < 2) throw Error("fold needs rank >= 2");
  WindowArgs w = window_args(n, in.size() - 1);
  if (in.back() != w.window)
    throw Error("last dimension " + std::to_string(in.back()) + " must equal the window " +
                std::to_string(w.window));
  n.dtype = in_dtype(g, n, 0);
  n.shape = Shape(in.begin(), in.end() - 1);
  int64_t Lo = in[size_t(w.axis)];
  int64_t L = w.length < 0 ? Lo : w.length;
  if (L < 0 || (L == 0 ? 0 : (L - 1) / w.stride + 1) != Lo)
    throw Error("length " + std::to_string(L) + " with stride " + std::to_string(w.stride) + " does not unfold to " +
                std::to_string(Lo) + " positions");
  n.shape[size_t(w.axis)] = L;
}

void infer_einsum(const Graph& g, Node& n) {
  for (size_t i = 0; i < n.in.size(); ++i) require_float(g, n, i);
  if (n.in.size() == 2 && in_dtype(g, n, 0) != in_dtype(g, n, 1))
    throw Error(std::string("dtype mismatch: ") + dtype_name(in_dtype(g, n, 0)) + " vs " +
                dtype_name(in_dtype(g, n, 1)));
  n.dtype = in_dtype(g, n, 0);
  // An eager loop records the same few products every step: the last shapes each thread
  // inferred are kept, with the spec and operand shapes parse_einsum checked them for (compared
  // in place, without copying the operands' shapes).
  struct Inferred {
    std::string spec;
    std::vector<Shape> in;
    Shape out;
  };
  struct Recent {
    std::array<Inferred, 8> inferred;
    size_t next = 0;
  };
  Recent& held = thread_scratch<Recent>();
  std::array<Inferred, 8>& recent = held.inferred;
  size_t& next = held.next;
  const std::string& spec = n.attr<attr::Einsum>().spec;
  for (const Inferred& r : recent) {
    bool same = r.spec == spec && r.in.size() == n.in.size();
    for (size_t i = 0; same && i < n.in.size(); ++i) same = r.in[i] == in_shape(g, n, i);
    if (same) {
      n.shape = r.out;
      return;
    }
  }
  std::vector<Shape> shapes;
  for (size_t i = 0; i < n.in.size(); ++i) shapes.push_back(in_shape(g, n, i));
  EinsumSpec e = parse_einsum(spec, shapes);
  n.shape.clear();
  for (char c : e.out) n.shape.push_back(e.size[int(c)]);
  recent[next] = {spec, std::move(shapes), n.shape};
  next = (next + 1) % recent.size();
}

void infer_softmax(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  normalize_axis(n.attr<attr::Axis>().axis, in.size(), op_name(n.op), in);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

void infer_softmax_grad(const Graph& g, Node& n) {
  infer_softmax(g, n);
  if (in_shape(g, n, 1) != in_shape(g, n, 0)) throw Error("gradient shape differs from output");
}

// layernorm(x [, weight, bias]) over the last axis; weight and bias are [C].
void infer_layernorm(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in.empty() || in.back() == 0) throw Error("layernorm needs a non-empty last axis");
  if (!(n.attr<attr::Eps>().eps > 0)) throw Error("layernorm needs eps > 0");
  if (n.in.size() == 2) throw Error("layernorm takes x, or x with weight and bias");
  for (size_t k = 1; k < n.in.size(); ++k) {
    if (in_dtype(g, n, k) != in_dtype(g, n, 0)) throw Error("weight and bias must have x's dtype");
    if (in_shape(g, n, k) != Shape{in.back()})
      throw Error("weight and bias must be [" + std::to_string(in.back()) + "]");
  }
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

// layernorm_backward(x [..., C], g of x's shape, weight [C]) -> [numel(x) / C + 2, C].
void infer_layernorm_backward(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in.empty() || in.back() == 0) throw Error("layernorm_backward needs a non-empty last axis");
  if (!(n.attr<attr::Eps>().eps > 0)) throw Error("layernorm_backward needs eps > 0");
  if (in_shape(g, n, 1) != in || in_dtype(g, n, 1) != in_dtype(g, n, 0))
    throw Error("the gradient must have x's shape and dtype " + shape_str(in));
  if (in_shape(g, n, 2) != Shape{in.back()} || in_dtype(g, n, 2) != in_dtype(g, n, 0))
    throw Error("the weight must be [" + std::to_string(in.back()) + "] of x's dtype");
  n.dtype = in_dtype(g, n, 0);
  n.shape = {numel(in) / in.back() + 2, in.back()};
}

// attention(q [..., Tq, D], k [..., Tk, D], v [..., Tk, D] [, offset i64 [1]]) -> [..., Tq, D];
// attr::Attention (causal without an offset needs Tq == Tk).
void infer_attention(const Graph& g, Node& n) {
  const char* names[] = {"q", "k", "v", "o", "g"};
  const size_t tensors = n.op == Op::Attention ? 3 : 5;
  if (n.in.size() < tensors) throw Error("expects " + std::to_string(tensors) + " tensors and an optional offset");
  const bool offset = n.in.size() > tensors;
  if (offset) {
    if (in_dtype(g, n, tensors) != DType::I64 || numel(in_shape(g, n, tensors)) != 1)
      throw Error("the offset must be an i64 tensor of one element, got " + std::string(dtype_name(in_dtype(g, n, tensors))) +
                  " " + shape_str(in_shape(g, n, tensors)));
  }
  for (size_t k = 0; k < tensors; ++k) {
    require_float(g, n, k);
    if (in_dtype(g, n, k) != in_dtype(g, n, 0)) throw Error(std::string(names[k]) + " must have q's dtype");
  }
  const auto& at = n.attr<attr::Attention>();
  if (!std::isfinite(at.scale) || at.scale == 0) throw Error("the scale must be finite and non-zero");
  const Shape &q = in_shape(g, n, 0), &k = in_shape(g, n, 1), &v = in_shape(g, n, 2);
  if (q.size() < 2) throw Error("q must be [..., T, D], got " + shape_str(q));
  if (k.size() != q.size() || v.size() != q.size() || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()))
    throw Error("q, k and v must share their leading axes: " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
  const size_t r = q.size();
  if (k[r - 1] != q[r - 1] || v[r - 1] != q[r - 1] || v[r - 2] != k[r - 2])
    throw Error("k and v must be [..., Tk, D] with q's D: " + shape_str(q) + ", " + shape_str(k) + ", " + shape_str(v));
  if (q[r - 2] < 1 || k[r - 2] < 1 || q[r - 1] < 1) throw Error("attention needs at least one query, one key and D >= 1");
  if (offset && !at.causal) throw Error("an offset needs causal attention");
  if (at.causal && !offset && q[r - 2] != k[r - 2])
    throw Error("causal attention without an offset needs as many queries as keys, got " + std::to_string(q[r - 2]) + " and " +
                std::to_string(k[r - 2]));
  n.dtype = in_dtype(g, n, 0);
  n.shape = q;
}

// attention_grad(q, k, v, o, g): [..., Tq + 2 Tk, D], the gradients of q, k and v in turn.
void infer_attention_grad(const Graph& g, Node& n) {
  infer_attention(g, n);
  if (in_shape(g, n, 3) != n.shape || in_shape(g, n, 4) != n.shape)
    throw Error("o and g must have the output's shape " + shape_str(n.shape));
  size_t r = n.shape.size();
  n.shape[r - 2] += 2 * in_shape(g, n, 1)[r - 2];
}

// batchnorm(x, mean, var, weight, bias): x [N, C, ...], the other four [C]; batch_stats declares
// mean and var the batch statistics of x (see vjp_batchnorm).
void infer_batchnorm(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in.size() < 2) throw Error("batchnorm needs x of rank 2 or more ([N, C, ...]), got " + shape_str(in));
  if (!(n.attr<attr::BatchNorm>().eps > 0)) throw Error("batchnorm needs eps > 0");
  const char* names[] = {"x", "mean", "var", "weight", "bias"};
  for (size_t k = 1; k < 5; ++k) {
    if (in_dtype(g, n, k) != in_dtype(g, n, 0))
      throw Error(std::string("batchnorm: ") + names[k] + " must have x's dtype " + dtype_name(in_dtype(g, n, 0)));
    if (in_shape(g, n, k) != Shape{in[1]})
      throw Error(std::string("batchnorm: ") + names[k] + " must be [" + std::to_string(in[1]) + "] for x " +
                  shape_str(in) + ", got " + shape_str(in_shape(g, n, k)));
  }
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

// batchnorm_sums(g, x, mean, var) -> [2, C]: per channel sum(g) and sum(g * (x - mean) / sqrt(var + eps)).
void infer_batchnorm_sums(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in.size() < 2) throw Error("batchnorm_sums needs g of rank 2 or more ([N, C, ...]), got " + shape_str(in));
  if (!(n.attr<attr::Eps>().eps > 0)) throw Error("batchnorm_sums needs eps > 0");
  if (in_shape(g, n, 1) != in || in_dtype(g, n, 1) != in_dtype(g, n, 0))
    throw Error("batchnorm_sums: x " + shape_str(in_shape(g, n, 1)) + " must match g " + shape_str(in));
  for (size_t k = 2; k < 4; ++k)
    if (in_shape(g, n, k) != Shape{in[1]} || in_dtype(g, n, k) != in_dtype(g, n, 0))
      throw Error(std::string("batchnorm_sums: ") + (k == 2 ? "mean" : "var") + " must be [" + std::to_string(in[1]) +
                  "] of g's dtype, got " + shape_str(in_shape(g, n, k)));
  n.dtype = in_dtype(g, n, 0);
  n.shape = {2, in[1]};
}

// reduce_max_grad(x, y, g) with a max's attrs (axes, keepdim), y = max(x) and g its upstream
// gradient, both of the max's shape -> x's shape: the max's input gradient, ties sharing evenly.
void infer_reduce_max_grad(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  std::vector<int> axes = reduce_axes(n, in);
  Shape red;
  for (size_t i = 0; i < in.size(); ++i) {
    bool r = std::find(axes.begin(), axes.end(), int(i)) != axes.end();
    if (!r) red.push_back(in[i]);
    else if (n.attr<attr::Reduce>().keepdim) red.push_back(1);
  }
  for (size_t k = 1; k < 3; ++k)
    if (in_shape(g, n, k) != red || in_dtype(g, n, k) != in_dtype(g, n, 0))
      throw Error(std::string("reduce_max_grad: ") + (k == 1 ? "the max" : "its gradient") + " must be " +
                  shape_str(red) + " of x's dtype, got " + shape_str(in_shape(g, n, k)));
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

// layernorm_grad(x, g [, weight]): the input gradient of layernorm(x [, weight, bias]).
void infer_layernorm_grad(const Graph& g, Node& n) {
  if (n.in.size() < 2) throw Error("layernorm_grad takes x, the upstream gradient and an optional weight");
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in.empty() || in.back() == 0) throw Error("layernorm needs a non-empty last axis");
  if (in_shape(g, n, 1) != in || in_dtype(g, n, 1) != in_dtype(g, n, 0))
    throw Error("gradient must match x");
  if (n.in.size() == 3 && in_shape(g, n, 2) != Shape{in.back()}) throw Error("weight must be [C]");
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

void infer_cross_entropy(const Graph& g, Node& n) {
  require_float(g, n, 0);
  require_int(g, n, 1);
  const Shape& l = in_shape(g, n, 0);
  const Shape& t = in_shape(g, n, 1);
  if (l.size() != 2 || t.size() != 1 || t[0] != l[0] || l[1] < 1)
    throw Error("expects logits [N, C>=1] and targets [N]");
  n.dtype = in_dtype(g, n, 0);
  n.shape = {};
}

void infer_cross_entropy_grad(const Graph& g, Node& n) {
  infer_cross_entropy(g, n);
  if (!in_shape(g, n, 2).empty()) throw Error("upstream gradient must be a scalar");
  n.shape = in_shape(g, n, 0);
}

void infer_embedding(const Graph& g, Node& n) {
  require_float(g, n, 0);
  require_int(g, n, 1);
  const Shape& w = in_shape(g, n, 0);
  if (w.size() != 2) throw Error("embedding weight must be [V, D]");
  n.dtype = in_dtype(g, n, 0);
  n.shape = in_shape(g, n, 1);
  n.shape.push_back(w[1]);
}

void infer_embedding_grad(const Graph& g, Node& n) {
  if (n.in.size() < 2) throw Error("takes the gradient, the indices and optionally a gradient to add the rows to");
  require_float(g, n, 0);
  require_int(g, n, 1);
  const Shape& gs = in_shape(g, n, 0);
  Shape expect = in_shape(g, n, 1);
  if (gs.empty()) throw Error("gradient must have rank >= 1");
  expect.push_back(gs.back());
  if (gs != expect) throw Error("gradient shape must be indices shape + [D]");
  n.dtype = in_dtype(g, n, 0);
  const int64_t rows = n.attr<attr::Rows>().rows;
  if (rows < 0) throw Error("the table's rows must be >= 0, got " + std::to_string(rows));
  n.shape = {rows, gs.back()};
  if (n.in.size() > 2 && (in_shape(g, n, 2) != n.shape || in_dtype(g, n, 2) != n.dtype))
    throw Error("the gradient to add to must be " + std::string(dtype_name(n.dtype)) + shape_str(n.shape) + ", got " +
                dtype_name(in_dtype(g, n, 2)) + shape_str(in_shape(g, n, 2)));
}

}  // namespace synoros::opdefs

namespace synoros::opdefs {
void infer_dropout(const Graph& g, Node& n) {
  const double p = n.attr<attr::Dropout>().p;
  if (!(p >= 0.0 && p < 1.0)) throw Error("dropout probability must be in [0, 1), got " + std::to_string(p));
  infer_map1(g, n);
}
void infer_argmax(const Graph& g, Node& n) {
  const Shape& in = in_shape(g, n, 0);
  int a = normalize_axis(n.attr<attr::ArgMax>().axis, in.size(), "argmax", in);
  if (in[size_t(a)] == 0) throw Error("cannot take the index of an extreme over an empty axis");
  n.dtype = DType::I64;
  n.shape = in;
  n.shape.erase(n.shape.begin() + a);
}

void infer_prod(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  int a = normalize_axis(n.attr<attr::Axis>().axis, in.size(), "prod", in);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
  n.shape.erase(n.shape.begin() + a);
}

void infer_cumprod_grad(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  if (in_shape(g, n, 1) != in || in_dtype(g, n, 1) != in_dtype(g, n, 0))
    throw Error("cumprod_grad: the gradient and the input must have one shape and dtype, got " + shape_str(in) +
                " and " + shape_str(in_shape(g, n, 1)));
  normalize_axis(n.attr<attr::Scan>().axis, in.size(), "cumprod_grad", in);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

void infer_cumsum(const Graph& g, Node& n) {  // and cumprod_exclusive, cumprod
  require_float(g, n, 0);
  const Shape& in = in_shape(g, n, 0);
  normalize_axis(n.attr<attr::Scan>().axis, in.size(), "cumsum", in);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in;
}

namespace {
// gather's and gather_grad's common checks: index (input 1) has the data's rank and at most its
// size on every axis but `axis`.
int gather_axis(const Graph& g, const Node& n, const Shape& data, int64_t axis) {
  require_int(g, n, 1);
  const Shape& idx = in_shape(g, n, 1);
  if (idx.size() != data.size())
    throw Error("index " + shape_str(idx) + " must have the rank of " + shape_str(data));
  int a = normalize_axis(axis, data.size(), op_name(n.op), data);
  for (size_t d = 0; d < data.size(); ++d)
    if (int(d) != a && idx[d] > data[d])
      throw Error("index " + shape_str(idx) + " is larger than " + shape_str(data) + " on axis " + std::to_string(d));
  return a;
}
}  // namespace

void infer_gather(const Graph& g, Node& n) {
  gather_axis(g, n, in_shape(g, n, 0), n.attr<attr::Axis>().axis);
  n.dtype = in_dtype(g, n, 0);
  n.shape = in_shape(g, n, 1);
}

void infer_gather_grad(const Graph& g, Node& n) {
  require_float(g, n, 0);
  const Shape& gs = in_shape(g, n, 0);
  const auto& at = n.attr<attr::GatherGrad>();
  const Shape& data = at.shape;
  check_shape(data, in_dtype(g, n, 0), "gather_grad's data");
  gather_axis(g, n, data, at.axis);
  if (gs != in_shape(g, n, 1)) throw Error("gradient " + shape_str(gs) + " must have the index's shape");
  n.dtype = in_dtype(g, n, 0);
  n.shape = data;
}

// conv3x3(x [N, C, H, W], w [O, C, 3, 3] (flipped: [C, O, 3, 3])): attr::Conv3x3 ->
// [N, O, H + 2p - 2, W + 2p - 2], float32.
void infer_conv3x3(const Graph& g, Node& n) {
  const int64_t p = n.attr<attr::Conv3x3>().pad;
  const bool flipped = n.attr<attr::Conv3x3>().flipped;
  if (p < 0 || p > 2) throw Error("padding must be 0, 1 or 2, got " + std::to_string(p));
  for (size_t k = 0; k < 2; ++k)
    if (in_dtype(g, n, k) != DType::F32) throw Error("conv3x3 takes float32 tensors, got " + std::string(dtype_name(in_dtype(g, n, k))));
  const Shape &x = in_shape(g, n, 0), &w = in_shape(g, n, 1);
  if (x.size() != 4) throw Error("x must be [N, C, H, W], got " + shape_str(x));
  if (w.size() != 4 || w[2] != 3 || w[3] != 3) throw Error("w must be [O, C, 3, 3], got " + shape_str(w));
  const int64_t cin = flipped ? w[0] : w[1], cout = flipped ? w[1] : w[0];
  if (x[1] != cin) throw Error("w " + shape_str(w) + " does not match x " + shape_str(x));
  const int64_t oh = x[2] + 2 * p - 2, ow = x[3] + 2 * p - 2;
  if (x[0] < 1 || cin < 1 || cout < 1 || oh < 1 || ow < 1)
    throw Error("x " + shape_str(x) + " with padding " + std::to_string(p) + " has no output");
  n.dtype = DType::F32;
  n.shape = {x[0], cout, oh, ow};
}

}  // namespace synoros::opdefs
