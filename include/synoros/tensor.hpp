// The PyTorch-like front end. Tensor operations are recorded lazily; values are realized on
// demand through compiled plans, cached by the structural hash of the tape.
#pragma once

#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "synoros/ir.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Concrete tensors.
  static Tensor from(HostTensor value);
  static Tensor from(const std::vector<float>& data, Shape shape);
  static Tensor scalar(double v, DType t = DType::F32);
  // A value embedded into plans as a constant (folded at compile time, never fed).
  static Tensor constant(HostTensor value);
  static Tensor zeros(Shape shape, DType t = DType::F32);
  static Tensor ones(Shape shape, DType t = DType::F32);
  static Tensor full(Shape shape, double value, DType t = DType::F32);
  // 0, 1, ..., n - 1.
  static Tensor arange(int64_t n, DType t = DType::F32);
  // N(0, std^2) from a seeded generator: the same seed gives the same bits everywhere.
  static Tensor randn(Shape shape, uint64_t seed, double std = 1.0);
  // U(-bound, bound), seeded.
  static Tensor uniform(Shape shape, uint64_t seed, double bound);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int64_t numel() const { return synoros::numel(shape()); }

  // Arithmetic (numpy broadcasting).
  Tensor operator+(const Tensor& o) const;
  Tensor operator-(const Tensor& o) const;
  Tensor operator*(const Tensor& o) const;
  Tensor operator/(const Tensor& o) const;
  Tensor operator-() const;
  Tensor operator+(double s) const;
  Tensor operator-(double s) const;
  Tensor operator*(double s) const;
  Tensor operator/(double s) const;

  // The elementwise math of the op list (ops.def rows with api `method`): neg, exp, log, sqrt,
  // rsqrt, abs, relu, gelu, sigmoid, tanh, ...
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) SYNOROS_TENSOR_##api(ident)
#define SYNOROS_TENSOR_method(ident) Tensor ident() const;
#define SYNOROS_TENSOR_internal(ident)
#include "synoros/ops.def"
#undef SYNOROS_TENSOR_method
#undef SYNOROS_TENSOR_internal
  Tensor pow(double e) const;
  Tensor sum(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor mean(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor max(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  // One axis may be -1: its size follows from the element count (torch.reshape).
  Tensor reshape(Shape s) const;
  Tensor permute(std::vector<int64_t> perm) const;
  Tensor transpose() const;  // swaps the last two axes
  // -1 keeps the tensor's size on that axis (counted from the right, as torch.expand).
  Tensor expand(Shape s) const;
  // torch.matmul: 1-D operands, broadcast batch axes.
  Tensor matmul(const Tensor& o) const;
  Tensor softmax(int64_t axis = -1) const;
  Tensor log_softmax(int64_t axis = -1) const;
  Tensor layernorm(double eps = 1e-5) const;
  Tensor cast(DType t) const;
  // [start, end) along axis, as Python's slice bounds: negative values count from the end, and
  // both are clamped to the axis (an empty range gives an empty tensor).
  Tensor slice(int64_t axis, int64_t start, int64_t end) const;
  Tensor dropout(double p, uint64_t seed) const;
  // PyTorch's clamp: min(max(x, lo), hi) (hi wins where lo > hi); NaN stays NaN; the gradient
  // passes where lo <= x <= hi, and (unlike PyTorch's) at a NaN x.
  Tensor clamp(double lo, double hi) const;
  Tensor clamp_min(double lo) const;
  Tensor clamp_max(double hi) const;
  // Drops axis if its size is 1 (else returns the tensor unchanged, as PyTorch); inserts a size-1
  // axis at `axis` in [-rank - 1, rank].
  Tensor squeeze(int64_t axis) const;
  Tensor unsqueeze(int64_t axis) const;
  // A copy, taken when called (inside compile(), when the step runs): later assign()s to this
  // tensor's storage do not reach it; the gradient flows through. (A clone of a tensor that
  // requires grad reads as modified once that tensor is assigned; detach() it to keep using it.)
  Tensor clone() const;
  // torch.amin, and var/std with Bessel's correction by default (correction = 1).
  Tensor min(std::vector<int64_t> axes = {}, bool keepdim = false) const;
  Tensor var(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(std::vector<int64_t> axes = {}, int64_t correction = 1, bool keepdim = false) const;
  // The view ops (index maps, no arithmetic; their gradients are views too). pad: `before` and
  // `after` zeros along axis. unfold: a new last axis of `window` positions `dilation` apart
  // centred on each position, out[.., i, .., j] = in[.., i + (j - (window - 1) / 2) * dilation, ..],
  // zero outside (with `stride` > 1, at every stride-th position only). stride: every
  // `stride`-th position from the first. shift: out[i] = in[(i + offset) mod n] (torch.roll by
  // -offset).
  Tensor pad(int64_t axis, int64_t before, int64_t after) const;
  Tensor unfold(int64_t axis, int64_t window, int64_t dilation = 1, int64_t stride = 1) const;
  Tensor stride(int64_t axis, int64_t stride) const;
  Tensor shift(int64_t axis, int64_t offset) const;
  // torch.argmax / argmin: the index of the first extreme along axis (a NaN counts as the
  // extreme), i64; without an axis, over all elements as one row (a 0-d result).
  Tensor argmax() const;
  Tensor argmax(int64_t axis, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor argmin(int64_t axis, bool keepdim = false) const;
  // torch.cumsum: running sums along axis, accumulated in float64 (PyTorch's CPU rounding).
  Tensor cumsum(int64_t axis) const;
  // torch.cumprod: running products along axis, in float64 (PyTorch's CPU rounding); the
  // gradient divides by nothing, so zeros get theirs exactly.
  Tensor cumprod(int64_t axis) const;
  // torch.prod: the product along axis (of all elements without one), in float64, rounded once;
  // the gradient at each element is the product of the others (zeros included).
  Tensor prod() const;
  Tensor prod(int64_t axis, bool keepdim = false) const;
  // torch.gather: out[..., i, ...] = self[..., index[..., i, ...], ...] along axis; index (i32 or
  // i64) has this tensor's rank and at most its size on the other axes. The gradient adds each
  // position's share in a fixed order.
  Tensor gather(int64_t axis, const Tensor& index) const;
  // torch.index_select: the slices at `index` (1-D, i32 or i64) along axis, in that order.
  Tensor index_select(int64_t axis, const Tensor& index) const;
  // Indexing by an integer tensor, self[index]: the slices along the first axis at each of
  // index's positions, shape index.shape + shape[1:], for tensors of any dtype. Repeated indices
  // add their gradients.
  Tensor index(const Tensor& index) const;
  // Generic escape hatch: any op of the table with these attrs.
  static Tensor apply(Op op, const std::vector<Tensor>& in, const Attrs& attrs = {},
                      DType cast_to = DType::F32);
  static Tensor apply(Op op, std::initializer_list<Tensor> in, const Attrs& attrs = {},
                      DType cast_to = DType::F32);

  // Autodiff. Leaves with requires_grad accumulate gradients in grad() on backward().
  Tensor& requires_grad(bool on = true);
  bool requires_grad_enabled() const;
  void backward() const;
  Tensor grad() const;
  void zero_grad();
  // Overwrites this leaf's storage with `value` (an optimizer update). Inside compile() the
  // update becomes part of the compiled step. Outside, `value` is consumed as under PyTorch's
  // no_grad: it becomes a leaf holding its result, so it stays readable after the storage it was
  // computed from changes, and no gradient flows through it afterwards.
  void assign(const Tensor& value);
  // Marks a leaf whose storage the host rewrites between runs (a learning rate, say): plans
  // then read its storage in place instead of a copy taken when they were built. Writers must
  // call buffer->mark_modified(). Assigned leaves are stateful automatically.
  Tensor& stateful();

  // Realization. Reading a value does not cut the gradient path (as in PyTorch): a later
  // backward() still reaches the leaves behind this tensor.
  HostTensor value() const;
  // The same values as a new leaf outside the graph: no gradient flows through it.
  Tensor detach() const;
  std::vector<float> to_vector() const;
  double item() const;
  bool realized() const;  // holds its value
  bool is_leaf() const;   // no inputs: created from data, or realized outside any gradient path

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  static Tensor apply_n(Op op, const Tensor* in, size_t k, const Attrs& attrs, DType cast_to);
  std::shared_ptr<TensorImpl> impl_;
};

inline Tensor operator*(double s, const Tensor& t) { return t * s; }
inline Tensor operator+(double s, const Tensor& t) { return t + s; }
Tensor operator-(double s, const Tensor& t);
Tensor operator/(double s, const Tensor& t);

// cond != 0 ? a : b, broadcast (torch.where; cond of the branches' dtype).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Joins tensors of one dtype and rank, equal but along `axis` (torch.cat); every element keeps its
// bits, -0 included. stack: along a new axis.
Tensor cat(const std::vector<Tensor>& tensors, int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);

// torch.einsum, e.g. einsum("bhtd,bhsd->bhts", {q, k}): spaces, "..." for broadcast axes, an
// implicit output (no "->": the labels used once, alphabetically), size-1 axes broadcast, a label
// repeated within an operand (its diagonal), and any number of operands, contracted left to right.
Tensor einsum(const std::string& spec, const std::vector<Tensor>& operands);
// LayerNorm over the last axis with elementwise weight and bias [C] (PyTorch's nn.LayerNorm).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// torch.nn.functional.layer_norm: over the trailing axes `normalized_shape`, weight and bias of
// that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// softmax(scale q k^T) v over the last two axes (PyTorch's scaled_dot_product_attention): q
// [..., Tq, D], k and v [..., Tk, D]; causal: each query sees the keys up to its own position
// (needs Tq == Tk); scale 0 means 1 / sqrt(D). One fused kernel forward and backward: no
// [Tq, Tk] matrix is kept in memory.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal = false,
                                    double scale = 0);
// Causal attention for queries at positions offset + i over a key/value cache of Tk positions:
// query i sees keys 0 .. offset + i. offset: an i64 tensor of one element, read each time the plan
// runs (a decoding loop writes the position into it); a row of the full causal forward at that
// position has the same bits.
Tensor scaled_dot_product_attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offset,
                                       double scale = 0);
// Rows of `weight` [V, D] picked by integer `indices`: shape indices.shape + [D].
Tensor embedding(const Tensor& weight, const Tensor& indices);

// Losses.
enum class Reduction { Mean, Sum, None };
Tensor mse_loss(const Tensor& pred, const Tensor& target);
// torch.nn.functional.cross_entropy's options. ignore_index: targets equal to it add nothing and
// are not counted by the mean (unset by default, where PyTorch's default is -100: set it to skip
// padding; an out-of-range target is an error either way).
struct CrossEntropyOptions {
  Tensor weight;  // per-class weights [C] (torch's `weight`); undefined: every class weighs 1
  std::optional<int64_t> ignore_index;
  double label_smoothing = 0;
  Reduction reduction = Reduction::Mean;
};
// logits [N, C] or [N, C, d1, ...]; targets: class indices [N] or [N, d1, ...] (i32 or i64), or
// class probabilities of the logits' shape. With `weight`, each sample's loss is scaled as in
// PyTorch: by its target class's weight (the mean then divides by the sum of those weights), or
// per class inside the sum over probabilities (the mean divides by the number of samples). The
// mean over class indices without weights, with or without an ignored target, runs one fused
// kernel forward and backward; the other forms are composed.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// Prints as PyTorch does: tensor([[1.0000, 2.0000], ...]) with the dtype where it is not float32
// or int64 (realizes the tensor). Large tensors show their first and last three entries per axis.
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

// Gradient recording (torch.no_grad). While disabled on a thread, ops record no gradient path:
// their results never require a gradient, and backward() does not reach through them. (Results
// stay lazy, as everywhere: a parameter is read when the result is realized.) Inside compile(),
// an update under no_grad is fine; a loss computed from a no_grad value that was itself computed
// from tensors requiring gradients is refused by backward() (the traced tape cannot cut it).
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Activation checkpointing (nn::checkpoint builds on it): the values recorded while a scope is
// alive form one segment whose values backward() does not keep; each one a gradient needs is
// computed again from the segment's inputs right before it is needed (same ops, same bits).
class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  int32_t prev_;
};

// Realizes several tensors with one plan (shared work is computed once).
void realize(const std::vector<Tensor>& ts);

// A whole step (forward, backward, optimizer update) captured once and replayed on new inputs.
// Updates (assign) are written into the parameters' storage during the run where that is safe
// (Plan::written_into), else copied after it; if a launch throws (an index out of range), the
// updates written before it stay.
// An argument marked requires_grad() inside the traced function gets its gradient from
// backward() like a parameter; return arg.grad() to read it (an input gradient, a saliency map).
class CompiledStep {
 public:
  // Runs the step on `args` (checked against the traced dtypes and shapes); returns outputs.
  std::vector<HostTensor> operator()(const std::vector<HostTensor>& args);
  // Runs the step on `args`, calling ready(i, data) as soon as output i is final (its launch
  // has run) while the rest of the step still runs; outputs no launch writes are ready at the
  // end. output(i) copies one afterwards.
  void run(const std::vector<HostTensor>& args, const std::function<void(size_t output, const void* data)>& ready);
  HostTensor output(size_t i) const;
  // Zero-copy variant for hot loops: write inputs via input_ptr, then run(), then read.
  void run();
  float* input_ptr(size_t i);
  const float* output_ptr(size_t i);
  // The traced signature: whether argument i is read at all (an unread one is not fed), and
  // each output's dtype and shape.
  bool uses_input(size_t i) const { return inputs_.at(i) != kNoValue; }
  size_t num_outputs() const { return outputs_.size(); }
  std::pair<DType, Shape> output_spec(size_t i) const;
  Plan& plan() { return *plan_; }

 private:
  friend CompiledStep compile(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>&,
                              const std::vector<std::pair<DType, Shape>>&);
  std::shared_ptr<Plan> plan_;
  std::vector<ValueId> inputs_, outputs_;
  struct Update {
    const void* src;  // the plan's buffer holding the new value, resolved once
    std::shared_ptr<HostTensor> dst;
  };
  std::vector<Update> updates_;
  void set_args(const std::vector<HostTensor>& args);
  void copy_updates();
};

CompiledStep compile(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                     const std::vector<std::pair<DType, Shape>>& arg_specs);

// Plans compiled so far by realize()/backward()/compile(), keyed by structural hash.
size_t plan_cache_size();
// The bytes (arena + scratch) the cached plans hold, and the most they may hold before the cache
// drops its oldest plans (default 1 GiB; at most 512 plans either way). Plans still in use by a
// CompiledStep stay alive there.
size_t plan_cache_bytes();
void set_plan_cache_limit(size_t bytes);
// Forgets every cached plan (CompiledSteps keep theirs): the next realize() or compile()
// compiles, and selects kernels, afresh. The cache and realize() are safe to use from several
// threads (realize() runs one cached plan at a time); CompiledSteps of the same structure share
// a plan, so each must run on one thread at a time.
void clear_plan_cache();

}  // namespace synoros
