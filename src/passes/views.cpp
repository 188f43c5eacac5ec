#include "passes/views.hpp"

#include "ir/op_defs.hpp"

namespace synoros::passes {

bool is_affine_view_op(Op op) {
  return op == Op::Permute || op == Op::Slice || op == Op::Stride || op == Op::Expand || op == Op::Reshape;
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

bool apply_view(const Node& n, AffineView& v) {
  const auto& ints = n.attrs.ints;
  switch (n.op) {
    case Op::Reshape: {
      std::vector<int64_t> st;
      if (!reshape_strides(v.shape, v.strides, n.shape, st)) return false;
      v.strides = st;
      break;
    }
    case Op::Permute: {
      std::vector<int64_t> st(ints.size());
      for (size_t d = 0; d < ints.size(); ++d)
        st[d] = v.strides[size_t(normalize_axis(ints[d], v.shape.size(), "permute", v.shape))];
      v.strides = st;
      break;
    }
    case Op::Expand: {
      size_t lead = n.shape.size() - v.shape.size();
      std::vector<int64_t> st(n.shape.size(), 0);
      for (size_t d = 0; d < v.shape.size(); ++d) st[lead + d] = v.shape[d] == 1 ? 0 : v.strides[d];
      v.strides = st;
      break;
    }
    case Op::Slice: {
      opdefs::AxisArgs a = opdefs::axis_args(n, v.shape.size());
      v.offset += a.a * v.strides[size_t(a.axis)];
      break;
    }
    case Op::Stride: {
      opdefs::AxisArgs a = opdefs::axis_args(n, v.shape.size());
      v.strides[size_t(a.axis)] *= a.a;
      break;
    }
    default: return false;
  }
  v.shape = n.shape;
  return true;
}

}  // namespace synoros::passes
