// Tensor's index and scan methods: argmax/argmin, cumsum, cumprod, gather, index_select and indexing by
// an integer tensor.
#include "synoros/tensor.hpp"

namespace synoros {

namespace {
Tensor arg_extreme(const Tensor& t, int64_t axis, bool keepdim, bool want_min) {
  if (t.shape().empty()) {  // one row of one element (PyTorch accepts axis 0 and -1)
    normalize_axis(axis, 1, want_min ? "argmin" : "argmax", t.shape());
    return Tensor::apply(Op::ArgMax, {t.reshape({1})}, attr::ArgMax{0, want_min});
  }
  Tensor r = Tensor::apply(Op::ArgMax, {t}, attr::ArgMax{axis, want_min});
  return keepdim ? r.unsqueeze(axis) : r;
}

void require_index(const Tensor& index, const char* op) {
  if (is_float(index.dtype()))
    throw Error(std::string(op) + ": the index must be i32 or i64, got " +
                dtype_name(index.dtype()));
}
}  // namespace

Tensor Tensor::argmax() const {
  return arg_extreme(reshape({numel()}), 0, false, false);
}
Tensor Tensor::argmax(int64_t axis, bool keepdim) const {
  return arg_extreme(*this, axis, keepdim, false);
}
Tensor Tensor::argmin() const {
  return arg_extreme(reshape({numel()}), 0, false, true);
}
Tensor Tensor::argmin(int64_t axis, bool keepdim) const {
  return arg_extreme(*this, axis, keepdim, true);
}

Tensor Tensor::cumsum(int64_t axis) const {
  if (shape().empty()) return Tensor::apply(Op::Cumsum, {reshape({1})}, attr::Scan{axis, false}).reshape({});
  return Tensor::apply(Op::Cumsum, {*this}, attr::Scan{axis, false});
}

Tensor Tensor::cumprod(int64_t axis) const {
  if (shape().empty()) return Tensor::apply(Op::Cumprod, {reshape({1})}, attr::Scan{axis, false}).reshape({});
  return Tensor::apply(Op::Cumprod, {*this}, attr::Scan{axis, false});
}

Tensor Tensor::prod() const {
  return Tensor::apply(Op::Prod, {reshape({numel()})}, attr::Axis{0});
}
Tensor Tensor::prod(int64_t axis, bool keepdim) const {
  if (shape().empty())
    return Tensor::apply(Op::Prod, {reshape({1})}, attr::Axis{axis});  // as PyTorch: axis 0 or -1
  Tensor r = Tensor::apply(Op::Prod, {*this}, attr::Axis{axis});
  return keepdim ? r.unsqueeze(axis) : r;
}

Tensor Tensor::gather(int64_t axis, const Tensor& index) const {
  return Tensor::apply(Op::Gather, {*this, index}, attr::Axis{axis});
}

// Both select rows of a [size, rest] view: float data with the embedding op (a copy of each
// row; its gradient adds repeated rows in ascending position order), other dtypes (no gradient)
// with gather, which copies any dtype's bits.
Tensor Tensor::index(const Tensor& idx) const {
  require_index(idx, "index");
  const Shape& s = shape();
  if (s.empty()) throw Error("index: a 0-d tensor cannot be indexed");
  Shape rest(s.begin() + 1, s.end()), out = idx.shape();
  out.insert(out.end(), rest.begin(), rest.end());
  int64_t R = synoros::numel(rest);
  Tensor rows = reshape({s[0], R});
  if (is_float(dtype())) return embedding(rows, idx).reshape(out);
  int64_t L = idx.numel();
  return rows.gather(0, idx.reshape({L, 1}).expand({L, R})).reshape(out);
}

Tensor Tensor::index_select(int64_t axis, const Tensor& idx) const {
  require_index(idx, "index_select");
  if (idx.shape().size() != 1)
    throw Error("index_select: the index must be 1-D, got shape " + shape_str(idx.shape()));
  const Shape& s = shape();
  if (s.empty()) throw Error("index_select: a 0-d tensor has no axis to select along");
  int a = normalize_axis(axis, s.size(), "index_select", s);
  if (a == 0) return index(idx);
  std::vector<int64_t> front{a}, back;  // the axis moved to the front, and back again
  for (int d = 0; d < int(s.size()); ++d)
    if (d != a) front.push_back(d);
  for (int d = 1; d <= int(s.size()) - 1; ++d) back.push_back(d);
  back.insert(back.begin() + a, 0);
  return permute(front).index(idx).permute(back);
}

}  // namespace synoros
