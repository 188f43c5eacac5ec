// Vector-Jacobian products. Each appends ordinary nodes to the tape; the adjoint of every view is
// itself a gather (pad, slice, shift, fold, ...), so no gradient needs a scatter or an atomic.
#include <utility>

#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"

namespace synoros::opdefs {

namespace {
ValueId x0(Graph& g, ValueId v) { return g.node(v).in[0]; }
ValueId x1(Graph& g, ValueId v) { return g.node(v).in[1]; }
ValueId sc(Graph& g, ValueId like, double v) { return g.scalar(v, g.dtype(like)); }
// Whether v is the constant 1 behind reshapes and expands (a seed, a sum's broadcast gradient).
bool is_one(const Graph& g, ValueId v) {
  while (g.node(v).op == Op::Reshape || g.node(v).op == Op::Expand) v = g.node(v).in[0];
  const Node& n = g.node(v);
  return n.op == Op::Const && n.data && n.data->numel() == 1 && n.data->get(0) == 1.0;
}
// a * b; the other operand itself where one is a 1 that changes neither its shape nor its dtype
// (x * 1 is x, bit for bit), so the gradient of sum(x * y) costs no pass of its own.
ValueId mul(Graph& g, ValueId a, ValueId b) {
  for (auto [one, x] : {std::pair{a, b}, std::pair{b, a}}) {
    const Shape &s1 = g.shape(one), &sx = g.shape(x);
    if (g.dtype(one) == g.dtype(x) && (s1 == sx || (numel(s1) == 1 && s1.size() <= sx.size())) && is_one(g, one))
      return x;
  }
  return g.binary(Op::Mul, a, b);
}
ValueId sub(Graph& g, ValueId a, ValueId b) { return g.binary(Op::Sub, a, b); }
// An op of one input with the given attributes.
ValueId op1(Graph& g, Op op, ValueId a, Attrs at) { return g.add(op, {a}, std::move(at)); }
// Reduction result reshaped back to keepdim form and broadcast to `shape`.
ValueId unreduce(Graph& g, ValueId go, const Node& n, Shape in) {
  Shape keep = in;
  for (int a : reduce_axes(n, in)) keep[size_t(a)] = 1;
  return g.expand(g.reshape(go, keep), in);
}
}  // namespace

void vjp_neg(Graph& g, ValueId, ValueId go, GradIn& gi) { gi[0] = g.unary(Op::Neg, go); }
void vjp_exp(Graph& g, ValueId v, ValueId go, GradIn& gi) { gi[0] = mul(g, go, v); }
void vjp_log(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.binary(Op::Div, go, x0(g, v));
}
void vjp_sqrt(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.binary(Op::Div, mul(g, go, sc(g, go, 0.5)), v);
}
void vjp_rsqrt(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId y3 = mul(g, mul(g, v, v), v);
  gi[0] = mul(g, go, mul(g, y3, sc(g, go, -0.5)));
}
void vjp_abs(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId x = x0(g, v), zero = sc(g, x, 0.0);
  ValueId sign = sub(g, g.binary(Op::CmpLt, zero, x), g.binary(Op::CmpLt, x, zero));
  gi[0] = mul(g, go, sign);
}
void vjp_relu(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // Masked by the output (y > 0 exactly where x > 0), so the pre-activation need not be kept
  // and the bias add before a ReLU can fuse with it.
  gi[0] = g.binary(Op::ReluGrad, go, v);
}
void vjp_gelu(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.binary(Op::GeluGrad, go, x0(g, v));
}
void vjp_gelu_tanh(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.binary(Op::GeluTanhGrad, go, x0(g, v));
}
void vjp_sigmoid(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = mul(g, go, mul(g, v, sub(g, sc(g, v, 1.0), v)));
}
void vjp_tanh(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = mul(g, go, sub(g, sc(g, v, 1.0), mul(g, v, v)));
}
void vjp_cast(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  DType src = g.dtype(x0(g, v));
  if (is_float(src) && is_float(g.dtype(v))) gi[0] = g.cast(go, src);
}

void vjp_add(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.sum_to(go, g.shape(x0(g, v)));
  gi[1] = g.sum_to(go, g.shape(x1(g, v)));
}
void vjp_sub(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.sum_to(go, g.shape(x0(g, v)));
  gi[1] = g.sum_to(g.unary(Op::Neg, go), g.shape(x1(g, v)));
}
void vjp_mul(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v);
  gi[0] = g.sum_to(mul(g, go, b), g.shape(a));
  gi[1] = g.sum_to(mul(g, go, a), g.shape(b));
}
void vjp_div(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v);
  gi[0] = g.sum_to(g.binary(Op::Div, go, b), g.shape(a));
  gi[1] = g.sum_to(g.unary(Op::Neg, g.binary(Op::Div, mul(g, go, v), b)), g.shape(b));
}
void vjp_pow(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v);
  ValueId am1 = g.binary(Op::Pow, a, sub(g, b, sc(g, b, 1.0)));
  gi[0] = g.sum_to(mul(g, go, mul(g, b, am1)), g.shape(a));
  gi[1] = g.sum_to(mul(g, go, mul(g, v, g.unary(Op::Log, a))), g.shape(b));
}
namespace {
// Routes go to a where `b_wins` is 0 and to b where it is 1 (ties were decided by the forward).
// PyTorch's rule for maximum and minimum: a tie gives each operand half the gradient, the
// operand that loses gets none, and where either is NaN (no comparison holds) both get all of it.
void route(Graph& g, ValueId v, ValueId a_loses, ValueId b_loses, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v), zero = sc(g, go, 0.0);
  ValueId share = g.add(Op::Where, {g.binary(Op::CmpEq, a, b), g.binary(Op::Mul, go, sc(g, go, 0.5)), go});
  gi[0] = g.sum_to(g.add(Op::Where, {a_loses, zero, share}), g.shape(a));
  gi[1] = g.sum_to(g.add(Op::Where, {b_loses, zero, share}), g.shape(b));
}
}  // namespace
void vjp_max(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v);
  route(g, v, g.binary(Op::CmpLt, a, b), g.binary(Op::CmpLt, b, a), go, gi);
}
void vjp_min(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  ValueId a = x0(g, v), b = x1(g, v);
  route(g, v, g.binary(Op::CmpLt, b, a), g.binary(Op::CmpLt, a, b), go, gi);
}
void vjp_where(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Node& n = g.node(v);
  ValueId c = n.in[0], a = n.in[1], b = n.in[2];
  ValueId zero = sc(g, go, 0.0);
  gi[1] = g.sum_to(g.add(Op::Where, {c, go, zero}), g.shape(a));
  gi[2] = g.sum_to(g.add(Op::Where, {c, zero, go}), g.shape(b));
}

void vjp_sum(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Node n = g.node(v);
  gi[0] = unreduce(g, go, n, g.shape(n.in[0]));
}
void vjp_mean(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Node n = g.node(v);
  Shape in = g.shape(n.in[0]);
  int64_t count = 1;
  for (int a : reduce_axes(n, in)) count *= in[size_t(a)];
  ValueId scaled = mul(g, go, sc(g, go, 1.0 / double(count)));
  gi[0] = unreduce(g, scaled, n, in);
}
void vjp_reduce_max(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Node n = g.node(v);
  ValueId x = n.in[0];
  // Ties share the gradient evenly: (x == max) * g / count, as one op (one pass per window)
  // with the bits of that composite.
  gi[0] = g.add(Op::ReduceMaxGrad, {x, v, go}, n.attrs);
}

void vjp_reshape(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.reshape(go, g.shape(x0(g, v)));
}
void vjp_permute(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const auto& p = g.node(v).attr<attr::Permute>().perm;
  size_t r = p.size();
  std::vector<int64_t> inv(r);
  for (size_t i = 0; i < r; ++i)
    inv[size_t(normalize_axis(p[i], r, "permute", g.shape(v)))] = int64_t(i);
  gi[0] = g.permute(go, inv);
}
void vjp_expand(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.sum_to(go, g.shape(x0(g, v)));
}
void vjp_slice(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Shape& in = g.shape(x0(g, v));
  AxisArgs a = axis_args(g.node(v), in.size());
  gi[0] = op1(g, Op::Pad, go, attr::Pad{a.axis, a.a, in[size_t(a.axis)] - a.b});
}
void vjp_pad(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Shape& in = g.shape(x0(g, v));
  AxisArgs a = axis_args(g.node(v), in.size());
  gi[0] = op1(g, Op::Slice, go, attr::Slice{a.axis, a.a, a.a + in[size_t(a.axis)]});
}
void vjp_stride(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // Upsample with zeros as a gather: [.., n', ..] -> [.., n', 1, ..] -> pad to s -> merge -> cut.
  Shape in = g.shape(x0(g, v));
  AxisArgs a = axis_args(g.node(v), in.size());
  size_t ax = size_t(a.axis);
  Shape gs = g.shape(go);
  Shape split = gs;
  split.insert(split.begin() + long(ax) + 1, 1);
  ValueId up = op1(g, Op::Pad, g.reshape(go, split), attr::Pad{a.axis + 1, 0, a.a - 1});
  Shape merged = gs;
  merged[ax] = gs[ax] * a.a;
  gi[0] = op1(g, Op::Slice, g.reshape(up, merged), attr::Slice{a.axis, 0, in[ax]});
}
void vjp_shift(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  AxisArgs a = axis_args(g.node(v), g.shape(v).size());
  gi[0] = op1(g, Op::Shift, go, attr::Shift{a.axis, -a.a});
}
namespace {
// The adjoint of a stride-1, odd-window unfold whose incoming gradient is a contraction
// y[.., a, .., j] = sum p[.., a, ..] q[.., j, ..] (the label a from one operand, the window j
// from the other): fold(y)[a] = sum_j y[a - (j - c) d, j] is the same contraction over the
// unfolded p and the window-flipped q -- a transposed convolution computed as a convolution,
// never materialising y. Returns kNoValue when the pattern does not apply.
ValueId fold_as_contraction(Graph& g, ValueId go, const WindowArgs& w) {
  // A zero pad of the unfolded axis between them (the adjoint of a "valid" convolution's cut)
  // commutes with the contraction: it pads the operand that carries the axis.
  int64_t pad_before = 0, pad_after = 0;
  if (g.node(go).op == Op::Pad) {
    AxisArgs pa = axis_args(g.node(go), g.shape(go).size());
    if (pa.axis != w.axis) return kNoValue;
    pad_before = pa.a, pad_after = pa.b;
    go = g.node(go).in[0];
  }
  const Node gn = g.node(go);  // a copy: adding nodes below may move the graph's storage
  if (gn.op != Op::Einsum || gn.in.size() != 2 || w.stride != 1 || w.window % 2 == 0) return kNoValue;
  std::vector<Shape> shapes = {g.shape(gn.in[0]), g.shape(gn.in[1])};
  EinsumSpec e = parse_einsum(gn.attr<attr::Einsum>().spec, shapes);
  char a = e.out[size_t(w.axis)], j = e.out.back();
  auto has = [](const std::string& s, char l) { return s.find(l) != std::string::npos; };
  int p = has(e.in[0], a) ? 0 : 1, q = 1 - p;
  if (!has(e.in[size_t(p)], a) || has(e.in[size_t(q)], a) || !has(e.in[size_t(q)], j) || has(e.in[size_t(p)], j))
    return kNoValue;
  char z = 0;
  std::string used = e.labels();
  for (char c = 'a'; c <= 'z' && !z; ++c)
    if (!has(used, c)) z = c;
  if (!z) return kNoValue;
  std::string lp = e.in[size_t(p)], lq = e.in[size_t(q)];
  ValueId src = gn.in[size_t(p)];
  if (pad_before || pad_after) src = op1(g, Op::Pad, src, attr::Pad{int64_t(lp.find(a)), pad_before, pad_after});
  ValueId up = op1(g, Op::Unfold, src, attr::Window{int64_t(lp.find(a)), w.window, w.dilation});
  // q flipped along j: a product with the anti-identity (exact: one term per output).
  DType t = g.dtype(gn.in[size_t(q)]);
  HostTensor flip(t, {w.window, w.window});
  for (int64_t r = 0; r < w.window; ++r) flip.set(r * w.window + (w.window - 1 - r), 1.0);
  // Lay the flipped q out as [its output labels][the contracted labels in p's order], so the
  // contraction's K group is contiguous in it and needs no gather.
  std::string out = e.out.substr(0, e.out.size() - 1), lpz = lp + z, lqz;
  for (char l : lq)
    if (l != j && has(out, l)) lqz += l;
  for (char l : lpz)
    if ((l == z || has(lq, l)) && !has(out, l)) lqz += l;
  if (lqz.size() != lq.size()) return kNoValue;  // a label summed within q alone
  ValueId qf = g.einsum(make_einsum({lq, std::string{j, z}}, lqz), {gn.in[size_t(q)], g.constant(flip)});
  std::vector<std::string> ins = {lpz, lqz};
  std::vector<ValueId> ops = {up, qf};
  if (p == 1) std::swap(ins[0], ins[1]), std::swap(ops[0], ops[1]);
  return g.einsum(make_einsum(ins, out), ops);
}
}  // namespace

void vjp_unfold(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Shape& in = g.shape(x0(g, v));
  WindowArgs w = window_args(g.node(v), in.size());
  ValueId direct = fold_as_contraction(g, go, w);
  if (direct != kNoValue) {
    gi[0] = direct;
    return;
  }
  if (w.stride == 1) {
    gi[0] = op1(g, Op::Fold, go, attr::Window{w.axis, w.window, w.dilation});
  } else {
    gi[0] = op1(g, Op::Fold, go, attr::Window{w.axis, w.window, w.dilation, w.stride, in[size_t(w.axis)]});
  }
}
void vjp_fold(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Shape& in = g.shape(x0(g, v));
  WindowArgs w = window_args(g.node(v), in.size() - 1);
  if (w.stride == 1) {
    gi[0] = op1(g, Op::Unfold, go, attr::Window{w.axis, w.window, w.dilation});
  } else {
    gi[0] = op1(g, Op::Unfold, go, attr::Window{w.axis, w.window, w.dilation, w.stride});
  }
}

namespace {
// The unfold view "nchwxy" of an [N, C, H, W] value for a 3x3, stride-1 convolution with padding
// p, built as the front end's windows() builds it, so the weight gradient below is the contraction
// the convolution kernels recognise.
ValueId windows3x3(Graph& g, ValueId x, int64_t p) {
  ValueId u = x;
  for (int64_t axis : {2, 3}) {
    const int64_t out = g.shape(x)[size_t(axis)] + 2 * p - 2;
    int64_t shift = 1 - p;
    if (shift < 0) u = op1(g, Op::Pad, u, attr::Pad{axis, -shift, -shift}), shift = 0;
    u = op1(g, Op::Unfold, u, attr::Window{axis, 3, 1});
    if (shift != 0 || g.shape(u)[size_t(axis)] != out) u = op1(g, Op::Slice, u, attr::Slice{axis, shift, shift + out});
  }
  return u;
}
}  // namespace

// conv3x3: the input gradient is the flipped convolution of g with padding 2 - p (and the flipped
// form's is the plain one); the weight gradient is the contraction of g with the input's windows
// (for the flipped form, of the input with g's windows, which is the same sum transposed).
void vjp_conv3x3(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const Node n = g.node(v);
  const int64_t p = n.attr<attr::Conv3x3>().pad;
  const bool flipped = n.attr<attr::Conv3x3>().flipped;
  gi[0] = g.add(Op::Conv3x3, {go, n.in[1]}, attr::Conv3x3{2 - p, !flipped});
  const std::string spec = "nohw,nchwxy->ocxy";
  gi[1] = flipped ? g.einsum(spec, {n.in[0], windows3x3(g, go, 2 - p)}) : g.einsum(spec, {go, windows3x3(g, n.in[0], p)});
}

void vjp_einsum(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Node n = g.node(v);
  std::vector<Shape> shapes;
  for (ValueId x : n.in) shapes.push_back(g.shape(x));
  EinsumSpec e = parse_einsum(n.attr<attr::Einsum>().spec, shapes);
  for (size_t k = 0; k < n.in.size(); ++k) {
    std::vector<std::string> ins = {e.out};
    std::vector<ValueId> ops = {go};
    std::string avail = e.out;
    for (size_t j = 0; j < n.in.size(); ++j) {
      if (j == k) continue;
      ins.push_back(e.in[j]);
      ops.push_back(n.in[j]);
      avail += e.in[j];
    }
    // Labels of operand k that neither the output nor another operand carries were summed out
    // in the forward; their adjoint is a broadcast.
    std::string kept;
    Shape kept_shape = shapes[k];
    for (size_t i = 0; i < e.in[k].size(); ++i) {
      bool has = avail.find(e.in[k][i]) != std::string::npos;
      if (has) kept += e.in[k][i];
      else kept_shape[i] = 1;
    }
    ValueId r = g.einsum(make_einsum(ins, kept), ops);
    gi[k] = g.expand(g.reshape(r, kept_shape), shapes[k]);
  }
}

void vjp_softmax(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Attrs at = g.node(v).attrs;
  gi[0] = g.add(Op::SoftmaxGrad, {v, go}, at);
}
void vjp_log_softmax(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Attrs at = g.node(v).attrs;
  gi[0] = g.add(Op::LogSoftmaxGrad, {v, go}, at);
}
void vjp_attention(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // One launch computes dq, dk and dv from q, k, v, the output and its gradient (the softmax
  // statistics are recomputed); the three are slices of its result along the query axis.
  Node n = g.node(v);
  std::vector<ValueId> in = {n.in[0], n.in[1], n.in[2], v, go};
  if (n.in.size() == 4) in.push_back(n.in[3]);  // the offset: no gradient
  ValueId all = g.add(Op::AttentionGrad, in, n.attrs);
  const Shape& q = g.shape(n.in[0]);
  const int64_t ax = int64_t(q.size()) - 2, Tq = q[size_t(ax)], Tk = g.shape(n.in[1])[size_t(ax)];
  gi[0] = op1(g, Op::Slice, all, attr::Slice{ax, 0, Tq});
  gi[1] = op1(g, Op::Slice, all, attr::Slice{ax, Tq, Tq + Tk});
  gi[2] = op1(g, Op::Slice, all, attr::Slice{ax, Tq + Tk, Tq + 2 * Tk});
}
void vjp_layernorm(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // Only x is needed (as PyTorch saves it): the statistics and the normalised values are
  // recomputed, so neither the output nor x - mean stays alive for the backward pass.
  Node n = g.node(v);
  const attr::Eps stats{n.attr<attr::Eps>().eps};
  ValueId x = n.in[0];
  if (n.in.size() == 1) {
    gi[0] = g.add(Op::LayerNormGrad, {x, go}, stats);
    return;
  }
  // dx and the weight and bias gradients, sum(g xh) and sum(g) over the rows, in one pass over x
  // and g; dx is the first rows (an alias, no copy), the other two the last two.
  ValueId all = g.add(Op::LayerNormBackward, {x, go, n.in[1]}, stats);
  const int64_t C = g.shape(x).back(), rows = g.shape(all)[0] - 2;
  gi[0] = g.reshape(op1(g, Op::Slice, all, attr::Slice{0, 0, rows}), g.shape(x));
  gi[1] = g.reshape(op1(g, Op::Slice, all, attr::Slice{0, rows, rows + 1}), {C});
  gi[2] = g.reshape(op1(g, Op::Slice, all, attr::Slice{0, rows + 1, rows + 2}), {C});
}
// batchnorm(x, mean, var, weight, bias): y = (x - mean) r w + b with r = 1/sqrt(var + eps).
// With batch_stats mean and var are declared the batch statistics of x (over every axis but 1),
// as BatchNorm2d builds it: the input gradient is then the total derivative through them,
// dx = r w (g - mean(g) - xh mean(g xh)) with xh = (x - mean) r (PyTorch's batch-norm backward),
// and nothing flows into the statistics (their dependence on x is in dx already). Otherwise the
// statistics are ordinary inputs (running statistics, say) and each input gets its partial
// derivative. Either way batchnorm_sums reads g and x once for sum(g) and sum(g xh), and dx is
// one elementwise group -- where differentiating the statistics' graph takes about twice the
// passes. weight gets sum(g xh), bias sum(g).
void vjp_batchnorm(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  Node n = g.node(v);
  ValueId x = n.in[0], mean = n.in[1], var = n.in[2], w = n.in[3];
  const auto& bn = n.attr<attr::BatchNorm>();
  const bool batch_stats = bn.batch_stats;
  Shape s = g.shape(x);
  int64_t C = s[1];
  Shape cs(s.size(), 1);
  cs[1] = C;
  double count = double(numel(s)) / double(std::max<int64_t>(C, 1));
  auto bc = [&](ValueId t) { return g.expand(g.reshape(t, cs), s); };
  ValueId sums = g.add(Op::BatchNormSums, {go, x, mean, var}, attr::Eps{bn.eps});
  auto row = [&](int64_t k) { return g.reshape(op1(g, Op::Slice, sums, attr::Slice{0, k, k + 1}), {C}); };
  ValueId db = row(0), dw = row(1);
  ValueId r = g.unary(Op::Rsqrt, g.binary(Op::Add, var, sc(g, var, bn.eps)));
  ValueId rw = mul(g, r, w);
  gi[3] = dw;
  gi[4] = db;
  if (!batch_stats) {
    gi[0] = mul(g, bc(rw), go);
    gi[1] = g.unary(Op::Neg, mul(g, db, rw));                            // -sum(g) r w
    gi[2] = mul(g, mul(g, dw, mul(g, rw, r)), sc(g, var, -0.5));          // -sum(g xh) w r^2 / 2
    return;
  }
  ValueId xh = mul(g, sub(g, x, bc(mean)), bc(r));
  ValueId inv = sc(g, var, count > 0 ? 1.0 / count : 0.0);
  ValueId centred = sub(g, sub(g, go, bc(mul(g, db, inv))), mul(g, xh, bc(mul(g, dw, inv))));
  gi[0] = mul(g, bc(rw), centred);
}
void vjp_cross_entropy(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.add(Op::CrossEntropyGrad, {x0(g, v), x1(g, v), go}, g.node(v).attrs);
}
void vjp_embedding(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.add(Op::EmbeddingGrad, {go, x1(g, v)}, attr::Rows{g.shape(x0(g, v))[0]});
}
void vjp_cumsum(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  const auto a = g.node(v).attr<attr::Scan>();  // each output sums the inputs before it: the reverse sum
  gi[0] = op1(g, Op::Cumsum, go, attr::Scan{a.axis, !a.reverse});
}
void vjp_cumprod(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // dx_j = (product before j) * sum over i >= j of g_i * (product of x over (j, i]): no division,
  // so zeros get theirs exactly.
  const auto a = g.node(v).attr<attr::Scan>();
  ValueId x = x0(g, v);
  gi[0] = mul(g, op1(g, Op::CumprodExclusive, x, a), g.add(Op::CumprodGrad, {go, x}, a));
}
void vjp_prod(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // d prod / d x_i = the product of the others = (product before i) * (product after i).
  ValueId x = x0(g, v);
  int64_t axis = g.node(v).attr<attr::Axis>().axis;
  Shape in = g.shape(x), keep = in;
  keep[size_t(normalize_axis(axis, in.size(), "prod", in))] = 1;
  ValueId others =
      mul(g, op1(g, Op::CumprodExclusive, x, attr::Scan{axis, false}), op1(g, Op::CumprodExclusive, x, attr::Scan{axis, true}));
  gi[0] = mul(g, g.expand(g.reshape(go, keep), in), others);
}
void vjp_gather(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  gi[0] = g.add(Op::GatherGrad, {go, x1(g, v)}, attr::GatherGrad{g.node(v).attr<attr::Axis>().axis, g.shape(x0(g, v))});
}
void vjp_dropout(Graph& g, ValueId v, ValueId go, GradIn& gi) {
  // The mask depends only on (seed, element index), so the same op on the gradient reapplies it.
  Attrs at = g.node(v).attrs;
  gi[0] = g.add(Op::Dropout, {go}, std::move(at));
}

}  // namespace synoros::opdefs

namespace synoros::opdefs {
// Piecewise-constant ops (comparisons): the gradient through them is zero almost everywhere.
void vjp_none(Graph&, ValueId, ValueId, GradIn&) {}
void no_vjp(Graph& g, ValueId v, ValueId, GradIn&) {
  throw Error(std::string(op_name(g.node(v).op)) + " is not differentiable");
}
}  // namespace synoros::opdefs
