// Views materialised as strided gathers (permute, expand, slice, pad, stride, shift, unfold), and
// fold, the adjoint of unfold, as a gather-sum. No view ever scatters, so gradients through views
// are deterministic without atomics.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ir/op_defs.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/onednn_conv.hpp"
#include "kernels/cpu/odometer.hpp"

namespace synoros::kernels {

namespace {
constexpr int kMaxRank = 10;
constexpr int kMaxGates = 6;
constexpr int64_t kGatherChunk = 1 << 14;

struct GatherArgs {
  int rank;
  int64_t total;
  int64_t shape[kMaxRank];
  int64_t stride[kMaxRank];
  int64_t cstride[kMaxRank];
  int64_t offset, c0, climit, cmul;
  bool checked, wrap;
  int ngates;
  int64_t plane;  // > 0: the last two dims form planes walked row by row under row/column gates
  int64_t gstride[kMaxGates][kMaxRank];
  int64_t g0[kMaxGates], glimit[kMaxGates];
  int64_t esize;
  const char* in;
  char* out;
};

// Short copies and fills with fixed-size moves the compiler inlines (a library call per
// 28-float image row costs more than the copy).
inline void copy_short(void* dst, const void* src, size_t bytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) std::memcpy(d, s, 64);
  if (bytes >= 32) std::memcpy(d, s, 32), bytes -= 32, d += 32, s += 32;
  if (bytes >= 16) std::memcpy(d, s, 16), bytes -= 16, d += 16, s += 16;
  if (bytes >= 8) std::memcpy(d, s, 8), bytes -= 8, d += 8, s += 8;
  if (bytes >= 4) std::memcpy(d, s, 4);
}
inline void zero_short(void* dst, size_t bytes) {
  static constexpr char kZero[64] = {};
  char* d = static_cast<char*>(dst);
  for (; bytes >= 64; bytes -= 64, d += 64) std::memcpy(d, kZero, 64);
  if (bytes >= 32) std::memcpy(d, kZero, 32), bytes -= 32, d += 32;
  if (bytes >= 16) std::memcpy(d, kZero, 16), bytes -= 16, d += 16;
  if (bytes >= 8) std::memcpy(d, kZero, 8), bytes -= 8, d += 8;
  if (bytes >= 4) std::memcpy(d, kZero, 4);
}

// Clips [lo, hi) to the positions i where the gate coordinate c0 + i * s lies in [0, lim).
inline void clip_gate(int64_t c0, int64_t s, int64_t lim, int64_t& lo, int64_t& hi) {
  if (s == 0) {
    if (c0 < 0 || c0 >= lim) hi = 0;
  } else if (s == 1) {
    lo = std::max(lo, -c0);
    hi = std::min(hi, lim - c0);
  } else if (s > 0) {
    lo = std::max(lo, c0 >= 0 ? int64_t(0) : (-c0 + s - 1) / s);
    hi = std::min(hi, c0 >= lim ? int64_t(0) : (lim - c0 + s - 1) / s);
  } else {
    int64_t t = -s;  // c0 - i t in [0, lim)
    lo = std::max(lo, c0 < lim ? int64_t(0) : (c0 - lim + t) / t);
    hi = std::min(hi, c0 < 0 ? int64_t(0) : c0 / t + 1);
  }
}

// Gathers output elements [begin, end) into out[0, end - begin).
template <class E>
void gather_range_t(const GatherArgs& a, int64_t begin, int64_t end, E* out) {
  int r = a.rank;
  int64_t idx[kMaxRank];
  unravel_index(begin, r, a.shape, idx);
  const E* in = reinterpret_cast<const E*>(a.in);
  int64_t inner = a.shape[r - 1], s_in = a.stride[r - 1], cs_in = a.cstride[r - 1];
  // One run of `len` outputs starting at input offset `off` (checked coordinate `c`).
  auto emit = [&](E* o, int64_t off, int64_t c, const int64_t* gc, int64_t len) {
    if (a.ngates > 0 && !a.checked) {
      // Gates are affine along the run: clip it to the valid range [lo, hi), zero the rest.
      int64_t lo = 0, hi = len;
      for (int k = 0; k < a.ngates; ++k) clip_gate(gc[k], a.gstride[k][r - 1], a.glimit[k], lo, hi);
      if (hi <= lo) {
        zero_short(o, size_t(len) * sizeof(E));
        return;
      }
      if (lo > 0) zero_short(o, size_t(lo) * sizeof(E));
      if (s_in == 1) {
        copy_short(o + lo, in + off + lo, size_t(hi - lo) * sizeof(E));
      } else {
        for (int64_t i = lo; i < hi; ++i) o[i] = in[off + i * s_in];
      }
      if (hi < len) zero_short(o + hi, size_t(len - hi) * sizeof(E));
      return;
    }
    if (!a.checked) {
      if (s_in == 1) {
        std::memcpy(o, in + off, size_t(len) * sizeof(E));
      } else {
        for (int64_t i = 0; i < len; ++i) o[i] = in[off + i * s_in];
      }
      return;
    }
    // A wrapped coordinate moves by less than its period per element: wrap it once, then
    // step it with one compare instead of two divisions per element.
    bool stepped = a.wrap && a.climit > 0 && std::abs(cs_in) <= a.climit;
    int64_t cw = stepped ? ((c % a.climit) + a.climit) % a.climit : 0;
    for (int64_t i = 0; i < len; ++i) {
      int64_t ci = c + i * cs_in;
      if (stepped) {
        ci = cw;
        cw += cs_in;
        cw = cw >= a.climit ? cw - a.climit : cw < 0 ? cw + a.climit : cw;
      } else if (a.wrap) {
        ci = ((ci % a.climit) + a.climit) % a.climit;
      }
      bool ok = ci >= 0 && ci < a.climit;
      for (int k = 0; k < a.ngates; ++k) {
        int64_t g = gc[k] + i * a.gstride[k][r - 1];
        ok = ok && g >= 0 && g < a.glimit[k];
      }
      o[i] = ok ? in[off + i * s_in + ci * a.cmul] : E(0);
    }
  };
  for (int64_t pos = begin; pos < end;) {
    int64_t off = a.offset, c = a.c0;
    int64_t gc[kMaxGates];
    for (int k = 0; k < a.ngates; ++k) gc[k] = a.g0[k];
    for (int d = 0; d < r; ++d) {
      off += idx[d] * a.stride[d];
      c += idx[d] * a.cstride[d];
      for (int k = 0; k < a.ngates; ++k) gc[k] += idx[d] * a.gstride[k][d];
    }
    // A whole gated plane of the last two dimensions laid out contiguously in the source (an
    // image channel under a padded convolution window): one copy of the valid block, then
    // zeros for the gated-off rows, columns and the wrap between rows.
    if (a.plane && idx[r - 1] == 0 && idx[r - 2] == 0 && end - pos >= a.plane) {
      int64_t H = a.shape[r - 2], W = a.shape[r - 1];
      int64_t r0 = 0, r1 = H, c0 = 0, c1 = W;
      for (int k = 0; k < a.ngates; ++k) {
        if (a.gstride[k][r - 1] == 0) clip_gate(gc[k], a.gstride[k][r - 2], a.glimit[k], r0, r1);
        else clip_gate(gc[k], a.gstride[k][r - 1], a.glimit[k], c0, c1);
      }
      E* o = out + (pos - begin);
      int64_t sh = a.stride[r - 2], sw = a.stride[r - 1];
      if (r1 <= r0 || c1 <= c0) {
        zero_short(o, size_t(a.plane) * sizeof(E));
      } else if (sw == 1 && sh == W) {
        int64_t first = r0 * W + c0, last = (r1 - 1) * W + c1;
        zero_short(o, size_t(first) * sizeof(E));
        std::memcpy(o + first, in + off + first, size_t(last - first) * sizeof(E));
        zero_short(o + last, size_t(a.plane - last) * sizeof(E));
        if (c0 > 0 || c1 < W)
          for (int64_t row = r0; row + 1 < r1; ++row) zero_short(o + row * W + c1, size_t(W - c1 + c0) * sizeof(E));
      } else {  // strided rows (a strided window): row by row, no per-row index arithmetic
        zero_short(o, size_t(r0 * W) * sizeof(E));
        for (int64_t row = r0; row < r1; ++row) {
          E* d = o + row * W;
          const E* src = in + off + row * sh;
          if (c0 > 0) zero_short(d, size_t(c0) * sizeof(E));
          if (sw == 1) {
            copy_short(d + c0, src + c0, size_t(c1 - c0) * sizeof(E));
          } else {
            for (int64_t i = c0; i < c1; ++i) d[i] = src[i * sw];
          }
          if (c1 < W) zero_short(d + c1, size_t(W - c1) * sizeof(E));
        }
        zero_short(o + r1 * W, size_t((H - r1) * W) * sizeof(E));
      }
      pos += a.plane;
      idx[r - 2] = H;
      for (int d = r - 2; d > 0 && idx[d] >= a.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
      continue;
    }
    // Short innermost runs (an unfold window, say): walk whole rows of the next dimension
    // without recomputing the multi-index for every run.
    if (r >= 2 && inner < 64 && idx[r - 1] == 0 && end - pos >= inner) {
      int64_t rows = std::min(a.shape[r - 2] - idx[r - 2], (end - pos) / inner);
      if (s_in == 0 && !a.checked && a.ngates == 0) {  // each element repeated inner times (an upsample)
        E* o = out + (pos - begin);
        const E* src = in + off;
        int64_t sr = a.stride[r - 2];
        if (inner == 2) {  // a 2x2 pooling window's broadcast: pairs, no fill loop per element
          for (int64_t row = 0; row < rows; ++row) o[2 * row] = o[2 * row + 1] = src[row * sr];
        } else {
          for (int64_t row = 0; row < rows; ++row, o += inner) std::fill(o, o + inner, src[row * sr]);
        }
        // A broadcast dimension above (the window's other axis): the block just written repeats.
        if (r >= 3 && rows == a.shape[r - 2] && a.stride[r - 3] == 0 && idx[r - 3] + 1 < a.shape[r - 3]) {
          int64_t block = rows * inner;
          int64_t reps = std::min(a.shape[r - 3] - idx[r - 3] - 1, (end - pos) / block - 1);
          E* first = out + (pos - begin);
          for (int64_t k = 1; k <= reps; ++k) std::memcpy(first + k * block, first, size_t(block) * sizeof(E));
          pos += reps * block;
          idx[r - 3] += reps;
        }
      } else {
        for (int64_t row = 0; row < rows; ++row) {
          int64_t grow[kMaxGates];
          for (int k = 0; k < a.ngates; ++k) grow[k] = gc[k] + row * a.gstride[k][r - 2];
          emit(out + (pos - begin) + row * inner, off + row * a.stride[r - 2], c + row * a.cstride[r - 2], grow,
               inner);
        }
      }
      pos += rows * inner;
      idx[r - 2] += rows;
      for (int d = r - 2; d > 0 && idx[d] == a.shape[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
      continue;
    }
    int64_t len = std::min(inner - idx[r - 1], end - pos);
    emit(out + (pos - begin), off, c, gc, len);
    pos += len;
    advance_index(len, r, a.shape, idx);
  }
}

void gather_chunk(const void* p, int64_t chunk) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  int64_t begin = chunk * kGatherChunk, end = std::min(a.total, begin + kGatherChunk);
  gather_range(p, begin, end, a.out + begin * a.esize);
}

}  // namespace

void gather_range(const void* args, int64_t begin, int64_t end, void* dst) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(args);
  if (a.esize == 4) gather_range_t<uint32_t>(a, begin, end, static_cast<uint32_t*>(dst));
  else gather_range_t<uint64_t>(a, begin, end, static_cast<uint64_t*>(dst));
}

namespace {
void gather_launch(const void* p, ThreadPool& pool) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  pool.run((a.total + kGatherChunk - 1) / kGatherChunk, gather_chunk, p);
}
}  // namespace

namespace {
// The same gather with its size-1 dimensions dropped and each dimension merged into the one above
// it where every stride (the offset's, the checked coordinate's, every gate's) continues across the
// boundary: the elements, their order and their sources stay the same, the runs get longer. A
// convolution's 1x1 window otherwise ends every layout in size-1 dimensions: runs of one element,
// each with its own multi-index walk (a 1x1 stride-2 convolution's gather took 17 ns an element).
GatherSpec normalized(const GatherSpec& in) {
  if (numel(in.shape) == 0) return in;
  GatherSpec s = in;
  s.shape.clear(), s.stride.clear(), s.cstride.clear();
  for (auto& g : s.gates) g.cstride.clear();
  auto cst = [&](size_t d) { return in.cstride.empty() ? int64_t(0) : in.cstride[d]; };
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] == 1) continue;
    if (!s.shape.empty()) {
      int64_t n = in.shape[d];
      bool merge = s.stride.back() == in.stride[d] * n && s.cstride.back() == cst(d) * n;
      for (size_t k = 0; k < s.gates.size() && merge; ++k)
        merge = s.gates[k].cstride.back() == in.gates[k].cstride[d] * n;
      if (merge) {
        s.shape.back() *= n;
        s.stride.back() = in.stride[d], s.cstride.back() = cst(d);
        for (size_t k = 0; k < s.gates.size(); ++k) s.gates[k].cstride.back() = in.gates[k].cstride[d];
        continue;
      }
    }
    s.shape.push_back(in.shape[d]);
    s.stride.push_back(in.stride[d]);
    s.cstride.push_back(cst(d));
    for (size_t k = 0; k < s.gates.size(); ++k) s.gates[k].cstride.push_back(in.gates[k].cstride[d]);
  }
  if (s.shape.empty() && numel(in.shape) == 1) {  // one element: keep a rank-1 spec
    s.shape = {1}, s.stride = {0}, s.cstride = {0};
    for (auto& g : s.gates) g.cstride = {0};
  }
  return s;
}
}  // namespace

Launch make_gather(LowerCtx& c, const GatherSpec& spec, const void* in, void* out, size_t esize) {
  const GatherSpec s = normalized(spec);
  if (s.shape.size() > size_t(kMaxRank))
    throw Error(std::string(op_name(c.node.op)) + ": rank " + std::to_string(s.shape.size()) +
                " exceeds the gather kernel's limit");
  auto* a = c.args<GatherArgs>();
  a->rank = int(s.shape.size());
  a->total = numel(s.shape);
  for (size_t d = 0; d < s.shape.size(); ++d) {
    a->shape[d] = s.shape[d];
    a->stride[d] = s.stride[d];
    a->cstride[d] = s.checked ? s.cstride[d] : 0;
  }
  if (a->rank == 0) {  // scalar: one element
    a->rank = 1;
    a->shape[0] = 1;
    a->stride[0] = 0;
    a->cstride[0] = 0;
  }
  if (s.gates.size() > size_t(kMaxGates))
    throw Error(std::string(op_name(c.node.op)) + ": " + std::to_string(s.gates.size()) +
                " padding gates exceed the gather kernel's limit");
  a->ngates = int(s.gates.size());
  for (size_t k = 0; k < s.gates.size(); ++k) {
    for (size_t d = 0; d < s.shape.size(); ++d) a->gstride[k][d] = s.gates[k].cstride[d];
    if (s.shape.empty()) a->gstride[k][0] = 0;
    a->g0[k] = s.gates[k].c0;
    a->glimit[k] = s.gates[k].limit;
  }
  a->plane = 0;
  // (A broadcast innermost dimension without gates is a repeat: the row walk below does that.)
  if (a->rank >= 2 && !s.checked && (a->ngates > 0 || (a->stride[a->rank - 1] != 1 && a->stride[a->rank - 1] != 0))) {
    int r = a->rank;
    bool ok = true;
    for (int k = 0; k < a->ngates; ++k) {
      int64_t sh = a->gstride[k][r - 2], sw = a->gstride[k][r - 1];
      // A row gate, or a column gate (of any positive step: a strided window's columns).
      ok = ok && (sw == 0 || (sh == 0 && sw > 0));
    }
    if (ok) a->plane = a->shape[r - 2] * a->shape[r - 1];
  }
  a->offset = s.offset;
  a->checked = s.checked;
  a->wrap = s.wrap;
  a->c0 = s.c0;
  a->climit = s.climit;
  a->cmul = s.cmul;
  a->esize = int64_t(esize);
  a->in = static_cast<const char*>(in);
  a->out = static_cast<char*>(out);
  return {gather_launch, a, c.id};
}

Launch lower_view(LowerCtx& c) {
  const Node& n = c.node;
  const Shape& is = c.in_shape(0);
  auto cs = contiguous_strides(is);
  GatherSpec s;
  s.shape = n.shape;
  s.stride.assign(n.shape.size(), 0);
  s.cstride.assign(n.shape.size(), 0);
  for (size_t d = 0; d < is.size() && d < n.shape.size(); ++d) s.stride[d] = cs[d];
  switch (n.op) {
    case Op::Permute:
      for (size_t d = 0; d < n.shape.size(); ++d)
        s.stride[d] = cs[size_t(normalize_axis(n.attr<attr::Permute>().perm[d], is.size(), "permute", is))];
      break;
    case Op::Expand: {
      size_t lead = n.shape.size() - is.size();
      for (size_t d = 0; d < n.shape.size(); ++d)
        s.stride[d] = d < lead || is[d - lead] == 1 ? 0 : cs[d - lead];
      break;
    }
    default: {
      opdefs::AxisArgs ax = opdefs::axis_args(n, is.size());
      size_t x = size_t(ax.axis);
      if (n.op == Op::Slice) s.offset = ax.a * cs[x];
      if (n.op == Op::Stride) s.stride[x] = cs[x] * ax.a;
      if (n.op == Op::Pad || n.op == Op::Unfold) {
        // Affine offsets plus a zero-padding gate: runs are clipped, not checked per element.
        passes::ViewGate gate{std::vector<int64_t>(n.shape.size(), 0), 0, is[x]};
        gate.cstride[x] = 1;
        if (n.op == Op::Pad) {
          s.offset = -ax.a * cs[x];
          gate.c0 = -ax.a;
        } else {
          opdefs::WindowArgs w = opdefs::window_args(n, is.size());
          s.stride[x] = cs[x] * w.stride;
          s.stride.back() = cs[x] * w.dilation;
          s.offset = -w.center * w.dilation * cs[x];
          gate.cstride[x] = w.stride;
          gate.cstride.back() = w.dilation;
          gate.c0 = -w.center * w.dilation;
        }
        s.gates.push_back(std::move(gate));
        break;
      }
      if (n.op == Op::Shift) {
        s.checked = true;
        s.stride[x] = 0;
        s.cstride[x] = 1;
        s.climit = is[x];
        s.cmul = cs[x];
      }
      if (n.op == Op::Shift) s.wrap = true, s.c0 = is[x] ? ax.a % is[x] : 0;
    }
  }
  return make_gather(c, s, c.in[0], c.out, dtype_size(n.dtype));
}

// ---- fold: out[.., p, ..] = sum_j in[.., q / stride, .., j] over q = p - (j - center) * dilation
// divisible by the stride, j ascending
namespace {
struct FoldArgs {
  int64_t outer, n, inner, k, n_in_slice;  // n_in_slice: input elements per outer slice
  int64_t per_chunk;  // outer slices per task
  // The window positions feeding output position p: entries [first[p], first[p + 1]) of src,
  // each the offset of in[.., q / stride, .., j] within one outer slice, j ascending. The same
  // for every outer slice, so computed once when the plan is built (a division and a modulo per
  // (p, j) had cost more than the additions: 4 ms for a 1x1 stride-2 convolution's gradient).
  const int64_t* first;
  const int64_t* src;
  const void* in;
  void* out;
  bool f64;
};
template <class T>
void fold_chunk_t(const FoldArgs& a, int64_t o) {
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
  const T* base = in + o * a.n_in_slice;
  T* dst = out + o * a.n * a.inner;
  for (int64_t p = 0; p < a.n; ++p) {
    T* d = dst + p * a.inner;
    int64_t e0 = a.first[p], e1 = a.first[p + 1];
    if (a.inner == 1) {  // one element per position: no loop over the inner dimension
      T acc = T(0);
      for (int64_t e = e0; e < e1; ++e) acc += base[a.src[e]];
      d[0] = acc;
      continue;
    }
    for (int64_t i = 0; i < a.inner; ++i) d[i] = T(0);
    for (int64_t e = e0; e < e1; ++e) {
      const T* src = base + a.src[e];
      // One add per element per window position, j ascending: the oracle's order.
      for (int64_t i = 0; i < a.inner; ++i) d[i] += src[i * a.k];
    }
  }
}
// A chunk is a run of outer slices of about 16K outputs (each output is its own sum, so the
// split changes no bits): one task per slice had cost more than a short slice's additions.
void fold_chunk(const void* p, int64_t chunk) {
  const FoldArgs& a = *static_cast<const FoldArgs*>(p);
  for (int64_t o = chunk * a.per_chunk, end = std::min(a.outer, o + a.per_chunk); o < end; ++o)
    a.f64 ? fold_chunk_t<double>(a, o) : fold_chunk_t<float>(a, o);
}
void fold_launch(const void* p, ThreadPool& pool) {
  const FoldArgs& a = *static_cast<const FoldArgs*>(p);
  pool.run((a.outer + a.per_chunk - 1) / a.per_chunk, fold_chunk, p);
}
}  // namespace

FoldTaps fold_taps(const opdefs::WindowArgs& w, int64_t n_out, int64_t n_in) {
  FoldTaps t;
  for (int64_t p = 0; p < n_out; ++p) {
    t.first.push_back(int64_t(t.in.size()));
    for (int64_t j = 0; j < w.window; ++j) {
      int64_t q = p - (j - w.center) * w.dilation;
      if (q < 0 || q % w.stride != 0 || q / w.stride >= n_in) continue;
      t.in.push_back(q / w.stride);
      t.j.push_back(j);
    }
  }
  t.first.push_back(int64_t(t.in.size()));
  return t;
}

Launch lower_fold(LowerCtx& c) {
  if (!c.chain.empty()) return lower_conv_data_grad(c);
  const Node& n = c.node;
  if (!is_float(n.dtype)) throw Error("fold: needs a float tensor");
  opdefs::WindowArgs w = opdefs::window_args(n, n.shape.size());
  auto* a = c.args<FoldArgs>();
  size_t x = size_t(w.axis);
  a->n = n.shape[x];
  int64_t n_in = c.in_shape(0)[x];
  a->outer = 1;
  for (size_t d = 0; d < x; ++d) a->outer *= n.shape[d];
  a->inner = 1;
  for (size_t d = x + 1; d < n.shape.size(); ++d) a->inner *= n.shape[d];
  a->k = w.window;
  a->n_in_slice = n_in * a->inner * a->k;
  a->per_chunk = std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(1, a->n * a->inner));
  FoldTaps taps = fold_taps(w, a->n, n_in);
  auto* first = static_cast<int64_t*>(c.storage.persistent(size_t(a->n + 1) * 8));
  std::copy(taps.first.begin(), taps.first.end(), first);
  auto* tab = static_cast<int64_t*>(c.storage.persistent(std::max<size_t>(taps.in.size(), 1) * 8));
  for (size_t e = 0; e < taps.in.size(); ++e) tab[e] = taps.in[e] * a->inner * a->k + taps.j[e];
  a->first = first;
  a->src = tab;
  a->in = c.in[0];
  a->out = c.out;
  a->f64 = n.dtype == DType::F64;
  return {fold_launch, a, c.id};
}

}  // namespace synoros::kernels
