#include "passes/conv_match.hpp"

#include <algorithm>
#include <string>

#include "ir/op_defs.hpp"

namespace synoros::passes {

namespace {
// Stride, dilation and padding of the unfold view U [n, c, h, w, kh, kw] of an [N, C, H, W] buffer
// (g's sizes set); false when the view is not such a convolution window.
bool window_geometry(const ReadView& u, ConvGeom& g) {
  if (!u.viewed) return false;
  const Shape& bs = u.base_shape;
  if (bs.size() != 4 || bs[0] != g.N || bs[1] != g.C) return false;
  g.H = bs[2], g.W = bs[3];
  const std::vector<int64_t>& s = u.strides;
  if (s.size() != 6) return false;
  if ((g.N > 1 && s[0] != g.C * g.H * g.W) || (g.C > 1 && s[1] != g.H * g.W)) return false;
  const int kh = g.kswap ? 5 : 4, kw = g.kswap ? 4 : 5;  // the view's window dimensions
  auto derive = [&](int64_t stride, int64_t size, int64_t unit, int64_t& out) {
    if (size == 1) return out = 1, true;
    if (stride <= 0 || stride % unit != 0) return false;
    out = stride / unit;
    return true;
  };
  if (!derive(s[2], g.OH, g.W, g.sh) || !derive(s[size_t(kh)], g.KH, g.W, g.dh) || !derive(s[3], g.OW, 1, g.sw) ||
      !derive(s[size_t(kw)], g.KW, 1, g.dw))
    return false;
  // Zero padding: each gate must concern only the rows (h, kh) or only the columns (w, kw).
  std::vector<const ViewGate*> hg, wg;
  for (const ViewGate& gt : u.gates) {
    if (gt.cstride.size() != 6) return false;
    bool rows = gt.cstride[2] || gt.cstride[size_t(kh)], cols = gt.cstride[3] || gt.cstride[size_t(kw)];
    if (gt.cstride[0] || gt.cstride[1] || (rows && cols)) return false;
    if (!rows && !cols && !(gt.c0 >= 0 && gt.c0 < gt.limit)) return false;  // everything zero
    if (rows) hg.push_back(&gt);
    if (cols) wg.push_back(&gt);
  }
  auto axis_matches = [](const std::vector<const ViewGate*>& gs, int dout, int dk, int64_t nout, int64_t nk,
                         int64_t st, int64_t dil, int64_t pad, int64_t extent) {
    for (int64_t i = 0; i < nout; ++i)
      for (int64_t k = 0; k < nk; ++k) {
        bool view = true;
        for (const ViewGate* gt : gs) {
          int64_t val = gt->c0 + i * gt->cstride[size_t(dout)] + k * gt->cstride[size_t(dk)];
          view = view && val >= 0 && val < gt->limit;
        }
        int64_t r = i * st + k * dil - pad;
        if (view != (r >= 0 && r < extent)) return false;
      }
    return true;
  };
  // The view's offset is -(pt W + pl): try each top padding the window allows.
  int64_t off = u.offset;
  bool found = false;
  for (int64_t pt = 0; pt <= (g.KH - 1) * g.dh && !found; ++pt) {
    int64_t pl = -off - pt * g.W;
    if (pl < 0 || pl > (g.KW - 1) * g.dw) continue;
    if (axis_matches(hg, 2, kh, g.OH, g.KH, g.sh, g.dh, pt, g.H) &&
        axis_matches(wg, 3, kw, g.OW, g.KW, g.sw, g.dw, pl, g.W))
      g.pt = pt, g.pl = pl, found = true;
  }
  if (!found) return false;
  // Bottom/right padding that makes oneDNN's output size ours (floor division: up to stride - 1
  // unread rows are fine).
  g.pb = (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1 - g.H - g.pt;
  g.pr = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1 - g.W - g.pl;
  if (g.pb < 0) g.pb = -g.pb < g.sh ? 0 : g.pb;
  if (g.pr < 0) g.pr = -g.pr < g.sw ? 0 : g.pr;
  return g.pb >= 0 && g.pr >= 0;
}
}  // namespace

std::optional<ConvGeom> match_conv(DType dtype, const EinsumSpec& e, const std::vector<ReadView>& in) {
  if (dtype != DType::F32 || e.in.size() != 2 || in.size() != 2) return std::nullopt;
  ConvGeom g{};
  auto sz = [&](char l) { return e.size[int(l)]; };
  const std::string& o = e.out;
  if (o.size() != 4) return std::nullopt;
  // Forward: U = "nchwxy", weights "ocxy" -> "nohw". Weight gradient: dY "nohw", U "nchwxy" -> "ocxy".
  const std::string& u = e.in[0].size() == 6 ? e.in[0] : e.in[1];
  const std::string& q = e.in[0].size() == 6 ? e.in[1] : e.in[0];
  if (u.size() != 6 || q.size() != 4) return std::nullopt;
  int v = e.in[0].size() == 6 ? 0 : 1;
  if (v == 0 && q[1] == u[1] && q[2] == u[4] && q[3] == u[5] && o[0] == u[0] && o[1] == q[0] && o[2] == u[2] &&
      o[3] == u[3] && u.find(q[0]) == std::string::npos) {
    g.kind = ConvKind::Forward;
  } else if (v == 1 && q[0] == u[0] && q[2] == u[2] && q[3] == u[3] && o[0] == q[1] && o[1] == u[1] && o[2] == u[4] &&
             o[3] == u[5] && u.find(q[1]) == std::string::npos) {
    g.kind = ConvKind::BwdWeights;
  } else {
    return std::nullopt;
  }
  g.N = sz(u[0]), g.C = sz(u[1]), g.OH = sz(u[2]), g.OW = sz(u[3]);
  g.O = sz(g.kind == ConvKind::BwdWeights ? q[1] : q[0]);
  if (g.N < 1 || g.C < 1 || g.O < 1 || g.OH < 1 || g.OW < 1 || sz(u[4]) < 1 || sz(u[5]) < 1) return std::nullopt;
  // The second input plain: weights [O, C, KH, KW] or dY [N, O, OH, OW].
  int w = 1 - v;
  const ReadView& second = in[size_t(w)];
  if (second.viewed && (second.strides != contiguous_strides(second.shape) || !second.gates.empty()))
    return std::nullopt;
  // The view's window dimensions in the order (kh, kw), or -- a transposed convolution's input
  // gradient, whose unfolds come in the reverse order -- (kw, kh) with weights [O, C, KW, KH].
  for (bool swap : {false, true}) {
    if (swap && g.kind != ConvKind::Forward) break;
    g.kswap = swap;
    g.KH = sz(u[swap ? 5 : 4]), g.KW = sz(u[swap ? 4 : 5]);
    if (window_geometry(in[size_t(v)], g)) return g;
  }
  return std::nullopt;
}

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
  EinsumSpec es = parse_einsum(ne.attr<attr::Einsum>().spec, {g.shape(ne.in[0]), g.shape(ne.in[1])});
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

}  // namespace synoros::passes
