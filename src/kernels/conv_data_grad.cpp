// A convolution's data gradient as one launch. Autodiff writes the input gradient of a strided
// convolution as fold(fold(einsum(dY, W))): the contraction materialises the unfolded gradient
// [N, C, OH, OW, KH, KW] (KH*KW times the input's size) and two folds add it back into
// [N, C, H, W]. The plan hands the whole chain to the last fold; here it runs either as that same
// sequence of kernels in the launch's scratch (same bits as unfused), or as oneDNN's
// backward-data convolution, which never materialises the unfolded gradient -- checked against
// float64 and timed against the sequence, like every provider.
#include <optional>
#include <string>

#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/onednn_conv.hpp"

namespace synoros::kernels {

std::optional<ConvDataChain> match_conv_data_grad(const Graph& g, ValueId f2) {
  const Node& n2 = g.node(f2);
  if (n2.op != Op::Fold || n2.dtype != DType::F32 || n2.shape.size() != 4) return std::nullopt;
  ValueId f1 = n2.in[0];
  const Node& n1 = g.node(f1);
  if (n1.op != Op::Fold || n1.dtype != DType::F32 || n1.shape.size() != 5) return std::nullopt;
  ValueId e = n1.in[0];
  const Node& ne = g.node(e);
  if (ne.op != Op::Einsum || ne.in.size() != 2 || ne.dtype != DType::F32 || ne.shape.size() != 6) return std::nullopt;
  for (ValueId x : ne.in)
    if (g.dtype(x) != DType::F32) return std::nullopt;
  EinsumSpec es = parse_einsum(ne.attrs.spec, {g.shape(ne.in[0]), g.shape(ne.in[1])});
  // "nohw,ocxy->nchwxy": dY [N, O, OH, OW] and W [O, C, KH, KW], in either operand order.
  const std::string& out = es.out;
  int dy = es.in[0].size() == 4 && !es.in[0].empty() && es.in[0][0] == out[0] ? 0 : 1;
  const std::string& ld = es.in[size_t(dy)];
  const std::string& lw = es.in[size_t(1 - dy)];
  if (ld.size() != 4 || lw.size() != 4) return std::nullopt;
  char o = ld[1];
  if (ld[0] != out[0] || ld[2] != out[2] || ld[3] != out[3] || out.find(o) != std::string::npos)
    return std::nullopt;
  if (lw[0] != o || lw[1] != out[1] || lw[2] != out[4] || lw[3] != out[5]) return std::nullopt;
  // The first fold adds the kw window into w (axis 3), the second the kh window into h (axis 2).
  opdefs::WindowArgs w1 = opdefs::window_args(n1, n1.shape.size());
  opdefs::WindowArgs w2 = opdefs::window_args(n2, n2.shape.size());
  auto sz = [&](char l) { return es.size[int(l)]; };
  if (w1.axis != 3 || w1.window != sz(out[5]) || w2.axis != 2 || w2.window != sz(out[4])) return std::nullopt;
  ConvGeom c{};
  c.kind = ConvKind::BwdData;
  c.N = sz(out[0]), c.C = sz(out[1]), c.O = sz(o), c.OH = sz(out[2]), c.OW = sz(out[3]);
  c.H = n2.shape[2], c.W = n2.shape[3], c.KH = w2.window, c.KW = w1.window;
  c.sh = w2.stride, c.sw = w1.stride, c.dh = w2.dilation, c.dw = w1.dilation;
  // A fold puts window j of input row a at a * stride + (j - center) * dilation.
  c.pt = w2.center * w2.dilation, c.pl = w1.center * w1.dilation;
  if (c.N < 1 || c.C < 1 || c.O < 1 || c.H < 1 || c.W < 1 || c.pt < 0 || c.pl < 0) return std::nullopt;
  c.pb = std::max<int64_t>(0, (c.OH - 1) * c.sh + (c.KH - 1) * c.dh + 1 - c.H - c.pt);
  c.pr = std::max<int64_t>(0, (c.OW - 1) * c.sw + (c.KW - 1) * c.dw + 1 - c.W - c.pl);
  // oneDNN's output size must be the gradient's.
  if ((c.H + c.pt + c.pb - (c.KH - 1) * c.dh - 1) / c.sh + 1 != c.OH ||
      (c.W + c.pl + c.pr - (c.KW - 1) * c.dw - 1) / c.sw + 1 != c.OW)
    return std::nullopt;
  return ConvDataChain{c, dy, e, f1};
}

namespace {
// The chain as its own kernels: einsum -> scratch, fold -> scratch, fold -> out.
Launch lower_sequence(const Graph& g, const ConvDataChain& m, ValueId f2, PlanStorage& storage,
                      const std::vector<void*>& ein, const std::vector<const Buffer*>& params, void* out,
                      std::string* kernel = nullptr) {
  const Node& ne = g.node(m.e);
  const Node& n1 = g.node(m.f1);
  const Node& n2 = g.node(f2);
  void* s1 = storage.scratch(size_t(numel(ne.shape)) * 4);
  void* s2 = storage.scratch(size_t(numel(n1.shape)) * 4);
  LowerCtx ce{g, m.e, ne, ein, s1, storage};
  ce.in_param = params;
  Launch le = lower(ce);
  if (kernel) *kernel = (ce.kernel.empty() ? "einsum" : ce.kernel) + "+fold";
  LowerCtx c1{g, m.f1, n1, {s1}, s2, storage};
  Launch l1 = lower(c1);
  LowerCtx c2{g, f2, n2, {s2}, out, storage};
  Launch l2 = lower(c2);
  return sequence(storage, sequence(storage, le, l1, f2), l2, f2);
}
}  // namespace

Launch lower_conv_data_grad(LowerCtx& c) {
  std::optional<ConvDataChain> m = match_conv_data_grad(c.g, c.id);
  if (!m || c.chain.size() != 2 || c.chain[0] != m->e || c.chain[1] != m->f1 || c.chain_in.size() != 2)
    throw Error("fold: the plan's convolution data-gradient chain does not match the graph");
  std::vector<const Buffer*> params = c.chain_param;
  params.resize(2, nullptr);
  // The choice is made in the real pass, so both paths get scratch in both: the frame holds the
  // unfolded gradient even when oneDNN is chosen (the memory the unfused plan used anyway).
  Launch seq = lower_sequence(c.g, *m, c.id, c.storage, c.chain_in, params, c.out, &c.kernel);
  int dy = m->dy;
  ProbeLowering on_probe = [&c, &m, dy](PlanStorage& storage, float* x, float* b, float* y) {
    std::vector<void*> in(2);
    in[size_t(dy)] = x;
    in[size_t(1 - dy)] = b;
    return lower_sequence(c.g, *m, c.id, storage, in, {nullptr, nullptr}, y);
  };
  Launch l = select_onednn(c, m->g, static_cast<const float*>(c.chain_in[size_t(dy)]),
                           static_cast<const float*>(c.chain_in[size_t(1 - dy)]), seq, on_probe);
  if (c.kernel == "onednn-conv" || c.kernel == "onednn-wino") c.kernel += "-data";
  return l;
}

}  // namespace synoros::kernels
