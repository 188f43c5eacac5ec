// The float64 oracle: the plainest possible definition of every op, written with multi-index
// loops and no cleverness. It shares with the kernels what defines an op: the dropout RNG, and
// each elementwise map's double definition (ir/scalar_ops.hpp). Maps with a float definition of
// their own (exp, log, gelu, sigmoid, tanh and their relatives: polynomials) are checked against
// an independent formula; for the rest the float kernel is the same formula in float, so the op
// cases check broadcasting, fusion and every ISA's lines, and the formula itself is checked
// against PyTorch (tests/nan_rules_test.cpp, tests/tensor_ops_test.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.hpp"
#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"
#include "ir/scalar_ops.hpp"
#include "oracle/contraction.hpp"

namespace synoros::opdefs {

namespace {
HostTensor make_out(const Node& n) {
  return HostTensor(is_float(n.dtype) ? DType::F64 : DType::I64, n.shape);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t i = s.size(); i-- > 0;) {
    idx[i] = s[i] ? flat % s[i] : 0;
    flat = s[i] ? flat / s[i] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t i = 0; i < s.size(); ++i) f = f * s[i] + idx[i];
  return f;
}

// Flat index into `in` for an output multi-index under numpy broadcasting.
int64_t broadcast_source(const std::vector<int64_t>& out_idx, const Shape& in) {
  size_t lead = out_idx.size() - in.size();
  int64_t f = 0;
  for (size_t i = 0; i < in.size(); ++i) f = f * in[i] + (in[i] == 1 ? 0 : out_idx[lead + i]);
  return f;
}

int64_t index_or_throw(double v, int64_t limit, const char* op) {
  int64_t i = int64_t(v);
  if (i < 0 || i >= limit)
    throw Error(std::string(op) + ": index " + std::to_string(i) + " is out of range [0, " +
                std::to_string(limit) + ")");
  return i;
}
}  // namespace

HostTensor oracle_leaf(const Node& n, const OracleIn&) {
  throw Error(std::string("oracle: leaf '") + n.name + "' must be fed, not evaluated");
}

HostTensor oracle_cast(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i) {
    double x = in[0]->get(i);
    out.set(i, is_float(n.dtype) ? x : std::trunc(x));
  }
  return out;
}

// An elementwise map's oracle is its scalar definition over doubles (fn::Enum::f, scalar_ops.hpp).
namespace {
template <class F, int Arity>
double apply_map(const double* x) {
  if constexpr (Arity == 1) return F::f(x[0]);
  else if constexpr (Arity == 2) return F::f(x[0], x[1]);
  else return F::f(x[0], x[1], x[2]);
}
double map_scalar(Op op, const double* x) {
  switch (op) {
#define SYNOROS_MAP(Enum, ident, arity, ...) \
  case Op::Enum: return apply_map<fn::Enum, arity>(x);
#include "synoros/ops.def"
    default: throw Error(std::string("oracle: ") + op_name(op) + " is not an elementwise map");
  }
}
}  // namespace

HostTensor oracle_map(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  double x[3];
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(i, n.shape);
    for (size_t k = 0; k < in.size(); ++k) x[k] = in[k]->get(broadcast_source(idx, in[k]->shape));
    out.set(i, map_scalar(n.op, x));
  }
  return out;
}

HostTensor oracle_reduce(const Node& n, const OracleIn& in) {
  const Shape& is = in[0]->shape;
  std::vector<int> axes = reduce_axes(n, is);
  std::vector<bool> red(is.size(), false);
  for (int a : axes) red[size_t(a)] = true;
  Shape kept;  // output shape with kept dims as 1 for reduced ones
  int64_t count = 1;
  for (size_t i = 0; i < is.size(); ++i) {
    kept.push_back(red[i] ? 1 : is[i]);
    if (red[i]) count *= is[i];
  }
  HostTensor out = make_out(n);
  std::vector<double> acc(size_t(numel(kept)), n.op == Op::ReduceMax ? -INFINITY : 0.0);
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    auto idx = unravel(i, is);
    for (size_t d = 0; d < is.size(); ++d)
      if (red[d]) idx[d] = 0;
    double& a = acc[size_t(ravel(idx, kept))];
    double x = in[0]->get(i);
    a = n.op == Op::ReduceMax ? (x > a || std::isnan(x) ? x : a) : a + x;
  }
  for (int64_t i = 0; i < out.numel(); ++i) {
    double v = acc[size_t(i)];
    out.set(i, n.op == Op::Mean ? (count ? v / double(count) : NAN) : v);
  }
  return out;
}

HostTensor oracle_view(const Node& n, const OracleIn& in) {
  const Shape& is = in[0]->shape;
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto o = unravel(i, n.shape);
    std::vector<int64_t> src(is.size());
    bool zero = false;
    switch (n.op) {
      case Op::Reshape: src = unravel(i, is); break;
      case Op::Permute: {
        const auto& perm = n.attr<attr::Permute>().perm;
        for (size_t d = 0; d < perm.size(); ++d)
          src[size_t(normalize_axis(perm[d], is.size(), "permute", is))] = o[d];
        break;
      }
      case Op::Expand: {
        size_t lead = o.size() - is.size();
        for (size_t d = 0; d < is.size(); ++d) src[d] = is[d] == 1 ? 0 : o[lead + d];
        break;
      }
      case Op::Unfold: {
        WindowArgs w = window_args(n, is.size());
        const size_t ax = size_t(w.axis);
        for (size_t d = 0; d < is.size(); ++d) src[d] = o[d];
        src[ax] = o[ax] * w.stride + (o.back() - w.center) * w.dilation;
        zero = src[ax] < 0 || src[ax] >= is[ax];
        break;
      }
      default: {
        AxisArgs a = axis_args(n, is.size());
        size_t ax = size_t(a.axis);
        for (size_t d = 0; d < is.size(); ++d) src[d] = o[d];
        int64_t& s = src[ax];
        if (n.op == Op::Slice) s = o[ax] + a.a;
        if (n.op == Op::Pad) s = o[ax] - a.a, zero = s < 0 || s >= is[ax];
        if (n.op == Op::Stride) s = o[ax] * a.a;
        if (n.op == Op::Shift) s = ((o[ax] + a.a) % is[ax] + is[ax]) % is[ax];
      }
    }
    out.set(i, zero ? 0.0 : in[0]->get(ravel(src, is)));
  }
  return out;
}

HostTensor oracle_fold(const Node& n, const OracleIn& in) {
  const Shape& is = in[0]->shape;
  WindowArgs w = window_args(n, is.size() - 1);
  size_t ax = size_t(w.axis);
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto o = unravel(i, n.shape);
    double acc = 0;
    for (int64_t j = 0; j < w.window; ++j) {
      // Unfold read x[p] at window j from position q with q * stride = p - (j - center) * dilation.
      int64_t q = o[ax] - (j - w.center) * w.dilation;
      if (q < 0 || q % w.stride != 0 || q / w.stride >= is[ax]) continue;
      auto src = o;
      src[ax] = q / w.stride;
      src.push_back(j);
      acc += in[0]->get(ravel(src, is));
    }
    out.set(i, acc);
  }
  return out;
}

HostTensor oracle_einsum(const Node& n, const OracleIn& in) {
  std::vector<Shape> shapes;
  for (auto* t : in) shapes.push_back(t->shape);
  EinsumSpec e = parse_einsum(n.attr<attr::Einsum>().spec, shapes);
  // One output element at a time (oracle/contraction.hpp): the output's labels, then the summed
  // ones in the spec's order.
  std::string labels = e.out;
  for (char c : e.labels())
    if (labels.find(c) == std::string::npos) labels += c;
  std::vector<oracle::Operand> ops(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    ops[k].tensor = in[k];
    std::vector<int64_t> st = contiguous_strides(in[k]->shape);
    for (size_t a = 0; a < e.in[k].size(); ++a)
      ops[k].coords.push_back(oracle::axis(labels.size(), labels.find(e.in[k][a]), st[a]));
  }
  std::vector<int64_t> summed;
  for (size_t l = e.out.size(); l < labels.size(); ++l) summed.push_back(e.size[int(labels[l])]);
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i)
    out.set(i, oracle::contraction_point(ops, unravel(i, n.shape), summed).value);
  return out;
}

namespace {
// Calls fn(offsets) for every line along `axis`, with the flat offsets of its elements.
template <class Fn>
void for_each_line(const Shape& s, int axis, Fn fn) {
  int64_t n = s[size_t(axis)];
  int64_t inner = 1;
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) inner *= s[d];
  int64_t outer = n ? numel(s) / (n * inner) : 0;
  std::vector<int64_t> offs(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t k = 0; k < n; ++k) offs[size_t(k)] = (o * n + k) * inner + i;
      fn(offs);
    }
}
}  // namespace

HostTensor oracle_softmax(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  int axis = normalize_axis(n.attr<attr::Axis>().axis, n.shape.size(), "softmax", n.shape);
  for_each_line(n.shape, axis, [&](const std::vector<int64_t>& offs) {
    double m = -INFINITY, s = 0;
    for (int64_t o : offs) m = std::max(m, in[0]->get(o));
    for (int64_t o : offs) s += std::exp(in[0]->get(o) - m);
    for (int64_t o : offs) {
      double x = in[0]->get(o);
      out.set(o, n.op == Op::Softmax ? std::exp(x - m) / s : x - m - std::log(s));
    }
  });
  return out;
}

HostTensor oracle_softmax_grad(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  int axis = normalize_axis(n.attr<attr::Axis>().axis, n.shape.size(), "softmax_grad", n.shape);
  for_each_line(n.shape, axis, [&](const std::vector<int64_t>& offs) {
    double s = 0;
    for (int64_t o : offs)
      s += n.op == Op::SoftmaxGrad ? in[0]->get(o) * in[1]->get(o) : in[1]->get(o);
    for (int64_t o : offs) {
      double y = in[0]->get(o), g = in[1]->get(o);
      out.set(o, n.op == Op::SoftmaxGrad ? y * (g - s) : g - std::exp(y) * s);
    }
  });
  return out;
}

HostTensor oracle_layernorm(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  int axis = int(n.shape.size()) - 1;
  for_each_line(n.shape, axis, [&](const std::vector<int64_t>& offs) {
    double mean = 0, var = 0;
    for (int64_t o : offs) mean += in[0]->get(o);
    mean /= double(offs.size());
    for (int64_t o : offs) var += (in[0]->get(o) - mean) * (in[0]->get(o) - mean);
    var /= double(offs.size());
    for (size_t k = 0; k < offs.size(); ++k) {
      double y = (in[0]->get(offs[k]) - mean) / std::sqrt(var + n.attr<attr::Eps>().eps);
      if (in.size() == 3) y = y * in[1]->get(int64_t(k)) + in[2]->get(int64_t(k));
      out.set(offs[k], y);
    }
  });
  return out;
}

// attention: per query row, p = softmax(scale q k^T) over the keys it sees (causal: j <= i),
// o = p v. attention_grad: dv = p^T g, dp = g v^T, ds = p (dp - sum_j p dp), dq = scale ds k,
// dk = scale ds^T q, stacked along the query axis.
namespace {
struct AttentionDims {
  int64_t batch, Tq, Tk, D;
  bool causal;
  double scale;
  int64_t offset;
};
AttentionDims attention_dims(const Node& n, const OracleIn& in) {
  const Shape &q = in[0]->shape, &k = in[1]->shape;
  const size_t r = q.size(), tensors = n.op == Op::Attention ? 3 : 5;
  const int64_t offset = in.size() > tensors ? std::clamp<int64_t>(int64_t(in[tensors]->get(0)), 0, k[r - 2]) : 0;
  const auto& at = n.attr<attr::Attention>();
  return {numel(q) / (q[r - 2] * q[r - 1]), q[r - 2], k[r - 2], q[r - 1], at.causal, at.scale, offset};
}
// Row i of batch b's probabilities.
std::vector<double> attention_probs(const AttentionDims& a, const OracleIn& in, int64_t b, int64_t i) {
  const int64_t qo = b * a.Tq * a.D, ko = b * a.Tk * a.D;
  const int64_t seen = a.causal ? std::clamp<int64_t>(a.offset + i + 1, 0, a.Tk) : a.Tk;
  std::vector<double> p(size_t(a.Tk), seen > 0 ? 0.0 : NAN);  // no key seen: NaN, as 0 / 0
  double m = -INFINITY, l = 0;
  for (int64_t j = 0; j < seen; ++j) {
    double s = 0;
    for (int64_t d = 0; d < a.D; ++d) s += in[0]->get(qo + i * a.D + d) * in[1]->get(ko + j * a.D + d);
    p[size_t(j)] = s * a.scale;
    m = std::max(m, p[size_t(j)]);
  }
  for (int64_t j = 0; j < seen; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - m));
  for (int64_t j = 0; j < seen; ++j) p[size_t(j)] /= l;
  return p;
}
}  // namespace

HostTensor oracle_attention(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  const AttentionDims a = attention_dims(n, in);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.Tq; ++i) {
      std::vector<double> p = attention_probs(a, in, b, i);
      const int64_t seen = a.causal ? std::min(a.offset + i + 1, a.Tk) : a.Tk;
      for (int64_t d = 0; d < a.D; ++d) {
        double o = seen > 0 ? 0 : NAN;
        for (int64_t j = 0; j < seen; ++j) o += p[size_t(j)] * in[2]->get((b * a.Tk + j) * a.D + d);
        out.set((b * a.Tq + i) * a.D + d, o);
      }
    }
  return out;
}

HostTensor oracle_attention_grad(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  const AttentionDims a = attention_dims(n, in);
  const int64_t rows = a.Tq + 2 * a.Tk;
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, 0.0);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t qo = b * a.Tq * a.D, ko = b * a.Tk * a.D, go = b * rows * a.D;
    for (int64_t i = 0; i < a.Tq; ++i) {
      std::vector<double> p = attention_probs(a, in, b, i), dp(size_t(a.Tk), 0.0);
      const int64_t seen = a.causal ? std::min(a.offset + i + 1, a.Tk) : a.Tk;
      double dsum = 0;
      for (int64_t j = 0; j < seen; ++j) {
        for (int64_t d = 0; d < a.D; ++d) dp[size_t(j)] += in[4]->get(qo + i * a.D + d) * in[2]->get(ko + j * a.D + d);
        dsum += p[size_t(j)] * dp[size_t(j)];
      }
      for (int64_t j = 0; j < seen; ++j) {
        const double ds = p[size_t(j)] * (dp[size_t(j)] - dsum) * a.scale;
        for (int64_t d = 0; d < a.D; ++d) {
          const int64_t dq = go + i * a.D + d, dk = go + (a.Tq + j) * a.D + d, dv = go + (a.Tq + a.Tk + j) * a.D + d;
          out.set(dq, out.get(dq) + ds * in[1]->get(ko + j * a.D + d));
          out.set(dk, out.get(dk) + ds * in[0]->get(qo + i * a.D + d));
          out.set(dv, out.get(dv) + p[size_t(j)] * in[4]->get(qo + i * a.D + d));
        }
      }
    }
  }
  return out;
}

HostTensor oracle_layernorm_backward(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  const int64_t C = n.shape[1], rows = in[0]->numel() / C;
  Node grad = n;  // dx: layernorm_grad(x, g, weight), the result's first rows
  grad.shape = in[0]->shape;
  const HostTensor dx = oracle_layernorm_grad(grad, in);
  for (int64_t i = 0; i < dx.numel(); ++i) out.set(i, dx.get(i));
  std::vector<double> dw(size_t(C), 0.0), db(size_t(C), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += in[0]->get(i * C + c);
    mean /= double(C);
    for (int64_t c = 0; c < C; ++c) var += (in[0]->get(i * C + c) - mean) * (in[0]->get(i * C + c) - mean);
    const double r = 1.0 / std::sqrt(var / double(C) + n.attr<attr::Eps>().eps);
    for (int64_t c = 0; c < C; ++c) {
      dw[size_t(c)] += in[1]->get(i * C + c) * (in[0]->get(i * C + c) - mean) * r;
      db[size_t(c)] += in[1]->get(i * C + c);
    }
  }
  for (int64_t c = 0; c < C; ++c) out.set((rows + 0) * C + c, dw[size_t(c)]), out.set((rows + 1) * C + c, db[size_t(c)]);
  return out;
}

// batchnorm: y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c], c the index along axis 1.
HostTensor oracle_batchnorm(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  int64_t C = n.shape[1], inner = 1;
  for (size_t d = 2; d < n.shape.size(); ++d) inner *= n.shape[d];
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t c = i / std::max<int64_t>(inner, 1) % C;
    double r = 1.0 / std::sqrt(in[2]->get(c) + n.attr<attr::BatchNorm>().eps);
    out.set(i, (in[0]->get(i) - in[1]->get(c)) * r * in[3]->get(c) + in[4]->get(c));
  }
  return out;
}

// batchnorm_sums(g, x, mean, var): [sum over all but axis 1 of g, of g * (x - mean) / sqrt(var + eps)].
HostTensor oracle_batchnorm_sums(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  const Shape& s = in[0]->shape;
  int64_t C = s[1], inner = 1;
  for (size_t d = 2; d < s.size(); ++d) inner *= s[d];
  std::vector<double> s0(size_t(C), 0.0), s1(size_t(C), 0.0);
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    int64_t c = i / std::max<int64_t>(inner, 1) % C;
    double g = in[0]->get(i), xh = (in[1]->get(i) - in[2]->get(c)) / std::sqrt(in[3]->get(c) + n.attr<attr::Eps>().eps);
    s0[size_t(c)] += g;
    s1[size_t(c)] += g * xh;
  }
  for (int64_t c = 0; c < C; ++c) out.set(c, s0[size_t(c)]), out.set(C + c, s1[size_t(c)]);
  return out;
}

// reduce_max_grad(x, y, g): (x == y) * g / count, count the window's elements equal to its max.
HostTensor oracle_reduce_max_grad(const Node& n, const OracleIn& in) {
  const Shape& is = in[0]->shape;
  std::vector<int> axes = reduce_axes(n, is);
  Shape kept;
  for (size_t i = 0; i < is.size(); ++i)
    kept.push_back(std::find(axes.begin(), axes.end(), int(i)) != axes.end() ? 1 : is[i]);
  auto window = [&](int64_t i) {
    auto idx = unravel(i, is);
    for (int a : axes) idx[size_t(a)] = 0;
    return ravel(idx, kept);
  };
  std::vector<double> count(size_t(numel(kept)), 0.0);
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    int64_t w = window(i);
    count[size_t(w)] += in[0]->get(i) == in[1]->get(w) ? 1.0 : 0.0;
  }
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t w = window(i);
    double mask = in[0]->get(i) == in[1]->get(w) ? 1.0 : 0.0;
    out.set(i, mask * (in[2]->get(w) / count[size_t(w)]));
  }
  return out;
}

// d/dx of layernorm: with xh = (x - mean) r, r = 1/sqrt(var + eps) and gw = g * weight,
// dx = r (gw - mean(gw) - xh mean(gw xh)).
HostTensor oracle_layernorm_grad(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  int axis = int(n.shape.size()) - 1;
  double eps = n.attr<attr::Eps>().eps;
  for_each_line(n.shape, axis, [&](const std::vector<int64_t>& offs) {
    double cnt = double(offs.size()), mean = 0, var = 0;
    for (int64_t o : offs) mean += in[0]->get(o);
    mean /= cnt;
    for (int64_t o : offs) var += (in[0]->get(o) - mean) * (in[0]->get(o) - mean);
    double r = 1.0 / std::sqrt(var / cnt + eps);
    std::vector<double> gw(offs.size()), xh(offs.size());
    double mg = 0, mgx = 0;
    for (size_t k = 0; k < offs.size(); ++k) {
      xh[k] = (in[0]->get(offs[k]) - mean) * r;
      gw[k] = in[1]->get(offs[k]) * (in.size() == 3 ? in[2]->get(int64_t(k)) : 1.0);
      mg += gw[k];
      mgx += gw[k] * xh[k];
    }
    mg /= cnt;
    mgx /= cnt;
    for (size_t k = 0; k < offs.size(); ++k) out.set(offs[k], r * (gw[k] - mg - xh[k] * mgx));
  });
  return out;
}

namespace {
// Whether row r's target is cross_entropy's ignored one, and how many are not.
bool xent_ignored(const Node& n, const HostTensor& target, int64_t r) {
  const auto& ignore = n.attr<attr::CrossEntropy>().ignore_index;
  return ignore && int64_t(target.get(r)) == *ignore;
}
int64_t xent_counted(const Node& n, const HostTensor& target) {
  int64_t c = 0;
  for (int64_t r = 0; r < target.numel(); ++r) c += !xent_ignored(n, target, r);
  return c;
}
}  // namespace

HostTensor oracle_cross_entropy(const Node& n, const OracleIn& in) {
  const HostTensor& l = *in[0];
  int64_t N = l.shape[0], C = l.shape[1];
  double total = 0;
  for (int64_t r = 0; r < N; ++r) {
    if (xent_ignored(n, *in[1], r)) continue;
    int64_t t = index_or_throw(in[1]->get(r), C, "cross_entropy target");
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, l.get(r * C + c));
    for (int64_t c = 0; c < C; ++c) s += std::exp(l.get(r * C + c) - m);
    total += m + std::log(s) - l.get(r * C + t);
  }
  HostTensor out = make_out(n);
  int64_t counted = xent_counted(n, *in[1]);
  out.set(0, counted ? total / double(counted) : NAN);
  return out;
}

HostTensor oracle_cross_entropy_grad(const Node& n, const OracleIn& in) {
  const HostTensor& l = *in[0];
  int64_t N = l.shape[0], C = l.shape[1];
  double g = in[2]->get(0) / double(xent_counted(n, *in[1]));
  HostTensor out = make_out(n);
  for (int64_t r = 0; r < N; ++r) {
    if (xent_ignored(n, *in[1], r)) continue;
    int64_t t = index_or_throw(in[1]->get(r), C, "cross_entropy target");
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, l.get(r * C + c));
    for (int64_t c = 0; c < C; ++c) s += std::exp(l.get(r * C + c) - m);
    for (int64_t c = 0; c < C; ++c)
      out.set(r * C + c, (std::exp(l.get(r * C + c) - m) / s - (c == t ? 1.0 : 0.0)) * g);
  }
  return out;
}

HostTensor oracle_embedding(const Node& n, const OracleIn& in) {
  int64_t V = in[0]->shape[0], D = in[0]->shape[1];
  HostTensor out = make_out(n);
  for (int64_t p = 0; p < in[1]->numel(); ++p) {
    int64_t v = index_or_throw(in[1]->get(p), V, "embedding");
    for (int64_t d = 0; d < D; ++d) out.set(p * D + d, in[0]->get(v * D + d));
  }
  return out;
}

HostTensor oracle_embedding_grad(const Node& n, const OracleIn& in) {
  int64_t V = n.shape[0], D = n.shape[1];
  HostTensor out = make_out(n);
  for (int64_t p = 0; p < in[1]->numel(); ++p) {
    int64_t v = index_or_throw(in[1]->get(p), V, "embedding_grad");
    for (int64_t d = 0; d < D; ++d) out.set(v * D + d, out.get(v * D + d) + in[0]->get(p * D + d));
  }
  if (in.size() > 2)  // a gradient to add the rows to
    for (int64_t i = 0; i < V * D; ++i) out.set(i, in[2]->get(i) + out.get(i));
  return out;
}

HostTensor oracle_argmax(const Node& n, const OracleIn& in) {
  const Shape& xs = in[0]->shape;
  int a = normalize_axis(n.attr<attr::ArgMax>().axis, xs.size(), "argmax", xs);
  bool want_min = n.attr<attr::ArgMax>().min;
  HostTensor out = make_out(n);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, n.shape);
    idx.insert(idx.begin() + a, 0);
    int64_t best = 0;
    double bv = in[0]->get(ravel(idx, xs));
    for (int64_t j = 1; j < xs[size_t(a)] && !std::isnan(bv); ++j) {
      idx[size_t(a)] = j;
      double v = in[0]->get(ravel(idx, xs));
      if (std::isnan(v) || (want_min ? v < bv : v > bv)) best = j, bv = v;
    }
    out.set(o, double(best));
  }
  return out;
}

// cumsum: the sum up to each position, it included; cumprod: the product up to it, it included;
// cumprod_exclusive: the product up to it, it excluded (from the end when reversed).
HostTensor oracle_cumsum(const Node& n, const OracleIn& in) {
  const Shape& xs = in[0]->shape;
  int a = normalize_axis(n.attr<attr::Scan>().axis, xs.size(), op_name(n.op), xs);
  bool reverse = n.attr<attr::Scan>().reverse, product = n.op != Op::Cumsum;
  int64_t excluded = n.op == Op::CumprodExclusive ? 1 : 0;
  HostTensor out = make_out(n);
  for (int64_t i = 0; i < out.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, xs);
    int64_t at = idx[size_t(a)];
    int64_t lo = reverse ? at + excluded : 0, hi = reverse ? xs[size_t(a)] : at + 1 - excluded;
    double s = product ? 1 : 0;
    for (int64_t j = lo; j < hi; ++j) {
      idx[size_t(a)] = j;
      s = product ? s * in[0]->get(ravel(idx, xs)) : s + in[0]->get(ravel(idx, xs));
    }
    out.set(i, s);
  }
  return out;
}

// cumprod_grad(g, x): s_j = sum over i >= j of g_i * prod of x over (j, i] (mirrored when
// reversed), each term a direct product.
HostTensor oracle_cumprod_grad(const Node& n, const OracleIn& in) {
  const Shape& xs = in[0]->shape;
  int a = normalize_axis(n.attr<attr::Scan>().axis, xs.size(), "cumprod_grad", xs);
  bool reverse = n.attr<attr::Scan>().reverse;
  int64_t len = xs[size_t(a)];
  HostTensor out = make_out(n);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, xs);
    int64_t j = idx[size_t(a)];
    double s = 0;
    for (int64_t i = reverse ? 0 : j; i < (reverse ? j + 1 : len); ++i) {
      double term = 1;
      for (int64_t k = std::min(i, j) + (reverse ? 0 : 1); k < std::max(i, j) + (reverse ? 0 : 1); ++k) {
        idx[size_t(a)] = k;
        term *= in[1]->get(ravel(idx, xs));
      }
      idx[size_t(a)] = i;
      s += in[0]->get(ravel(idx, xs)) * term;
    }
    out.set(o, s);
  }
  return out;
}

HostTensor oracle_prod(const Node& n, const OracleIn& in) {
  const Shape& xs = in[0]->shape;
  int a = normalize_axis(n.attr<attr::Axis>().axis, xs.size(), "prod", xs);
  HostTensor out = make_out(n);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, n.shape);
    idx.insert(idx.begin() + a, 0);
    double p = 1;
    for (int64_t j = 0; j < xs[size_t(a)]; ++j) {
      idx[size_t(a)] = j;
      p *= in[0]->get(ravel(idx, xs));
    }
    out.set(o, p);
  }
  return out;
}

namespace {
// The element of data (shape ds) that gather reads for position p of the index.
int64_t gather_source(const Node& n, const HostTensor& index, int64_t p, const Shape& ds) {
  const int64_t axis = n.op == Op::Gather ? n.attr<attr::Axis>().axis : n.attr<attr::GatherGrad>().axis;
  int a = normalize_axis(axis, ds.size(), op_name(n.op), ds);
  std::vector<int64_t> idx = unravel(p, index.shape);
  idx[size_t(a)] = index_or_throw(index.get(p), ds[size_t(a)], op_name(n.op));
  return ravel(idx, ds);
}
}  // namespace

HostTensor oracle_gather(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  for (int64_t p = 0; p < out.numel(); ++p) out.set(p, in[0]->get(gather_source(n, *in[1], p, in[0]->shape)));
  return out;
}

HostTensor oracle_gather_grad(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  for (int64_t p = 0; p < in[1]->numel(); ++p) {
    int64_t q = gather_source(n, *in[1], p, n.shape);
    out.set(q, out.get(q) + in[0]->get(p));
  }
  return out;
}

HostTensor oracle_dropout(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  double p = n.attr<attr::Dropout>().p;
  for (int64_t i = 0; i < out.numel(); ++i) {
    bool keep = philox_uniform(n.attr<attr::Dropout>().seed, uint64_t(i)) >= float(p);
    // A dropped element is x * 0, as PyTorch's mask product: NaN for NaN or +-inf, else x's zero.
    out.set(i, keep ? in[0]->get(i) / (1.0 - p) : in[0]->get(i) * 0.0);
  }
  return out;
}

// conv3x3: the direct sum in float64.
HostTensor oracle_conv3x3(const Node& n, const OracleIn& in) {
  HostTensor out = make_out(n);
  const Shape& x = in[0]->shape;
  const int64_t p = n.attr<attr::Conv3x3>().pad;
  const bool flipped = n.attr<attr::Conv3x3>().flipped;
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], O = n.shape[1], OH = n.shape[2], OW = n.shape[3];
  for (int64_t b = 0; b < N; ++b)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double s = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t q = 0; q < 3; ++q) {
                const int64_t h = i + r - p, v = j + q - p;
                if (h < 0 || h >= H || v < 0 || v >= W) continue;
                const double wt = flipped ? in[1]->get(((c * O + o) * 3 + 2 - r) * 3 + 2 - q) : in[1]->get(((o * C + c) * 3 + r) * 3 + q);
                s += wt * in[0]->get(((b * C + c) * H + h) * W + v);
              }
          out.set(((b * O + o) * OH + i) * OW + j, s);
        }
  return out;
}

}  // namespace synoros::opdefs
