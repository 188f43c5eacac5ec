#include "synoros/tensor.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <unordered_map>

#include "api/tensor_impl.hpp"
#include "core/thread_block_cache.hpp"
#include "core/thread_scratch.hpp"
#include "synoros/autodiff.hpp"

namespace synoros {

namespace {
// TensorImpl blocks (with their shared_ptr control block) freed by a thread, kept for its next
// tensors (see ThreadBlockCache): an eager step records a few dozen tensors and frees the last
// step's together.
struct ImplTag;
using ImplAllocator = RecyclingAllocator<TensorImpl, ThreadBlockCache<128, delete_block, ImplTag>>;
// The host tensors of the values an eager step realizes (its loss and gradients), likewise.
struct HostTag;
using HostAllocator = RecyclingAllocator<HostTensor, ThreadBlockCache<32, delete_block, HostTag>>;
}  // namespace

std::shared_ptr<TensorImpl> new_tensor_impl() { return std::allocate_shared<TensorImpl>(ImplAllocator()); }
std::shared_ptr<HostTensor> new_host_tensor(HostTensor&& v) {
  return std::allocate_shared<HostTensor>(HostAllocator(), std::move(v));
}

namespace {
std::shared_ptr<TensorImpl> leaf(HostTensor v, bool is_const) {
  auto t = new_tensor_impl();
  t->dtype = v.dtype;
  t->shape = v.shape;
  t->value = new_host_tensor(std::move(v));
  t->is_const = is_const;
  return t;
}
const TensorImpl& need(const Tensor& t) {
  if (!t.impl()) throw Error("tensor: use of an undefined tensor");
  return *t.impl();
}
}  // namespace

TensorImpl::TensorImpl() {
  static std::atomic<uint64_t> next{0};
  seq = next.fetch_add(1, std::memory_order_relaxed);
}

TraceState& trace_state() {
  static thread_local TraceState s;
  return s;
}

Tensor Tensor::from(HostTensor value) { return Tensor(leaf(std::move(value), false)); }
Tensor Tensor::from(const std::vector<float>& data, Shape shape) {
  if (int64_t(data.size()) != synoros::numel(shape))
    throw Error("Tensor::from: " + std::to_string(data.size()) + " values do not fill shape " + shape_str(shape));
  HostTensor h(DType::F32, std::move(shape));
  std::memcpy(h.buffer->data(), data.data(), data.size() * 4);
  return from(std::move(h));
}
Tensor Tensor::scalar(double v, DType t) {
  HostTensor h(t, {});
  h.set(0, v);
  return Tensor(leaf(std::move(h), true));
}
Tensor Tensor::constant(HostTensor value) { return Tensor(leaf(std::move(value), true)); }
Tensor Tensor::zeros(Shape shape, DType t) { return from(HostTensor(t, std::move(shape))); }
Tensor Tensor::ones(Shape shape, DType t) { return full(std::move(shape), 1.0, t); }
Tensor Tensor::full(Shape shape, double value, DType t) {
  HostTensor h(t, std::move(shape));
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, value);
  return from(std::move(h));
}
Tensor Tensor::arange(int64_t n, DType t) {
  if (n < 0) throw Error("arange: n must be >= 0, got " + std::to_string(n));
  HostTensor h(t, {n});
  for (int64_t i = 0; i < n; ++i) h.set(i, double(i));
  return from(std::move(h));
}
Tensor Tensor::randn(Shape shape, uint64_t seed, double std) {
  HostTensor h(DType::F32, std::move(shape));
  std::mt19937_64 rng(seed);
  // Box-Muller on the raw generator: std::normal_distribution is implementation-defined.
  for (int64_t i = 0; i < h.numel(); ++i) {
    double u1 = (double(rng() >> 11) + 1.0) / 9007199254740993.0, u2 = double(rng() >> 11) / 9007199254740992.0;
    h.set(i, std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  return from(std::move(h));
}
Tensor Tensor::uniform(Shape shape, uint64_t seed, double bound) {
  HostTensor h(DType::F32, std::move(shape));
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, (double(rng() >> 11) / 9007199254740992.0 * 2 - 1) * bound);
  return from(std::move(h));
}

const Shape& Tensor::shape() const { return need(*this).shape; }
DType Tensor::dtype() const { return need(*this).dtype; }
bool Tensor::realized() const { return need(*this).value != nullptr; }
bool Tensor::is_leaf() const { return need(*this).in.empty(); }

namespace {
// A thread's recording switches (trivially destructible, so that they can be read at any point of
// the thread's exit) and apply_n's scratch.
struct Recording {
  bool grad_enabled = true;
  int32_t recompute_segment = -1;  // the activation-checkpoint segment being recorded
};
Recording& recording() { return thread_scratch<Recording>(); }
struct ApplyScratch {
  Graph g;
  std::vector<ValueId> ids;
};

// An input seen with gradient recording off: a leaf requiring a gradient is replaced by an alias
// of its storage that does not (read in place, so assign()s reach it as they reach the leaf); a
// value computed from such leaves is cut from them (realized, as detach(); while compile() traces,
// where nothing can be realized, it is kept, and backward() refuses a loss behind such a value).
std::shared_ptr<TensorImpl> without_grad(const Tensor& x) {
  std::unordered_map<const TensorImpl*, bool> memo;
  if (!depends_on_grad(need(x), memo)) return x.impl_ptr();
  if (!x.is_leaf()) return trace_state().active ? x.impl_ptr() : x.detach().impl_ptr();
  auto a = new_tensor_impl();
  a->dtype = x.impl()->dtype;
  a->shape = x.impl()->shape;
  a->value = x.impl()->value;
  a->placeholder = x.impl()->placeholder;
  a->stateful = true;
  return a;
}
}  // namespace

RecomputeScope::RecomputeScope() : prev_(recording().recompute_segment) {
  static std::atomic<int32_t> next{0};
  recording().recompute_segment = next.fetch_add(1, std::memory_order_relaxed);
}
RecomputeScope::~RecomputeScope() { recording().recompute_segment = prev_; }

bool grad_enabled() { return recording().grad_enabled; }
void set_grad_enabled(bool on) { recording().grad_enabled = on; }

Tensor Tensor::apply(Op op, const std::vector<Tensor>& in, const Attrs& attrs, DType cast_to) {
  return apply_n(op, in.data(), in.size(), attrs, cast_to);
}
Tensor Tensor::apply(Op op, std::initializer_list<Tensor> in, const Attrs& attrs, DType cast_to) {
  return apply_n(op, in.begin(), in.size(), attrs, cast_to);
}
Tensor Tensor::apply_n(Op op, const Tensor* in, size_t k, const Attrs& attrs, DType cast_to) {
  // Shape and dtype come from the op table's own rules, on a scratch graph of the inputs: one
  // per thread, whose input nodes are retyped in place (their shapes' storage reused), as is the
  // list of input ids the op's node takes.
  ApplyScratch& sc = thread_scratch<ApplyScratch>();
  Graph& g = sc.g;
  std::vector<ValueId>& ids = sc.ids;
  const Recording& rec = recording();
  const bool grad = rec.grad_enabled;
  while (g.size() < k) g.input(DType::F32, {}, "x");
  g.truncate(k);
  ids.resize(k);
  for (size_t i = 0; i < k; ++i) {
    const TensorImpl& x = need(in[i]);
    Node& n = g.node_mut(ValueId(i));
    if (n.op != Op::Input) n = Node{}, n.name = "x";  // the last call's result
    n.dtype = x.dtype;
    n.shape = x.shape;
    ids[i] = ValueId(i);
  }
  const ValueId v = g.add(op, std::move(ids), attrs, cast_to);
  Node& res = g.node_mut(v);
  ids = std::move(res.in);
  Attrs res_attrs = std::move(res.attrs);  // with the op's defaults filled in
  const DType res_dtype = res.dtype;
  Shape res_shape = std::move(res.shape);  // taken out before anything below could record
  // Inputs first: a node's sequence number (its program order) must follow its inputs'.
  std::vector<std::shared_ptr<TensorImpl>> inputs;
  inputs.reserve(k);
  for (size_t i = 0; i < k; ++i) inputs.push_back(grad ? in[i].impl_ptr() : without_grad(in[i]));
  auto t = new_tensor_impl();
  t->op = op;
  t->attrs = std::move(res_attrs);
  t->dtype = res_dtype;
  t->shape = std::move(res_shape);
  t->in = std::move(inputs);
  t->no_grad = !grad;
  t->recompute = rec.recompute_segment;
  return Tensor(t);
}

namespace {
Tensor bin(Op op, const Tensor& a, const Tensor& b) { return Tensor::apply(op, {a, b}); }
Tensor sc(const Tensor& like, double v) { return Tensor::scalar(v, like.dtype()); }
Tensor red(Op op, const Tensor& a, std::vector<int64_t> axes, bool keep) {
  return Tensor::apply(op, {a}, attr::Reduce{std::move(axes), keep});
}
Tensor op1(Op op, const Tensor& a, Attrs at) { return Tensor::apply(op, {a}, at); }
}  // namespace

Tensor Tensor::operator+(const Tensor& o) const { return bin(Op::Add, *this, o); }
Tensor Tensor::operator-(const Tensor& o) const { return bin(Op::Sub, *this, o); }
Tensor Tensor::operator*(const Tensor& o) const { return bin(Op::Mul, *this, o); }
Tensor Tensor::operator/(const Tensor& o) const { return bin(Op::Div, *this, o); }
Tensor Tensor::operator-() const { return apply(Op::Neg, {*this}); }
Tensor Tensor::operator+(double s) const { return *this + sc(*this, s); }
Tensor Tensor::operator-(double s) const { return *this - sc(*this, s); }
Tensor Tensor::operator*(double s) const { return *this * sc(*this, s); }
Tensor Tensor::operator/(double s) const { return *this / sc(*this, s); }
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) SYNOROS_TENSOR_##api(Enum, ident)
#define SYNOROS_TENSOR_method(Enum, ident) \
  Tensor Tensor::ident() const { return apply(Op::Enum, {*this}); }
#define SYNOROS_TENSOR_internal(Enum, ident)
#include "synoros/ops.def"
#undef SYNOROS_TENSOR_method
#undef SYNOROS_TENSOR_internal
Tensor Tensor::pow(double e) const { return bin(Op::Pow, *this, sc(*this, e)); }
Tensor Tensor::sum(std::vector<int64_t> axes, bool keep) const { return red(Op::Sum, *this, std::move(axes), keep); }
Tensor Tensor::mean(std::vector<int64_t> axes, bool keep) const { return red(Op::Mean, *this, std::move(axes), keep); }
Tensor Tensor::max(std::vector<int64_t> axes, bool keep) const { return red(Op::ReduceMax, *this, std::move(axes), keep); }
Tensor Tensor::reshape(Shape s) const {
  int64_t known = 1, free = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != -1) {
      known *= s[i];
    } else if (free >= 0) {
      throw Error("reshape: only one dimension can be -1, got " + shape_str(s));
    } else {
      free = int64_t(i);
    }
  }
  if (free >= 0) {
    if (known <= 0 || numel() % known != 0)
      throw Error("reshape: shape " + shape_str(s) + " is invalid for a tensor of " + std::to_string(numel()) +
                  " elements");
    s[size_t(free)] = numel() / known;
  }
  return op1(Op::Reshape, *this, attr::Target{std::move(s)});
}
Tensor Tensor::permute(std::vector<int64_t> p) const { return op1(Op::Permute, *this, attr::Permute{std::move(p)}); }
Tensor Tensor::transpose() const {
  size_t r = shape().size();
  if (r < 2) throw Error("transpose: needs rank >= 2, got shape " + shape_str(shape()));
  std::vector<int64_t> p(r);
  for (size_t i = 0; i < r; ++i) p[i] = int64_t(i);
  std::swap(p[r - 1], p[r - 2]);
  return permute(p);
}
Tensor Tensor::expand(Shape s) const {
  const Shape& in = shape();
  for (size_t i = 0; i < s.size() && i < in.size(); ++i)
    if (s[s.size() - 1 - i] == -1) s[s.size() - 1 - i] = in[in.size() - 1 - i];
  return op1(Op::Expand, *this, attr::Target{std::move(s)});
}
Tensor Tensor::matmul(const Tensor& o) const {
  // torch.matmul's shapes: a 1-D operand gains an axis that the result drops; batch axes
  // broadcast; a 2-D right operand under a batched left one is one GEMM over all rows.
  const Shape &as = shape(), &bs = o.shape();
  if (as.empty() || bs.empty())
    throw Error("matmul: both operands need at least one axis, got " + shape_str(as) + " and " + shape_str(bs));
  if (as.size() == 1 && bs.size() == 1) return unsqueeze(0).matmul(o.unsqueeze(-1)).reshape({});
  if (as.size() == 1) return unsqueeze(0).matmul(o).squeeze(-2);
  if (bs.size() == 1) return matmul(o.unsqueeze(-1)).squeeze(-1);
  if (as.size() > 2 && bs.size() == 2) {
    int64_t lead = 1;
    for (size_t i = 0; i + 1 < as.size(); ++i) lead *= as[i];
    Shape rows{lead, as.back()}, out(as.begin(), as.end() - 1);
    out.push_back(bs.back());
    return reshape(rows).matmul(o).reshape(out);
  }
  if (as.size() != bs.size() || !std::equal(as.begin(), as.end() - 2, bs.begin())) {
    size_t r = std::max(as.size(), bs.size());
    Shape batch(r - 2, 1);
    for (size_t i = 0; i + 2 < r; ++i) {
      int64_t da = i + as.size() >= r ? as[i + as.size() - r] : 1, db = i + bs.size() >= r ? bs[i + bs.size() - r] : 1;
      if (da != db && da != 1 && db != 1)
        throw Error("matmul: batch axes of " + shape_str(as) + " and " + shape_str(bs) + " do not broadcast");
      batch[i] = da == 1 ? db : da;
    }
    Shape ea = batch, eb = batch;
    ea.insert(ea.end(), as.end() - 2, as.end());
    eb.insert(eb.end(), bs.end() - 2, bs.end());
    Tensor a2 = as.size() == r ? *this : reshape([&] { Shape s(r - as.size(), 1); s.insert(s.end(), as.begin(), as.end()); return s; }());
    Tensor b2 = bs.size() == r ? o : o.reshape([&] { Shape s(r - bs.size(), 1); s.insert(s.end(), bs.begin(), bs.end()); return s; }());
    return (a2.shape() == ea ? a2 : a2.expand(ea)).matmul(b2.shape() == eb ? b2 : b2.expand(eb));
  }
  Graph g;  // reuse the builder's spec construction and checks
  ValueId v = g.matmul(g.input(dtype(), shape(), "a"), g.input(o.dtype(), o.shape(), "b"));
  return apply(Op::Einsum, {*this, o}, g.node(v).attrs);
}
Tensor Tensor::softmax(int64_t axis) const { return op1(Op::Softmax, *this, attr::Axis{axis}); }
Tensor Tensor::log_softmax(int64_t axis) const { return op1(Op::LogSoftmax, *this, attr::Axis{axis}); }
Tensor Tensor::layernorm(double eps) const { return op1(Op::LayerNorm, *this, attr::Eps{eps}); }
Tensor Tensor::cast(DType t) const { return apply(Op::Cast, {*this}, {}, t); }
Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end) const {
  const Shape& s = shape();
  int64_t n = s[size_t(normalize_axis(axis, s.size(), "slice", s))];
  auto bound = [n](int64_t b) { return std::clamp<int64_t>(b < 0 ? b + n : b, 0, n); };
  start = bound(start);
  end = std::max(start, bound(end));
  return op1(Op::Slice, *this, attr::Slice{axis, start, end});
}
Tensor Tensor::pad(int64_t axis, int64_t before, int64_t after) const {
  return op1(Op::Pad, *this, attr::Pad{axis, before, after});
}
Tensor Tensor::unfold(int64_t axis, int64_t window, int64_t dilation, int64_t stride) const {
  return op1(Op::Unfold, *this, attr::Window{axis, window, dilation, stride});
}
Tensor Tensor::stride(int64_t axis, int64_t s) const { return s == 1 ? *this : op1(Op::Stride, *this, attr::Stride{axis, s}); }
Tensor Tensor::shift(int64_t axis, int64_t offset) const { return op1(Op::Shift, *this, attr::Shift{axis, offset}); }
Tensor Tensor::dropout(double p, uint64_t seed) const {
  return apply(Op::Dropout, {*this}, attr::Dropout{p, seed});
}

// Selections rather than max/min, whose gradients split at ties: PyTorch's clamp passes the whole
// gradient at the bounds.
Tensor Tensor::clamp_min(double lo) const {
  Tensor b = sc(*this, lo);
  return where(bin(Op::CmpLt, *this, b), b, *this);
}
Tensor Tensor::clamp_max(double hi) const {
  Tensor b = sc(*this, hi);
  return where(bin(Op::CmpLt, b, *this), b, *this);
}
Tensor Tensor::clamp(double lo, double hi) const { return clamp_min(lo).clamp_max(hi); }
Tensor Tensor::squeeze(int64_t axis) const {
  Shape s = shape();
  int64_t r = int64_t(s.size());
  if (r == 0 && (axis == 0 || axis == -1)) return *this;  // as PyTorch
  if (axis < -r || axis >= r)
    throw Error("squeeze: axis " + std::to_string(axis) + " is out of range for shape " + shape_str(s));
  size_t a = size_t(axis < 0 ? axis + r : axis);
  if (s[a] != 1) return *this;
  s.erase(s.begin() + std::ptrdiff_t(a));
  return reshape(s);
}
Tensor Tensor::unsqueeze(int64_t axis) const {
  Shape s = shape();
  int64_t r = int64_t(s.size());
  if (axis < -r - 1 || axis > r)
    throw Error("unsqueeze: axis " + std::to_string(axis) + " is out of range for shape " + shape_str(s));
  s.insert(s.begin() + std::ptrdiff_t(axis < 0 ? axis + r + 1 : axis), 1);
  return reshape(s);
}
Tensor Tensor::clone() const {
  Tensor c = cast(dtype());
  if (!trace_state().active) realize({c});  // the copy is taken now, as PyTorch's
  return c;
}
Tensor Tensor::min(std::vector<int64_t> axes, bool keep) const { return -((-*this).max(std::move(axes), keep)); }
Tensor Tensor::var(std::vector<int64_t> axes, int64_t correction, bool keep) const {
  Tensor m = mean(axes, true);
  Tensor d = *this - m;
  int64_t n = numel() / std::max<int64_t>(1, m.numel());  // elements per reduced group
  // PyTorch divides by max(0, n - correction): a zero divisor gives inf or NaN, as there.
  return (d * d).sum(std::move(axes), keep) / double(std::max<int64_t>(0, n - correction));
}
Tensor Tensor::std(std::vector<int64_t> axes, int64_t correction, bool keep) const {
  return var(std::move(axes), correction, keep).sqrt();
}

Tensor operator-(double s, const Tensor& t) { return sc(t, s) - t; }
Tensor operator/(double s, const Tensor& t) { return sc(t, s) / t; }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return Tensor::apply(Op::Where, {cond, a, b}); }

Tensor cat(const std::vector<Tensor>& ts, int64_t axis) {
  if (ts.empty()) throw Error("cat: no tensors");
  const Shape& s0 = ts[0].shape();
  int64_t r = int64_t(s0.size());
  if (r == 0) throw Error("cat: zero-dimensional tensors cannot be joined");
  if (axis < -r || axis >= r) throw Error("cat: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  size_t a = size_t(axis < 0 ? axis + r : axis);
  for (const Tensor& t : ts) {
    Shape s = t.shape();
    if (t.dtype() != ts[0].dtype() || s.size() != s0.size())
      throw Error("cat: " + shape_str(s) + " " + dtype_name(t.dtype()) + " does not join " + shape_str(s0) + " " + dtype_name(ts[0].dtype()));
    s[a] = s0[a];
    if (s != s0) throw Error("cat: shapes " + shape_str(s0) + " and " + shape_str(t.shape()) + " differ off axis " + std::to_string(a));
  }
  // Halves joined pairwise: each padded to their sum and selected where it lies (a select copies
  // bits; a sum with the zero padding would turn -0 into +0). log2(pieces) levels of full-size
  // work, not one per piece.
  auto pad = [a](const Tensor& t, int64_t before, int64_t after) {
    return Tensor::apply(Op::Pad, {t}, attr::Pad{int64_t(a), before, after});
  };
  std::function<Tensor(size_t, size_t)> join = [&](size_t lo, size_t hi) -> Tensor {
    if (hi - lo == 1) return ts[lo];
    size_t mid = (lo + hi) / 2;
    Tensor left = join(lo, mid), right = join(mid, hi);
    int64_t nl = left.shape()[a], nr = right.shape()[a];
    Shape mshape(s0.size(), 1);
    mshape[a] = nl + nr;
    HostTensor mask(left.dtype(), mshape);
    for (int64_t i = nl; i < nl + nr; ++i) mask.set(i, 1.0);
    return where(Tensor::constant(std::move(mask)), pad(right, nl, 0), pad(left, 0, nr));
  };
  return join(0, ts.size());
}
Tensor stack(const std::vector<Tensor>& ts, int64_t axis) {
  if (ts.empty()) throw Error("stack: no tensors");
  int64_t r = int64_t(ts[0].shape().size());
  if (axis < -r - 1 || axis > r) throw Error("stack: axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(r));
  std::vector<Tensor> u;
  for (const Tensor& t : ts) u.push_back(t.unsqueeze(axis));
  return cat(u, axis < 0 ? axis + r + 1 : axis);
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  return Tensor::apply(Op::LayerNorm, {x, weight, bias}, attr::Eps{eps});
}
Tensor layer_norm(const Tensor& x, const Shape& normalized, const Tensor& weight, const Tensor& bias, double eps) {
  const Shape& s = x.shape();
  if (normalized.empty() || normalized.size() > s.size() || !std::equal(normalized.begin(), normalized.end(), s.end() - std::ptrdiff_t(normalized.size())))
    throw Error("layer_norm: normalized_shape " + shape_str(normalized) + " must be the trailing axes of input " + shape_str(s));
  for (const Tensor* p : {&weight, &bias})
    if (p->defined() && p->shape() != normalized)
      throw Error("layer_norm: weight and bias must have shape " + shape_str(normalized) + ", got " + shape_str(p->shape()));
  // The normalised axes as one: [..., n1, n2] -> [..., n1 n2], one fused op over the last axis.
  int64_t n = synoros::numel(normalized);
  Shape rows(s.begin(), s.end() - std::ptrdiff_t(normalized.size()));
  rows.push_back(n);
  std::vector<Tensor> in{x.reshape(rows)};
  if (weight.defined() || bias.defined()) {  // the op takes x, x and weight, or all three
    in.push_back(weight.defined() ? weight.reshape({n}) : Tensor::ones({n}, x.dtype()));
    in.push_back(bias.defined() ? bias.reshape({n}) : Tensor::zeros({n}, x.dtype()));
  }
  return Tensor::apply(Op::LayerNorm, in, attr::Eps{eps}).reshape(s);
}
namespace {
attr::Attention attention_attrs(const Tensor& q, bool causal, double scale) {
  const Shape& s = q.shape();
  return {causal, scale != 0 ? scale : s.empty() || s.back() < 1 ? 1.0 : 1.0 / std::sqrt(double(s.back()))};
}
}  // namespace
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  return Tensor::apply(Op::Attention, {q, k, v}, attention_attrs(q, causal, scale));
}
Tensor scaled_dot_product_attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offset,
                                       double scale) {
  return Tensor::apply(Op::Attention, {q, k, v, offset}, attention_attrs(q, true, scale));
}
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  return Tensor::apply(Op::Embedding, {weight, indices});
}


Tensor& Tensor::requires_grad(bool on) {
  TensorImpl& t = *impl_;
  if (on && !t.in.empty()) throw Error("requires_grad: only leaf tensors can require gradients");
  if (on && !is_float(t.dtype)) throw Error("requires_grad: only float tensors can require gradients");
  t.requires_grad = on;
  return *this;
}
bool Tensor::requires_grad_enabled() const { return need(*this).requires_grad; }
Tensor Tensor::grad() const { return Tensor(need(*this).grad); }
void Tensor::zero_grad() { impl_->grad.reset(); }

HostTensor Tensor::value() const {
  if (!realized()) realize({*this});
  return *need(*this).value;
}
Tensor Tensor::detach() const { return from(value()); }
std::vector<float> Tensor::to_vector() const {
  HostTensor h = value();
  std::vector<float> v(size_t(h.numel()));
  for (int64_t i = 0; i < h.numel(); ++i) v[size_t(i)] = float(h.get(i));
  return v;
}
double Tensor::item() const {
  HostTensor h = value();
  if (h.numel() != 1) throw Error("item: tensor of shape " + shape_str(h.shape) + " is not a single value");
  return h.get(0);
}

void Tensor::backward() const {
  const TensorImpl& L = need(*this);
  if (!L.shape.empty()) throw Error("backward: loss must be a scalar, got shape " + shape_str(L.shape));
  const bool eager = !trace_state().active;
  if (eager && replay_backward(*impl_)) return;  // an eager loop's next step
  Lowered low = lower_dag({impl_});
  if (trace_state().active) {
    // While compile() traces, a value recorded under no_grad keeps its inputs (nothing can be
    // realized to cut it), and the tape's autodiff would differentiate through it: refuse.
    std::unordered_map<const TensorImpl*, bool> memo;
    for (const auto& t : low.by_id)
      if (t && t->no_grad)
        for (const auto& x : t->in)
          if (depends_on_grad(*x, memo))
            throw Error("backward: a value recorded under no_grad inside compile() from tensors that require "
                        "gradients lies behind this loss; compute it from detached values or outside the step");
  }
  std::vector<ValueId> wrt;
  std::vector<std::shared_ptr<TensorImpl>> params;
  for (const auto& [impl, id] : low.params) {
    if (!impl->requires_grad) continue;  // state read in place (running statistics, buffers)
    wrt.push_back(id);
    params.push_back(impl);
  }
  if (wrt.empty()) throw Error("backward: no tensor in this graph requires a gradient");
  std::vector<std::shared_ptr<TensorImpl>> old_grads;
  for (const auto& p : params) old_grads.push_back(p->grad);
  const Graph forward = eager ? low.g : Graph();  // the key of the step recorded below
  std::vector<ValueId> gids = synoros::grad(low.g, low.outputs[0], wrt, kNoValue, low.recompute);
  std::vector<Tensor> grads = raise(low, gids);
  std::vector<Tensor> gsums;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!eager) trace_state().saved_grads.push_back({params[i], params[i]->grad});
    Tensor gsum = params[i]->grad ? Tensor(params[i]->grad) + grads[i] : grads[i];
    params[i]->grad = gsum.impl_ptr();
    gsums.push_back(gsum);
  }
  if (eager) realize_and_record_backward(low, forward, wrt, *impl_, old_grads, gsums);  // gradients are leaves, as in PyTorch
}

Tensor& Tensor::stateful() {
  if (!impl_ || !impl_->in.empty() || !impl_->value)
    throw Error("stateful: only realized leaf tensors hold state");
  impl_->stateful = true;
  return *this;
}

namespace {
// Copies a realized value into a leaf's storage in place and marks it modified.
void write_into(TensorImpl& dst, const HostTensor& v) {
  std::memcpy(dst.value->buffer->data(), v.buffer->data(), v.bytes());
  dst.value->buffer->mark_modified();
}
}  // namespace

void Tensor::assign(const Tensor& v) {
  TensorImpl& t = *impl_;
  if (!t.in.empty() || !t.value) throw Error("assign: only realized leaf tensors can be assigned");
  if (need(v).shape != t.shape || need(v).dtype != t.dtype)
    throw Error("assign: value " + std::string(dtype_name(v.dtype())) + shape_str(v.shape()) +
                " does not match " + dtype_name(t.dtype) + shape_str(t.shape));
  t.stateful = true;
  if (trace_state().active) {
    trace_state().updates.push_back({impl_, v.impl_ptr()});
    return;
  }
  if (trace_state().batches > 0) {
    trace_state().pending.push_back({impl_, v.impl_ptr()});
    return;
  }
  // An in-place update consumes the value: it is realized as a leaf (as under PyTorch's no_grad),
  // so it stays readable after the storage it was computed from changes.
  realize({v}, false);
  write_into(t, *need(v).value);
}

AssignBatch::AssignBatch() { ++trace_state().batches; }

AssignBatch::~AssignBatch() {
  if (!open_) return;
  TraceState& ts = trace_state();
  if (--ts.batches == 0) ts.pending.clear();
}

void AssignBatch::close() {
  TraceState& ts = trace_state();
  open_ = false;
  if (--ts.batches > 0) return;  // an outer batch writes them
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> pending;
  pending.swap(ts.pending);
  if (pending.empty()) return;  // nothing held (while compile() traces, assign() records updates)
  std::vector<Tensor> values;
  for (const auto& [dst, v] : pending) values.emplace_back(v);
  realize(values, false);  // every value from the storage as it was, in one plan
  for (const auto& [dst, v] : pending) write_into(*dst, *v->value);
}

}  // namespace synoros
