// Losses: mean squared error and cross entropy in PyTorch's forms.
#include "synoros/tensor.hpp"

namespace synoros {

namespace {
Tensor reduce(const Tensor& per_sample, Reduction r, const Tensor& count, const Shape& none_shape) {
  switch (r) {
    case Reduction::Sum:
      return per_sample.sum();
    case Reduction::None:
      return per_sample.reshape(none_shape);
    default:
      return per_sample.sum() / count;
  }
}
}  // namespace

Tensor mse_loss(const Tensor& pred, const Tensor& target) {
  Tensor d = pred - target;
  return (d * d).mean();
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o) {
  const Shape& ls = logits.shape();
  if (ls.size() < 2)
    throw Error("cross_entropy: logits must be [N, C] or [N, C, d1, ...], got shape " +
                shape_str(ls));
  if (o.label_smoothing < 0 || o.label_smoothing > 1)
    throw Error("cross_entropy: label_smoothing must be in [0, 1], got " +
                std::to_string(o.label_smoothing));
  int64_t C = ls[1];
  bool probabilities = is_float(targets.dtype());
  Shape sample = ls;  // [N, d...]
  sample.erase(sample.begin() + 1);
  int64_t M = synoros::numel(sample);
  // Classes last, one row per position: [N, C, d...] -> [N * d..., C].
  auto classes_last = [&](const Tensor& t) {
    if (ls.size() == 2) return t;
    std::vector<int64_t> perm{0};
    for (int64_t d = 2; d < int64_t(ls.size()); ++d) perm.push_back(d);
    perm.push_back(1);
    return t.permute(perm).reshape({M, C});
  };
  Tensor rows = classes_last(logits);
  Shape want_targets = probabilities ? ls : sample;
  if (targets.shape() != want_targets)
    throw Error("cross_entropy: logits " + shape_str(ls) + " need " +
                (probabilities ? "probabilities " : "targets ") + shape_str(want_targets) +
                ", got " + shape_str(targets.shape()));
  double eps = o.label_smoothing;
  Tensor w = o.weight;
  if (w.defined() && (w.shape() != Shape{C} || w.dtype() != logits.dtype()))
    throw Error("cross_entropy: weight must be a " + std::string(dtype_name(logits.dtype())) +
                " tensor (the logits' dtype) of shape [" + std::to_string(C) + "] (one per class), got " +
                std::string(dtype_name(w.dtype())) + " " + shape_str(w.shape()));
  if (probabilities) {
    if (o.ignore_index)
      throw Error("cross_entropy: ignore_index needs class-index targets, not probabilities");
    Tensor p = classes_last(targets);
    if (eps > 0) p = p * (1 - eps) + eps / double(C);
    if (w.defined()) p = p * w;
    Tensor per = -(p * rows.log_softmax(-1)).sum({-1});
    return reduce(per, o.reduction, Tensor::scalar(double(M), per.dtype()), sample);
  }
  Tensor t = targets.reshape({M});
  if (o.reduction == Reduction::Mean && eps == 0 && !w.defined()) {  // the fused kernel
    return Tensor::apply(Op::CrossEntropy, {rows, t}, attr::CrossEntropy{o.ignore_index});
  }
  Tensor logp = rows.log_softmax(-1);
  Tensor safe = t;
  Tensor valid, ignored;  // 1 where the target counts (is ignored), else 0 (float)
  if (o.ignore_index) {
    Tensor ig = Tensor::scalar(double(*o.ignore_index), t.dtype());
    Tensor hit = Tensor::apply(Op::CmpEq, {t, ig}, {}, t.dtype());
    safe = where(hit, Tensor::scalar(0, t.dtype()), t);
    ignored = hit.cast(logits.dtype());
    valid = 1.0 - ignored;
  }
  Tensor per = -logp.gather(1, safe.unsqueeze(1)).squeeze(1);
  Tensor wt;  // the weight of each sample's target class
  if (w.defined()) {
    wt = w.index_select(0, safe);
    per = per * wt;
  }
  if (eps > 0) per = per * (1 - eps) - (w.defined() ? (logp * w).mean({-1}) : logp.mean({-1})) * eps;
  if (ignored.defined())
    per = where(ignored, Tensor::scalar(0, per.dtype()), per);  // exactly 0, even beside inf
  Tensor count = wt.defined()      ? (valid.defined() ? (wt * valid).sum() : wt.sum())
                 : valid.defined() ? valid.sum()
                                   : Tensor::scalar(double(M), per.dtype());
  return reduce(per, o.reduction, count, sample);
}

}  // namespace synoros
