// Operators that compute the same function up to a re-layout of their weights, found by
// invariants of a multilinear map y = f(x, w_1, ..., w_m) that no permutation of a weight's
// elements changes: the weights' sizes, the response <r, y> at all-ones weights, and for each
// weight t and random output directions r the squared norm of d<r, y>/dw_t (= r^T J_t J_t^T r,
// with the other weights at ones), at every binding of the spec. Equal functions have equal
// invariants; for random x and r, different ones almost never do.
#include <algorithm>
#include <cmath>

#include "synoros/synth.hpp"

namespace synoros::synth {

namespace {
struct Signature {
  std::vector<double> exact;   // weight sizes (ascending) per binding
  std::vector<double> approx;  // responses and gradient norms, compared with a tolerance
};

void add_binding(const Spec& spec, const Operator& op, size_t b, uint64_t seed, Signature& s) {
  constexpr int kDirections = 2;
  const Binding bind = binding(spec, b);
  const Tensor x = Tensor::randn(spec.shape(spec.input, b), seed);
  const std::vector<Shape> shapes = weight_shapes(spec, op, bind);
  const Shape out = spec.shape(spec.output, b);
  std::vector<std::pair<double, std::vector<double>>> per_weight(shapes.size());  // (size, norms)
  std::vector<double> responses;
  for (int k = 0; k < kDirections; ++k) {
    std::vector<Tensor> w;
    for (const Shape& z : shapes) {
      Tensor t = Tensor::ones(z);
      t.requires_grad();
      w.push_back(t);
    }
    const Tensor r = Tensor::randn(out, seed + 1 + uint64_t(k));
    Tensor dot = (apply(spec, op, bind, x, w) * r).sum();
    responses.push_back(dot.item());
    dot.backward();
    for (size_t t = 0; t < w.size(); ++t) {
      Tensor g = w[t].grad();
      per_weight[t].first = double(numel(shapes[t]));
      per_weight[t].second.push_back(g.defined() ? (g * g).sum().item() : 0.0);
    }
  }
  std::sort(per_weight.begin(), per_weight.end());  // the weights' order is a spelling too
  for (auto& [n, v] : per_weight) s.exact.push_back(n);
  s.approx.insert(s.approx.end(), responses.begin(), responses.end());
  for (auto& [n, v] : per_weight) s.approx.insert(s.approx.end(), v.begin(), v.end());
}

// float32 rounding differs between spellings of one function, hence the tolerance.
bool close(const Signature& a, const Signature& b) {
  constexpr double kTol = 1e-4;
  if (a.exact != b.exact || a.approx.size() != b.approx.size()) return false;
  for (size_t i = 0; i < a.approx.size(); ++i) {
    const double x = a.approx[i], y = b.approx[i];
    if (std::abs(x - y) > kTol * std::max({std::abs(x), std::abs(y), 1e-6})) return false;
  }
  return true;
}
}  // namespace

std::vector<std::vector<size_t>> equal_functions(const Spec& spec, const std::vector<Operator>& ops,
                                                 uint64_t seed) {
  std::vector<Signature> sig(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    for (size_t b = 0; b < spec.bindings.size(); ++b)
      add_binding(spec, ops[i], b, seed + 16 * b, sig[i]);
  // Each operator joins the first group whose first member matches it.
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < ops.size(); ++i) {
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& gr) { return close(sig[gr[0]], sig[i]); });
    if (g == groups.end())
      groups.push_back({i});
    else
      g->push_back(i);
  }
  return groups;
}

}  // namespace synoros::synth
