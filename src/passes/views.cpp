#include "passes/views.hpp"

#include "ir/op_defs.hpp"

namespace synoros::passes {

bool is_affine_view_op(Op op) { return op_info(op).has(kAffineView); }

bool is_gated_view_op(Op op) { return op_info(op).has(kGatedView); }

bool is_alias(const Graph& g, const Node& n) {
  if (op_info(n.op).has(kAlias)) return true;
  if (n.op != Op::Slice) return false;
  const Shape& in = g.shape(n.in[0]);
  const opdefs::AxisArgs a = opdefs::axis_args(n, in.size());
  if (a.a != 0) return false;
  for (int64_t d = 0; d < a.axis; ++d)
    if (in[size_t(d)] != 1) return false;
  return true;
}

std::optional<RowsView> rows_view(const Shape& shape, const std::vector<int64_t>& strides) {
  const size_t r = shape.size();
  if (r < 2 || strides.size() != r || (shape[r - 1] > 1 && strides[r - 1] != 1)) return std::nullopt;
  std::vector<std::pair<int64_t, int64_t>> lead;  // (size, stride) of the leading dims, merged
  for (size_t d = 0; d + 2 < r; ++d) {
    if (shape[d] == 1) continue;
    if (!lead.empty() && lead.back().second == strides[d] * shape[d]) lead.back() = {lead.back().first * shape[d], strides[d]};
    else lead.emplace_back(shape[d], strides[d]);
  }
  if (lead.size() > 2) return std::nullopt;
  RowsView v{strides[r - 2], 1, 0, 0};
  if (lead.size() == 1) v.outer = lead[0].second;
  if (lead.size() == 2) v.inner = lead[1].first, v.outer = lead[0].second, v.inner_stride = lead[1].second;
  return v;
}

bool reshape_strides(const Shape& shape, const std::vector<int64_t>& strides, const Shape& new_shape,
                     std::vector<int64_t>& out) {
  out.assign(new_shape.size(), 0);
  if (numel(shape) == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  std::vector<int64_t> od, os;  // old dims without the size-1 ones
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1) od.push_back(shape[i]), os.push_back(strides[i]);
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  size_t ond = od.size(), nnd = new_shape.size();
  while (ni < nnd && oi < ond) {
    int64_t np = new_shape[ni], op = od[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= nnd) return false;
        np *= new_shape[nj++];
      } else {
        if (oj >= ond) return false;
        op *= od[oj++];
      }
    }
    for (size_t ok = oi; ok + 1 < oj; ++ok)
      if (os[ok] != od[ok + 1] * os[ok + 1]) return false;
    out[nj - 1] = os[oj - 1];
    for (size_t nk = nj - 1; nk > ni; --nk) out[nk - 1] = out[nk] * new_shape[nk];
    ni = nj++;
    oi = oj++;
  }
  for (size_t k = ni; k < nnd; ++k)
    if (new_shape[k] != 1) return false;
  return true;
}

namespace {
// Every affine function of the view's index: the base offset (with strides) and each gate.
template <class F>
void each_affine(AffineView& v, F&& f) {
  f(v.offset, v.strides);
  for (ViewGate& g : v.gates) f(g.c0, g.cstride);
}
}  // namespace

bool apply_view(const Node& n, AffineView& v, bool allow_gates) {
  if (is_gated_view_op(n.op) && !allow_gates) return false;
  bool ok = true;
  switch (n.op) {
    case Op::Reshape: {
      each_affine(v, [&](int64_t&, std::vector<int64_t>& st) {
        std::vector<int64_t> out;
        if (!ok || !reshape_strides(v.shape, st, n.shape, out)) ok = false;
        else st = out;
      });
      if (!ok) return false;
      break;
    }
    case Op::Permute: {
      const auto& perm = n.attr<attr::Permute>().perm;
      each_affine(v, [&](int64_t&, std::vector<int64_t>& s) {
        std::vector<int64_t> st(perm.size());
        for (size_t d = 0; d < perm.size(); ++d)
          st[d] = s[size_t(normalize_axis(perm[d], v.shape.size(), "permute", v.shape))];
        s = st;
      });
      break;
    }
    case Op::Expand: {
      size_t lead = n.shape.size() - v.shape.size();
      each_affine(v, [&](int64_t&, std::vector<int64_t>& s) {
        std::vector<int64_t> st(n.shape.size(), 0);
        for (size_t d = 0; d < v.shape.size(); ++d) st[lead + d] = v.shape[d] == 1 ? 0 : s[d];
        s = st;
      });
      break;
    }
    case Op::Slice: {
      opdefs::AxisArgs a = opdefs::axis_args(n, v.shape.size());
      each_affine(v, [&](int64_t& off, std::vector<int64_t>& s) { off += a.a * s[size_t(a.axis)]; });
      break;
    }
    case Op::Stride: {
      opdefs::AxisArgs a = opdefs::axis_args(n, v.shape.size());
      each_affine(v, [&](int64_t&, std::vector<int64_t>& s) { s[size_t(a.axis)] *= a.a; });
      break;
    }
    case Op::Pad: {  // out[i] = in[i - before] inside [0, size), else 0
      opdefs::AxisArgs a = opdefs::axis_args(n, v.shape.size());
      size_t x = size_t(a.axis);
      int64_t limit = v.shape[x];
      each_affine(v, [&](int64_t& off, std::vector<int64_t>& s) { off -= a.a * s[x]; });
      ViewGate g{std::vector<int64_t>(v.shape.size(), 0), -a.a, limit};
      g.cstride[x] = 1;
      v.gates.push_back(std::move(g));
      break;
    }
    case Op::Unfold: {  // out[.., i, .., j] = in[.., i * stride + (j - center) * dilation, ..], 0 outside
      opdefs::WindowArgs w = opdefs::window_args(n, v.shape.size());
      size_t x = size_t(w.axis);
      int64_t limit = v.shape[x];
      each_affine(v, [&](int64_t& off, std::vector<int64_t>& s) {
        off -= w.center * w.dilation * s[x];
        s.push_back(s[x] * w.dilation);
        s[x] *= w.stride;
      });
      ViewGate g{std::vector<int64_t>(v.shape.size() + 1, 0), -w.center * w.dilation, limit};
      g.cstride[x] = w.stride;
      g.cstride.back() = w.dilation;
      v.gates.push_back(std::move(g));
      break;
    }
    default: return false;
  }
  v.shape = n.shape;
  // A gate that holds over the whole index box (a zero-width pad, say) guards nothing.
  std::erase_if(v.gates, [&](const ViewGate& g) {
    int64_t lo = g.c0, hi = g.c0;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      if (v.shape[d] == 0) return false;
      int64_t span = (v.shape[d] - 1) * g.cstride[d];
      (span < 0 ? lo : hi) += span;
    }
    return lo >= 0 && hi < g.limit;
  });
  return true;
}

}  // namespace synoros::passes
