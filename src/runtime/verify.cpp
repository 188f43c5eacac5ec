#include <cmath>
#include <limits>
#include <sstream>

#include "ir/einsum_spec.hpp"
#include "synoros/oracle.hpp"

namespace synoros {

std::vector<HostTensor> oracle_eval(const Graph& g, const std::vector<ValueId>& outputs,
                                    const std::map<ValueId, HostTensor>& feeds) {
  size_t n = g.size();
  std::vector<bool> needed(n, false);
  for (ValueId o : outputs) needed.at(size_t(o)) = true;
  for (size_t i = n; i-- > 0;)
    if (needed[i])
      for (ValueId x : g.node(ValueId(i)).in) needed[size_t(x)] = true;
  std::vector<HostTensor> val(n);
  auto widen = [](const HostTensor& h) {
    HostTensor w(is_float(h.dtype) ? DType::F64 : DType::I64, h.shape);
    for (int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
    return w;
  };
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    const Node& nd = g.node(ValueId(i));
    if (nd.op == Op::Input) {
      auto it = feeds.find(ValueId(i));
      if (it == feeds.end()) throw Error("oracle: no feed for input '" + nd.name + "'");
      val[i] = widen(it->second);
    } else if (nd.op == Op::Param || nd.op == Op::Const) {
      val[i] = widen(*nd.data);
    } else {
      std::vector<const HostTensor*> in;
      for (ValueId x : nd.in) in.push_back(&val[size_t(x)]);
      val[i] = op_info(nd.op).oracle(nd, in);
    }
  }
  return val;
}

std::vector<double> error_budget(const Graph& g) {
  std::vector<double> b(g.size(), 0.0);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& nd = g.node(ValueId(i));
    double m = 0;
    for (ValueId x : nd.in) m = std::max(m, b[size_t(x)]);
    double own = 0;
    switch (op_info(nd.op).kind) {
      case OpKind::Leaf: own = 0; break;
      case OpKind::View: own = nd.op == Op::Fold ? 2 * std::sqrt(double(nd.attr<attr::Window>().window)) : 0; break;
      case OpKind::Elementwise: own = 4; break;
      case OpKind::Reduce: {
        double r = double(numel(g.shape(nd.in[0]))) / double(std::max<int64_t>(1, numel(nd.shape)));
        own = 2 + 2 * std::sqrt(r);
        break;
      }
      case OpKind::Contraction: {
        std::vector<Shape> shapes;
        for (ValueId x : nd.in) shapes.push_back(g.shape(x));
        EinsumSpec e = parse_einsum(nd.attr<attr::Einsum>().spec, shapes);
        double r = 1;
        for (char c : e.labels())
          if (e.out.find(c) == std::string::npos) r *= double(e.size[int(c)]);
        own = 2 + 2 * std::sqrt(r);
        break;
      }
      case OpKind::Composite: {
        double r = nd.shape.empty() ? 1 : double(nd.shape.back());
        if (nd.op == Op::Attention || nd.op == Op::AttentionGrad) {  // sums over the keys and over D
          const Shape& k = g.shape(nd.in[1]);
          r = double(k[k.size() - 2]) * double(k.back());
        }
        if (!nd.in.empty()) r = std::max(r, double(numel(g.shape(nd.in[0]))) / std::max<double>(1, double(numel(nd.shape))));
        // A 3x3 convolution sums 9 C terms. The conv3x3 op's Winograd F(4x4, 3x3) rounds values its
        // transforms multiply by up to 8 and combine with cancellation: its error measured up to
        // 1.4 times the direct sum's allowance (tests/winograd_test.cpp), which it gets four times.
        if (nd.op == Op::Conv3x3) r = std::max(r, 9.0 * double(g.shape(nd.in[0])[1]));
        // layernorm_backward's last two rows sum over every row of x.
        if (nd.op == Op::LayerNormBackward) r = std::max(r, double(nd.shape[0] - 2));
        own = (8 + 2 * std::sqrt(r)) * (nd.op == Op::Conv3x3 ? 4 : 1);
        break;
      }
    }
    b[i] = m + own;
  }
  return b;
}

VerifyResult compare(const HostTensor& fast, const HostTensor& ref, double budget, DType dtype,
                     const std::string& label) {
  VerifyResult r;
  if (fast.shape != ref.shape) {
    r.ok = false;
    r.report = label + ": shape " + shape_str(fast.shape) + " differs from oracle " + shape_str(ref.shape) + "\n";
    return r;
  }
  double eps = dtype == DType::F32 ? double(std::numeric_limits<float>::epsilon())
                                   : std::numeric_limits<double>::epsilon();
  bool exact = !is_float(dtype);
  double ss = 0;
  int64_t cnt = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double v = ref.get(i);
    if (std::isfinite(v)) ss += v * v, ++cnt;
  }
  double rms = cnt ? std::sqrt(ss / double(cnt)) : 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double f = fast.get(i), o = ref.get(i);
    double ratio;
    if (std::isnan(o) || std::isnan(f)) ratio = (std::isnan(o) && std::isnan(f)) ? 0 : INFINITY;
    else if (std::isinf(o) || std::isinf(f)) ratio = f == o ? 0 : INFINITY;
    else if (exact) ratio = f == o ? 0 : INFINITY;
    else {
      double allowed = budget * eps * (std::fabs(o) + rms) + std::numeric_limits<float>::denorm_min();
      ratio = std::fabs(f - o) / allowed;
    }
    if (ratio > r.worst) r.worst = ratio;
    if (ratio > 1 && r.ok) {
      r.ok = false;
      std::ostringstream s;
      s.precision(9);
      s << label << ": element " << i << " is " << f << ", oracle says " << o << " (error "
        << ratio << "x the allowance)\n";
      r.report += s.str();
    }
  }
  return r;
}

VerifyResult verify(Plan& plan, bool intermediates) {
  if (intermediates && !plan.keeps_intermediates())
    throw Error("verify: checking intermediates needs a plan compiled with keep_intermediates");
  const Graph& g = plan.graph();
  std::map<ValueId, HostTensor> feeds;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g.node(ValueId(i)).op != Op::Input) continue;
    try {
      feeds[ValueId(i)] = plan.read(ValueId(i));
    } catch (const Error&) {  // not used by this plan
    }
  }
  std::vector<HostTensor> ref = oracle_eval(g, plan.outputs(), feeds);
  std::vector<double> budget = error_budget(g);
  VerifyResult total;
  std::vector<ValueId> check = plan.outputs();
  if (intermediates)
    for (const Launch& l : plan.launches()) check.push_back(l.node);
  for (ValueId v : check) {
    const Node& nd = g.node(v);
    if (nd.op == Op::Input || nd.op == Op::Param || nd.op == Op::Const) continue;
    std::string label = std::string(op_name(nd.op)) + " %" + std::to_string(v) + " " +
                        dtype_name(nd.dtype) + shape_str(nd.shape);
    VerifyResult r = compare(plan.read(v), ref[size_t(v)], budget[size_t(v)], nd.dtype, label);
    if (r.worst > total.worst) total.worst = r.worst, total.worst_value = v;
    if (!r.ok) total.ok = false, total.report += r.report;
  }
  return total;
}

}  // namespace synoros
