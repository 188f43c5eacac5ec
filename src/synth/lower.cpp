// Lowering: a synthesized operator becomes engine tape ops. The index expressions are replayed
// forward (from the input toward the iterators) as views on x (reshape, permute, expand, shift,
// stride, unfold), then x and the weights are contracted by a chain of einsums in the order with
// the fewest FLOPs. The same plan drives the Graph, the Tensor and the PyTorch back ends.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "synth/lower_plan.hpp"

namespace synoros::synth {

int64_t eval_size(const Spec& sp, const Size& z, const Binding& bind) {
  int64_t num = 1, den = 1;
  for (size_t i = 0; i < sp.primary.size(); ++i)
    for (int k = 0; k < std::abs(int(z.p[i])); ++k) (z.p[i] > 0 ? num : den) *= bind.primary.at(i);
  for (size_t i = 0; i < sp.coefficient.size(); ++i)
    for (int k = 0; k < std::abs(int(z.c[i])); ++k) (z.c[i] > 0 ? num : den) *= sp.coefficient[i].value;
  if (den == 0 || num % den != 0 || num / den < 1)
    throw Error("synth: size " + sp.str(z) + " is not an integer >= 1 under this binding");
  return num / den;
}

Binding binding(const Spec& spec, size_t b) {
  if (b >= spec.bindings.size()) throw Error("synth: binding " + std::to_string(b) + " out of range");
  return Binding{spec.bindings[b]};
}

std::vector<Shape> weight_shapes(const Spec& spec, const Operator& op, const Binding& bind) {
  std::vector<Shape> out;
  for (const auto& w : op.weights) {
    Shape s;
    for (int32_t it : w) s.push_back(eval_size(spec, op.iter_sizes[size_t(it)], bind));
    out.push_back(s);
  }
  return out;
}

namespace {
// The extents of a list of sizes under a binding.
Shape eval_shape(const Spec& spec, const std::vector<Size>& sizes, const Binding& bind) {
  Shape out;
  for (const Size& z : sizes) out.push_back(eval_size(spec, z, bind));
  return out;
}

char label(int it) { return char(it < 26 ? 'a' + it : 'A' + (it - 26)); }

// Label ids: the operator's iterators, then the quotient and remainder labels of factored outputs.
int label_id(char ch) { return ch >= 'a' ? ch - 'a' : ch - 'A' + 26; }

// The cheapest contraction order: x first, then the weights in the order with fewest FLOPs.
// `isz`: the size of each label id; `out`: the result's labels; `wls`: each weight's labels.
void plan_chain(const std::vector<int64_t>& isz, const std::string& out, const std::vector<std::string>& wls,
                LowerPlan& p) {
  std::vector<size_t> order(wls.size());
  std::iota(order.begin(), order.end(), 0);
  double best = -1;
  do {
    std::vector<LowerPlan::Contract> chain;
    std::string cur = p.x_labels;
    double flops = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const std::string& wl = wls[order[k]];
      std::string need = out;
      for (size_t q = k + 1; q < order.size(); ++q) need += wls[order[q]];
      std::string uni = cur;
      for (char ch : wl)
        if (uni.find(ch) == std::string::npos) uni += ch;
      double f = 2;
      for (char ch : uni) f *= double(isz[size_t(label_id(ch))]);
      flops += f;
      std::string res;
      for (char ch : out)
        if (uni.find(ch) != std::string::npos) res += ch;
      std::string rest;
      for (char ch : uni)
        if (need.find(ch) != std::string::npos && res.find(ch) == std::string::npos) rest += ch;
      std::sort(rest.begin(), rest.end());
      res += rest;
      chain.push_back({cur + "," + wl + "->" + res, int(order[k])});
      cur = res;
    }
    if (order.empty() || cur != out) {
      // No weights, or reductions left only on x: one more single-operand einsum.
      double f = 1;
      for (char ch : cur) f *= double(isz[size_t(label_id(ch))]);
      if (cur != out) {
        chain.push_back({cur + "->" + out, -1});
        flops += f;
      }
    }
    if (best < 0 || flops < best) {
      best = flops;
      p.chain = chain;
      p.flops = flops;
    }
  } while (std::next_permutation(order.begin(), order.end()));
}
}  // namespace

LowerPlan make_plan(const Spec& spec, const Operator& op, const Binding& bind) {
  LowerPlan p;
  const auto& N = op.nodes;
  struct Ax {
    int32_t node;
    int64_t size;
    int label = -1;  // a factored output's quotient or remainder label (node then unused)
  };
  std::vector<Ax> axes;
  auto sz = [&](int32_t n) { return eval_size(spec, N[size_t(n)].size, bind); };
  for (int32_t r : op.x_root) axes.push_back({r, sz(r)});
  // Factored outputs: iterator -> (quotient label, remainder label, remainder size).
  const int n_iter = int(op.iter_sizes.size());
  struct Factor {
    int hi = -1, lo = -1;
    int64_t lo_size = 0;
  };
  std::vector<Factor> factor(static_cast<size_t>(n_iter));
  int next_label = n_iter;
  auto leaf_count = [&](int32_t it) {  // how often x's remaining trees read iterator `it`
    int count = 0;
    std::function<void(int32_t)> walk = [&](int32_t n) {
      const IxNode& x = N[size_t(n)];
      if ((x.kind == Kind::Out || x.kind == Kind::Red) && x.iter == it) ++count;
      if (x.a >= 0) walk(x.a);
      if (x.b >= 0) walk(x.b);
    };
    for (const Ax& a : axes)
      if (a.label < 0) walk(a.node);
    return count;
  };
  auto in_a_weight = [&](int32_t it) {
    for (const auto& w : op.weights)
      if (std::find(w.begin(), w.end(), it) != w.end()) return true;
    return false;
  };
  p.x_shape.clear();
  for (auto& a : axes) p.x_shape.push_back(a.size);
  auto shape = [&]() {
    std::vector<int64_t> s;
    for (auto& a : axes) s.push_back(a.size);
    return s;
  };
  auto emit = [&](LowerPlan::Step::T t, std::vector<int64_t> ints) { p.steps.push_back({t, std::move(ints)}); };
  // Does any remaining tree still hold node `target`?
  std::function<bool(int32_t, int32_t)> holds = [&](int32_t n, int32_t target) -> bool {
    if (n == target) return true;
    const IxNode& x = N[size_t(n)];
    return (x.a >= 0 && holds(x.a, target)) || (x.b >= 0 && holds(x.b, target));
  };
  auto find_sibling = [&](int32_t n) -> int32_t {
    const IxNode& x = N[size_t(n)];
    for (size_t k = 0; k < N.size(); ++k) {
      const IxNode& y = N[k];
      if (int32_t(k) != n && (y.kind == Kind::Div || y.kind == Kind::Mod) && y.kind != x.kind && y.a == x.a &&
          y.param == x.param)
        return int32_t(k);
    }
    return -1;
  };
  for (int guard = 0; guard < 10000; ++guard) {
    bool progress = false;
    for (size_t i = 0; i < axes.size() && !progress; ++i) {
      if (axes[i].label >= 0) continue;
      const IxNode& x = N[size_t(axes[i].node)];
      switch (x.kind) {
        case Kind::Split: {
          int64_t A = sz(x.a), B = sz(x.b);
          auto s = shape();
          s[i] = A;
          s.insert(s.begin() + long(i) + 1, B);
          emit(LowerPlan::Step::Reshape, s);
          axes[i] = {x.a, A};
          axes.insert(axes.begin() + long(i) + 1, Ax{x.b, B});
          progress = true;
          break;
        }
        case Kind::Shift:
          emit(LowerPlan::Step::Shift, {int64_t(i), 1});
          axes[i].node = x.a;
          progress = true;
          break;
        case Kind::Stride: {
          int64_t s = eval_size(spec, x.param, bind);
          emit(LowerPlan::Step::Stride, {int64_t(i), s});
          axes[i] = {x.a, sz(x.a)};
          progress = true;
          break;
        }
        case Kind::Unfold: {
          int64_t K = sz(x.b);
          emit(LowerPlan::Step::Unfold, {int64_t(i), K, 1});
          axes[i].node = x.a;
          axes.push_back({x.b, K});
          progress = true;
          break;
        }
        default: break;
      }
    }
    if (progress) continue;
    // Merges whose two halves are both exposed.
    for (size_t i = 0; i < axes.size() && !progress; ++i) {
      if (axes[i].label >= 0) continue;
      const IxNode& x = N[size_t(axes[i].node)];
      if (x.kind != Kind::Div) continue;
      for (size_t j = 0; j < axes.size(); ++j) {
        if (axes[j].label >= 0) continue;
        const IxNode& y = N[size_t(axes[j].node)];
        if (y.kind != Kind::Mod || y.a != x.a || !(y.param == x.param)) continue;
        // Move axis j right after axis i, then merge the two.
        std::vector<int64_t> perm;
        std::vector<Ax> na;
        size_t at = 0;
        for (size_t k = 0; k < axes.size(); ++k) {
          if (k == j) continue;
          if (k == i) at = na.size();
          perm.push_back(int64_t(k));
          na.push_back(axes[k]);
          if (k == i) perm.push_back(int64_t(j)), na.push_back(axes[j]);
        }
        bool identity = true;
        for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == int64_t(k);
        if (!identity) emit(LowerPlan::Step::Permute, perm);
        axes = na;
        int64_t merged = axes[at].size * axes[at + 1].size;
        auto s = shape();
        s[at] = merged;
        s.erase(s.begin() + long(at) + 1);
        emit(LowerPlan::Step::Reshape, s);
        int32_t child = x.a;
        axes[at] = {child, merged};
        axes.erase(axes.begin() + long(at) + 1);
        progress = true;
        break;
      }
    }
    if (progress) continue;
    // Halves whose sibling was expanded away: repeat (Div) or tile (Mod).
    for (size_t i = 0; i < axes.size() && !progress; ++i) {
      if (axes[i].label >= 0) continue;
      int32_t n = axes[i].node;
      const IxNode& x = N[size_t(n)];
      if (x.kind != Kind::Div && x.kind != Kind::Mod) continue;
      int32_t sib = find_sibling(n);
      bool live = false;
      if (sib >= 0)
        for (auto& a : axes) live = live || holds(a.node, sib);
      if (live) continue;
      const IxNode& leaf = N[size_t(x.a)];
      if (leaf.kind == Kind::Out && next_label + 2 <= 52 && in_a_weight(leaf.iter) && leaf_count(leaf.iter) == 1 &&
          factor[size_t(leaf.iter)].hi < 0) {
        // o / B or o mod B of an output o that a weight holds and x reads nowhere else: two labels.
        Factor& f = factor[size_t(leaf.iter)];
        f.lo_size = eval_size(spec, x.param, bind);
        f.hi = next_label++, f.lo = next_label++;
        axes[i].label = x.kind == Kind::Div ? f.hi : f.lo;
        progress = true;
        continue;
      }
      int64_t B = eval_size(spec, x.param, bind), total = sz(x.a), other = total / axes[i].size;
      auto s = shape();
      size_t pos = x.kind == Kind::Div ? i + 1 : i;
      s.insert(s.begin() + long(pos), 1);
      emit(LowerPlan::Step::Reshape, s);
      s[pos] = x.kind == Kind::Div ? B : other;
      emit(LowerPlan::Step::Expand, s);
      s.erase(s.begin() + long(pos));
      s[i] = total;
      emit(LowerPlan::Step::Reshape, s);
      axes[i] = {x.a, total};
      progress = true;
    }
    if (!progress) break;
  }
  for (auto& a : axes) {
    if (a.label >= 0) {
      p.x_labels += label(a.label);
      continue;
    }
    const IxNode& x = N[size_t(a.node)];
    if (x.kind != Kind::Out && x.kind != Kind::Red) throw Error("synth: lowering left an unresolved index expression");
    p.x_labels += label(x.iter);
  }
  std::vector<int64_t> isz = eval_shape(spec, op.iter_sizes, bind);
  isz.resize(size_t(next_label), 0);
  bool factored = false;
  auto labels_of = [&](int32_t it, Shape* extents) {  // an iterator's labels; its extents appended
    const Factor& f = factor[size_t(it)];
    if (f.hi < 0) {
      if (extents) extents->push_back(isz[size_t(it)]);
      return std::string(1, label(it));
    }
    isz[size_t(f.lo)] = f.lo_size;
    isz[size_t(f.hi)] = isz[size_t(it)] / f.lo_size;
    if (extents) extents->push_back(isz[size_t(f.hi)]), extents->push_back(f.lo_size);
    return std::string{label(f.hi), label(f.lo)};
  };
  std::string out;
  for (int o = 0; o < op.n_out; ++o) {
    out += labels_of(o, nullptr);
    factored = factored || factor[size_t(o)].hi >= 0;
  }
  std::vector<std::string> wls;
  for (const auto& w : op.weights) {
    std::string wl;
    Shape view;
    bool split = false;
    for (int32_t it : w) wl += labels_of(it, &view), split = split || factor[size_t(it)].hi >= 0;
    wls.push_back(wl);
    p.weight_views.push_back(split ? view : Shape{});
  }
  if (factored) p.out_shape = eval_shape(spec, spec.output, bind);
  plan_chain(isz, out, wls, p);
  return p;
}

Stats stats(const Spec& spec, const Operator& op, const Binding& bind) {
  Stats st;
  st.flops = make_plan(spec, op, bind).flops;
  for (const Shape& s : weight_shapes(spec, op, bind)) st.params += double(numel(s));
  return st;
}

namespace {
// A step's op and its typed attributes (the plan keeps each step's integers in one list).
Op step_op(LowerPlan::Step::T t) {
  switch (t) {
    case LowerPlan::Step::Reshape: return Op::Reshape;
    case LowerPlan::Step::Permute: return Op::Permute;
    case LowerPlan::Step::Expand: return Op::Expand;
    case LowerPlan::Step::Shift: return Op::Shift;
    case LowerPlan::Step::Stride: return Op::Stride;
    case LowerPlan::Step::Unfold: return Op::Unfold;
  }
  return Op::Reshape;
}
Attrs step_attrs(const LowerPlan::Step& st) {
  const auto& v = st.ints;
  switch (st.t) {
    case LowerPlan::Step::Reshape:
    case LowerPlan::Step::Expand: return attr::Target{v};
    case LowerPlan::Step::Permute: return attr::Permute{v};
    case LowerPlan::Step::Shift: return attr::Shift{v.at(0), v.at(1)};
    case LowerPlan::Step::Stride: return attr::Stride{v.at(0), v.at(1)};
    case LowerPlan::Step::Unfold: return attr::Window{v.at(0), v.at(1), v.at(2)};
  }
  return {};
}
void check_inputs(const Spec& spec, const Operator& op, const Binding& bind, const Shape& xs,
                  const std::vector<Shape>& ws) {
  if (bind.primary.size() != spec.primary.size()) throw Error("synth: binding has the wrong number of variables");
  // An operator must account for every input dim and produce every output dim (an empty or
  // truncated operator would otherwise lower to a silent identity).
  if (op.x_root.size() != spec.input.size() || op.n_out != int(spec.output.size()))
    throw Error("synth: operator '" + op.canonical + "' maps " + std::to_string(op.x_root.size()) + " input dims to " +
                std::to_string(op.n_out) + " output dims, the spec has " + std::to_string(spec.input.size()) +
                " and " + std::to_string(spec.output.size()));
  Shape want = eval_shape(spec, spec.input, bind);
  if (xs != want) throw Error("synth: input has shape " + shape_str(xs) + ", the operator expects " + shape_str(want));
  auto wsh = weight_shapes(spec, op, bind);
  if (ws.size() != wsh.size())
    throw Error("synth: operator takes " + std::to_string(wsh.size()) + " weights, got " + std::to_string(ws.size()));
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i] != wsh[i])
      throw Error("synth: weight " + std::to_string(i) + " has shape " + shape_str(ws[i]) + ", expected " + shape_str(wsh[i]));
}

void check_output(const Spec& spec, const Binding& bind, const Shape& got) {
  Shape want = eval_shape(spec, spec.output, bind);
  if (got != want)
    throw Error("synth: operator produces " + shape_str(got) + ", the spec's output is " + shape_str(want));
}
}  // namespace

ValueId lower(const Spec& spec, const Operator& op, const Binding& bind, Graph& g, ValueId x,
              const std::vector<ValueId>& weights) {
  std::vector<Shape> ws;
  for (ValueId w : weights) ws.push_back(g.shape(w));
  check_inputs(spec, op, bind, g.shape(x), ws);
  LowerPlan p = make_plan(spec, op, bind);
  ValueId cur = x;
  for (const auto& st : p.steps) cur = g.add(step_op(st.t), {cur}, step_attrs(st));
  auto weight = [&](int w) {
    const Shape& v = p.weight_views[size_t(w)];
    return v.empty() ? weights[size_t(w)] : g.add(Op::Reshape, {weights[size_t(w)]}, attr::Target{v});
  };
  for (const auto& c : p.chain) cur = c.weight >= 0 ? g.einsum(c.spec, {cur, weight(c.weight)}) : g.einsum(c.spec, {cur});
  if (!p.out_shape.empty()) cur = g.add(Op::Reshape, {cur}, attr::Target{p.out_shape});
  check_output(spec, bind, g.shape(cur));
  return cur;
}

Tensor apply(const Spec& spec, const Operator& op, const Binding& bind, const Tensor& x,
             const std::vector<Tensor>& weights) {
  std::vector<Shape> ws;
  for (const Tensor& w : weights) ws.push_back(w.shape());
  check_inputs(spec, op, bind, x.shape(), ws);
  LowerPlan p = make_plan(spec, op, bind);
  Tensor cur = x;
  for (const auto& st : p.steps) cur = Tensor::apply(step_op(st.t), {cur}, step_attrs(st));
  auto weight = [&](int w) {
    const Shape& v = p.weight_views[size_t(w)];
    return v.empty() ? weights[size_t(w)] : weights[size_t(w)].reshape(v);
  };
  for (const auto& c : p.chain) cur = c.weight >= 0 ? einsum(c.spec, {cur, weight(c.weight)}) : einsum(c.spec, {cur});
  if (!p.out_shape.empty()) cur = cur.reshape(p.out_shape);
  check_output(spec, bind, cur.shape());
  return cur;
}

std::vector<Tensor> init_weights(const Spec& spec, const Operator& op, const Binding& bind, uint64_t seed) {
  // Var(y) = Π_w σ_w² · Π_r |r| · Var(x): each reduction's length is charged to the first weight
  // that holds it (or to the first weight when only x reads it), so Var(y) ≈ Var(x).
  auto shapes = weight_shapes(spec, op, bind);
  std::vector<double> fan(op.weights.size(), 1.0);
  for (size_t it = size_t(op.n_out); it < op.iter_sizes.size(); ++it) {
    double len = double(eval_size(spec, op.iter_sizes[it], bind));
    size_t owner = 0;
    for (size_t w = 0; w < op.weights.size(); ++w)
      if (std::find(op.weights[w].begin(), op.weights[w].end(), int32_t(it)) != op.weights[w].end()) {
        owner = w;
        break;
      }
    if (!fan.empty()) fan[owner] *= len;
  }
  std::vector<Tensor> out;
  for (size_t w = 0; w < shapes.size(); ++w) out.push_back(Tensor::randn(shapes[w], seed + 7919 * w, 1.0 / std::sqrt(fan[w])));
  return out;
}

HostTensor reference_eval(const Spec& spec, const Operator& op, const Binding& bind, const HostTensor& x,
                          const std::vector<HostTensor>& weights) {
  std::vector<Shape> ws;
  for (const HostTensor& w : weights) ws.push_back(w.shape);
  check_inputs(spec, op, bind, x.shape, ws);
  const size_t n_it = op.iter_sizes.size();
  std::vector<int64_t> isz(n_it), v(n_it, 0);
  for (size_t i = 0; i < n_it; ++i) isz[i] = eval_size(spec, op.iter_sizes[i], bind);
  std::vector<int64_t> nsz(op.nodes.size());
  for (size_t i = 0; i < op.nodes.size(); ++i) nsz[i] = eval_size(spec, op.nodes[i].size, bind);
  // Index value of a node, or -1 where the access falls outside an unfold window (reads zero).
  std::function<int64_t(int32_t)> ev = [&](int32_t n) -> int64_t {
    const IxNode& x0 = op.nodes[size_t(n)];
    int64_t a = x0.a >= 0 ? ev(x0.a) : 0, b = x0.b >= 0 ? ev(x0.b) : 0;
    if (a < 0 || b < 0) return -1;
    switch (x0.kind) {
      case Kind::Out:
      case Kind::Red: return v[size_t(x0.iter)];
      case Kind::Split: return a * nsz[size_t(x0.b)] + b;
      case Kind::Div: return a / eval_size(spec, x0.param, bind);
      case Kind::Mod: return a % eval_size(spec, x0.param, bind);
      case Kind::Shift: return (a + 1) % nsz[size_t(n)];
      case Kind::Stride: return a * eval_size(spec, x0.param, bind);
      case Kind::Unfold: {
        int64_t K = nsz[size_t(x0.b)];
        int64_t q = a + b - (K - 1) / 2;
        return (q < 0 || q >= nsz[size_t(n)]) ? -1 : q;
      }
    }
    return -1;
  };
  Shape ys;
  for (int o = 0; o < op.n_out; ++o) ys.push_back(isz[size_t(o)]);
  HostTensor y(DType::F64, ys);
  auto xstr = contiguous_strides(x.shape);
  std::vector<std::vector<int64_t>> wstr;
  for (const HostTensor& w : weights) wstr.push_back(contiguous_strides(w.shape));
  for (int64_t flat = 0; flat < y.numel(); ++flat) {
    int64_t rem = flat;
    for (int o = op.n_out - 1; o >= 0; --o) v[size_t(o)] = rem % isz[size_t(o)], rem /= isz[size_t(o)];
    double acc = 0;
    int64_t rtotal = 1;
    for (size_t r = size_t(op.n_out); r < n_it; ++r) rtotal *= isz[r];
    for (int64_t rf = 0; rf < rtotal; ++rf) {
      int64_t rr = rf;
      for (size_t r = n_it; r-- > size_t(op.n_out);) v[r] = rr % isz[r], rr /= isz[r];
      int64_t xi = 0;
      bool zero = false;
      for (size_t d = 0; d < op.x_root.size() && !zero; ++d) {
        int64_t q = ev(op.x_root[d]);
        if (q < 0) zero = true;
        else xi += q * xstr[d];
      }
      if (zero) continue;
      double term = x.get(xi);
      for (size_t w = 0; w < weights.size(); ++w) {
        int64_t wi = 0;
        for (size_t k = 0; k < op.weights[w].size(); ++k) wi += v[size_t(op.weights[w][k])] * wstr[w][k];
        term *= weights[w].get(wi);
      }
      acc += term;
    }
    y.set(flat, acc);
  }
  return y;
}

}  // namespace synoros::synth
