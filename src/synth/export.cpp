// Export: a human-readable formula and a standalone PyTorch module with the engine's semantics.
#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>

#include "synth/lower_plan.hpp"

namespace synoros::synth {

namespace {
std::vector<std::string> iter_names(const Spec& spec, const Operator& op) {
  std::vector<std::string> names;
  auto taken = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (int o = 0; o < op.n_out; ++o) {
    std::string n = spec.str(op.iter_sizes[size_t(o)]);
    bool simple = std::all_of(n.begin(), n.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
    if (!simple || n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) n = "o" + std::to_string(o);
    std::string low;
    for (char ch : n) low += char(std::tolower(static_cast<unsigned char>(ch)));
    std::string cand = low;
    for (int k = 2; taken(cand); ++k) cand = low + std::to_string(k);
    names.push_back(cand);
  }
  // Reductions named in the order x reads them, then the weight-only ones.
  std::vector<int> order;
  std::function<void(int32_t)> walk = [&](int32_t n) {
    const IxNode& x = op.nodes[size_t(n)];
    if (x.kind == Kind::Red && std::find(order.begin(), order.end(), x.iter) == order.end()) order.push_back(x.iter);
    if (x.a >= 0) walk(x.a);
    if (x.b >= 0) walk(x.b);
  };
  for (int32_t r : op.x_root) walk(r);
  for (size_t it = size_t(op.n_out); it < op.iter_sizes.size(); ++it)
    if (std::find(order.begin(), order.end(), int(it)) == order.end()) order.push_back(int(it));
  names.resize(op.iter_sizes.size());
  for (size_t k = 0; k < order.size(); ++k) names[size_t(order[k])] = "r" + std::to_string(k);
  return names;
}

bool compound(const IxNode& n) {
  return n.kind == Kind::Split || n.kind == Kind::Unfold || n.kind == Kind::Mod || n.kind == Kind::Shift;
}
}  // namespace

std::string formula(const Spec& spec, const Operator& op) {
  auto names = iter_names(spec, op);
  auto sz = [&](const Size& z) {
    std::string t = spec.str(z);
    return t.find_first_of("/*") == std::string::npos ? t : "(" + t + ")";
  };
  bool pads = false;
  std::function<std::string(int32_t)> ex = [&](int32_t i) -> std::string {
    const IxNode& n = op.nodes[size_t(i)];
    auto par = [&](int32_t c) {
      std::string s = ex(c);
      return compound(op.nodes[size_t(c)]) ? "(" + s + ")" : s;
    };
    switch (n.kind) {
      case Kind::Out:
      case Kind::Red: return names[size_t(n.iter)];
      case Kind::Split: return par(n.a) + "·" + sz(n.param) + "+" + (op.nodes[size_t(n.b)].kind == Kind::Mod ? "(" + ex(n.b) + ")" : ex(n.b));
      case Kind::Div: return "⌊" + par(n.a) + "/" + sz(n.param) + "⌋";
      case Kind::Mod: return par(n.a) + " mod " + sz(n.param);
      case Kind::Shift: return "(" + ex(n.a) + "+1) mod " + sz(n.size);
      case Kind::Stride: return sz(n.param) + "·" + par(n.a);
      case Kind::Unfold: {
        pads = true;
        int64_t K = spec.eval(n.param, 0), c = (K - 1) / 2;
        auto term = [&](int32_t t) { return op.nodes[size_t(t)].kind == Kind::Mod ? "(" + ex(t) + ")" : ex(t); };
        std::string s = term(n.a) + "+" + term(n.b);
        if (c) s += "−" + std::to_string(c);
        return s;
      }
    }
    return "?";
  };
  std::string y = "y[";
  for (int o = 0; o < op.n_out; ++o) y += (o ? "," : "") + names[size_t(o)];
  y += "] = ";
  std::string sum;
  for (size_t it = size_t(op.n_out); it < op.iter_sizes.size(); ++it)
    sum += std::string(sum.empty() ? "" : ", ") + names[it] + "<" + spec.str(op.iter_sizes[it]);
  std::string body = "x[";
  for (size_t d = 0; d < op.x_root.size(); ++d) body += (d ? ", " : "") + ex(op.x_root[d]);
  body += "]";
  for (size_t w = 0; w < op.weights.size(); ++w) {
    body += " · W" + std::to_string(w + 1) + "[";
    for (size_t k = 0; k < op.weights[w].size(); ++k) body += (k ? "," : "") + names[size_t(op.weights[w][k])];
    body += "]";
  }
  std::string out = y + (sum.empty() ? "" : "Σ_{" + sum + "} ") + body;
  if (pads) out += "   (x reads 0 outside its bounds)";
  return out;
}

std::string describe(const Spec& spec, const Operator& op) {
  Stats st = stats(spec, op, binding(spec, 0));
  std::ostringstream o;
  o << formula(spec, op) << "   [depth " << op.depth << ", " << st.flops / 1e6 << " MFLOPs, " << st.params
    << " params @ binding 0]";
  return o.str();
}

namespace {
// A depthwise k x k convolution with "same" zero padding (odd k), spelled as unfold(2), unfold(3)
// and one einsum with a [C, k, k] weight in some order: the body of a forward() that runs it as
// F.conv2d(groups=C), which PyTorch computes as a convolution instead of materialising the k*k
// unfolded copy. "" for any other operator.
std::string depthwise_conv_body(const LowerPlan& p, const std::vector<std::vector<int64_t>>& shapes) {
  if (p.x_shape.size() != 4 || p.steps.size() != 2 || p.chain.size() != 1 || shapes.size() != 1) return "";
  for (int i = 0; i < 2; ++i) {
    const auto& s = p.steps[size_t(i)];
    if (s.t != LowerPlan::Step::Unfold || s.ints.size() < 2 || s.ints[0] != 2 + i || s.ints[1] != p.steps[0].ints[1] ||
        (s.ints.size() > 2 && s.ints[2] != 1))
      return "";
  }
  int64_t k = p.steps[0].ints[1];
  if (k % 2 == 0 || p.chain[0].weight != 0) return "";
  const std::string& spec = p.chain[0].spec;
  size_t comma = spec.find(','), arrow = spec.find("->");
  if (comma == std::string::npos || arrow == std::string::npos) return "";
  std::string xl = spec.substr(0, comma), wl = spec.substr(comma + 1, arrow - comma - 1), ol = spec.substr(arrow + 2);
  if (xl.size() != 6 || wl.size() != 3 || ol != xl.substr(0, 4)) return "";
  // Weight axes holding the channel, the h window and the w window.
  size_t pc = wl.find(xl[1]), ph = wl.find(xl[4]), pw = wl.find(xl[5]);
  if (pc == std::string::npos || ph == std::string::npos || pw == std::string::npos) return "";
  int64_t C = p.x_shape[1];
  if (shapes[0][pc] != C || shapes[0][ph] != k || shapes[0][pw] != k) return "";
  std::ostringstream o;
  o << "        # a depthwise " << k << "x" << k << " convolution: run as one\n"
    << "        w = self.w0.permute(" << pc << ", " << ph << ", " << pw << ").unsqueeze(1)\n"
    << "        return F.conv2d(x, w, padding=" << (k - 1) / 2 << ", groups=" << C << ")\n";
  return o.str();
}
}  // namespace

std::string pytorch_module(const Spec& spec, const Operator& op, const Binding& bind, const std::string& cls) {
  LowerPlan p = make_plan(spec, op, bind);
  auto shapes = weight_shapes(spec, op, bind);
  auto tuple = [](const std::vector<int64_t>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + (v.size() == 1 ? ",)" : ")");
  };
  std::ostringstream o;
  o << "# Generated by synoros synth. Semantics match the engine exactly:\n"
       "#   " << formula(spec, op) << "\n"
       "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
       "def _unfold(x, axis, k):\n"
       "    # out[..., i, ..., j] = x[..., i + j - (k - 1) // 2, ...], zero outside; window appended last\n"
       "    c = (k - 1) // 2\n"
       "    pad = [0, 0] * (x.dim() - axis - 1) + [c, k - 1 - c]\n"
       "    return F.pad(x, pad).unfold(axis, k, 1)\n\n\n"
       "def _stride(x, axis, s):\n"
       "    return x[(slice(None),) * axis + (slice(None, None, s),)]\n\n\n"
    << "class " << cls << "(nn.Module):\n"
    << "    def __init__(self):\n        super().__init__()\n";
  for (size_t w = 0; w < shapes.size(); ++w)
    o << "        self.w" << w << " = nn.Parameter(torch.randn" << tuple(shapes[w]) << ")\n";
  if (shapes.empty()) o << "        pass\n";
  o << "\n    def forward(self, x):\n"
    << "        assert tuple(x.shape) == " << tuple(p.x_shape) << ", x.shape\n";
  if (p.out_shape.empty())
    if (std::string body = depthwise_conv_body(p, shapes); !body.empty()) return o.str() + body;
  for (const auto& st : p.steps) {
    switch (st.t) {
      case LowerPlan::Step::Reshape: o << "        x = x.reshape" << tuple(st.ints) << "\n"; break;
      case LowerPlan::Step::Permute: o << "        x = x.permute" << tuple(st.ints) << "\n"; break;
      case LowerPlan::Step::Expand: o << "        x = x.expand" << tuple(st.ints) << "\n"; break;
      case LowerPlan::Step::Shift:
        o << "        x = torch.roll(x, shifts=-" << st.ints[1] << ", dims=" << st.ints[0] << ")\n";
        break;
      case LowerPlan::Step::Stride: o << "        x = _stride(x, " << st.ints[0] << ", " << st.ints[1] << ")\n"; break;
      case LowerPlan::Step::Unfold: o << "        x = _unfold(x, " << st.ints[0] << ", " << st.ints[1] << ")\n"; break;
    }
  }
  for (const auto& c : p.chain) {
    if (c.weight < 0) {
      o << "        x = torch.einsum('" << c.spec << "', x)\n";
      continue;
    }
    const Shape& view = p.weight_views[size_t(c.weight)];
    std::string w = "self.w" + std::to_string(c.weight) + (view.empty() ? "" : ".reshape" + tuple(view));
    o << "        x = torch.einsum('" << c.spec << "', x, " << w << ")\n";
  }
  if (!p.out_shape.empty()) o << "        x = x.reshape" << tuple(p.out_shape) << "\n";
  o << "        return x\n";
  return o.str();
}

}  // namespace synoros::synth
