// Ops that walk an axis or index into one: argmax/argmin, cumulative sums and products, the
// product along an axis, gather and its scatter-add gradient. Each output element is computed in
// one fixed order by one thread, so the bits do not depend on the thread count or the instruction
// set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.hpp"

namespace synoros::kernels {

namespace {
constexpr int64_t kColumns = 256;  // columns (positions after the axis) per chunk
constexpr int64_t kPositions =
    1 << 14;  // elements per chunk (gather positions, grouped short lines)

// A tensor seen as [outer, n, inner] around one axis; chunks are (outer, block of kColumns), or
// several outer indices with all their columns.
struct AxisWalk {
  int64_t outer, n, inner, blocks, rows;  // rows: outer indices per chunk (blocks == 1 only)
  int64_t chunks() const { return blocks > 1 ? outer * blocks : (outer + rows - 1) / rows; }
  struct Chunk {
    int64_t o0, o1, c0, c1;  // outer indices [o0, o1), columns [c0, c1)
  };
  Chunk chunk(int64_t k) const {
    if (blocks == 1) return {k * rows, std::min(outer, (k + 1) * rows), 0, inner};
    int64_t c0 = k % blocks * kColumns;
    return {k / blocks, k / blocks + 1, c0, std::min(inner, c0 + kColumns)};
  }
};
// Short lines are grouped, several outer indices to a chunk (about kPositions elements), so a
// chunk is never a handful of elements; each element's order stays that of its own line.
// Runs line(o, c0, c1) for each outer index of chunk k, in order.
template <class Line>
void each_line(const AxisWalk& w, int64_t k, Line line) {
  auto [o0, o1, c0, c1] = w.chunk(k);
  for (int64_t o = o0; o < o1; ++o) line(o, c0, c1);
}
AxisWalk axis_walk(const Shape& s, int axis) {
  AxisWalk w{1, s[size_t(axis)], 1, 1, 1};
  for (int d = 0; d < axis; ++d) w.outer *= s[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) w.inner *= s[d];
  w.blocks = std::max<int64_t>(1, (w.inner + kColumns - 1) / kColumns);
  if (w.blocks == 1)
    w.rows = std::max<int64_t>(1, kPositions / std::max<int64_t>(1, w.n * w.inner));
  return w;
}

// ---- argmax / argmin: per column, the first NaN, else the first extreme.
struct ArgArgs {
  AxisWalk w;
  const void* in;
  int64_t* out;
  DType dtype;
  bool want_min;
};

template <class T>
void arg_line_t(const ArgArgs& a, int64_t o, int64_t c0, int64_t c1) {
  const AxisWalk& w = a.w;
  const T* x = static_cast<const T*>(a.in) + o * w.n * w.inner;
  int64_t* out = a.out + o * w.inner;
  T best[kColumns];
  bool done[kColumns];  // a NaN was found: nothing later can replace it
  for (int64_t c = c0; c < c1; ++c) {
    best[c - c0] = x[c];
    out[c] = 0;
    if constexpr (std::is_floating_point_v<T>)
      done[c - c0] = std::isnan(x[c]);
    else
      done[c - c0] = false;
  }
  for (int64_t j = 1; j < w.n; ++j) {
    const T* row = x + j * w.inner;
    for (int64_t c = c0; c < c1; ++c) {
      T v = row[c];
      if (done[c - c0]) continue;
      bool nan = false;
      if constexpr (std::is_floating_point_v<T>) nan = std::isnan(v);
      if (nan || (a.want_min ? v < best[c - c0] : v > best[c - c0])) {
        best[c - c0] = v;
        out[c] = j;
        done[c - c0] = nan;
      }
    }
  }
}
void arg_chunk(const void* p, int64_t chunk) {
  const ArgArgs& a = *static_cast<const ArgArgs*>(p);
  each_line(a.w, chunk, [&](int64_t o, int64_t c0, int64_t c1) {
    switch (a.dtype) {
      case DType::F32:
        return arg_line_t<float>(a, o, c0, c1);
      case DType::F64:
        return arg_line_t<double>(a, o, c0, c1);
      case DType::I32:
        return arg_line_t<int32_t>(a, o, c0, c1);
      default:
        return arg_line_t<int64_t>(a, o, c0, c1);
    }
  });
}
void arg_launch(const void* p, ThreadPool& pool) {
  const ArgArgs& a = *static_cast<const ArgArgs*>(p);
  pool.run(a.w.chunks(), arg_chunk, p);
}

// ---- cumsum and cumprod_exclusive: running sums (products) in double along the axis (from the
// end when reversed), each rounded once to the output's type (PyTorch's CPU cumsum accumulates
// float32 in double too); the exclusive product writes the product before adding the element in.
// prod: the product along the axis, in double from the first element on, rounded once.
// cumprod: the product with the element in; cumprod_grad(g, x): s_j = g_j + x_(j+1) s_(j+1),
// run from the far end (from the start when reversed), in double.
enum class Scan { Sum, ExclusiveProduct, Product, InclusiveProduct, ProductGrad };
struct CumArgs {
  AxisWalk w;
  const void* in;
  void* out;
  bool f64, reverse;
  Scan scan;
  const void* in2 = nullptr;  // cumprod_grad: x
};

template <class T>
void cum_line_t(const CumArgs& a, int64_t o, int64_t c0, int64_t c1) {
  const AxisWalk& w = a.w;
  const T* x = static_cast<const T*>(a.in) + o * w.n * w.inner;
  T* y = static_cast<T*>(a.out) + o * (a.scan == Scan::Product ? 1 : w.n) * w.inner;
  double acc[kColumns];
  std::fill(acc, acc + (c1 - c0), a.scan == Scan::Sum || a.scan == Scan::ProductGrad ? 0.0 : 1.0);
  const bool backwards = a.scan == Scan::ProductGrad ? !a.reverse : a.reverse;
  const T* xs = a.in2 ? static_cast<const T*>(a.in2) + o * w.n * w.inner : nullptr;
  for (int64_t k = 0; k < w.n; ++k) {
    int64_t j = backwards ? w.n - 1 - k : k;
    const T* row = x + j * w.inner;
    switch (a.scan) {
      case Scan::InclusiveProduct:
        for (int64_t c = c0; c < c1; ++c) y[j * w.inner + c] = T(acc[c - c0] *= double(row[c]));
        break;
      case Scan::ProductGrad: {
        const T* prev = k == 0 ? nullptr : xs + (backwards ? j + 1 : j - 1) * w.inner;  // x beyond j
        for (int64_t c = c0; c < c1; ++c) {
          double s = prev ? double(prev[c]) * acc[c - c0] + double(row[c]) : double(row[c]);
          y[j * w.inner + c] = T(acc[c - c0] = s);
        }
        break;
      }
      case Scan::Sum:
        for (int64_t c = c0; c < c1; ++c) y[j * w.inner + c] = T(acc[c - c0] += double(row[c]));
        break;
      case Scan::ExclusiveProduct:
        for (int64_t c = c0; c < c1; ++c) {
          y[j * w.inner + c] = T(acc[c - c0]);
          acc[c - c0] *= double(row[c]);
        }
        break;
      case Scan::Product:
        for (int64_t c = c0; c < c1; ++c) acc[c - c0] *= double(row[c]);
        break;
    }
  }
  if (a.scan == Scan::Product)
    for (int64_t c = c0; c < c1; ++c) y[c] = T(acc[c - c0]);
}
void cum_chunk(const void* p, int64_t chunk) {
  const CumArgs& a = *static_cast<const CumArgs*>(p);
  each_line(a.w, chunk, [&](int64_t o, int64_t c0, int64_t c1) {
    a.f64 ? cum_line_t<double>(a, o, c0, c1) : cum_line_t<float>(a, o, c0, c1);
  });
}
void cum_launch(const void* p, ThreadPool& pool) {
  const CumArgs& a = *static_cast<const CumArgs*>(p);
  pool.run(a.w.chunks(), cum_chunk, p);
}

// ---- gather and its gradient. Position p of the index (row-major over the index's shape) reads
// the data element with the same coordinates except along the axis, where the index's value is.
constexpr int kMaxRank = 16;
struct GatherArgs {
  int rank, axis;
  int64_t idx_shape[kMaxRank], data_stride[kMaxRank];
  int64_t positions, slab;  // index elements; per slab: index elements before the axis' next value
  int64_t slabs_per_chunk;
  int64_t axis_size, data_numel;
  const void* data;  // gather: the data; gather_grad: the upstream gradient (index-shaped)
  const void* idx;
  void* out;
  bool wide, i64;  // wide: 8-byte elements
};

// The offset of the data element position p of the index reads: p's own coordinates, but the
// index's value along the axis.
int64_t data_offset(const GatherArgs& a, int64_t p) {
  int64_t off = index_at(a.idx, a.i64, p) * a.data_stride[a.axis];
  for (int d = a.rank - 1; d >= 0; --d) {
    int64_t n = a.idx_shape[d], coord = p % n;
    p /= n;
    if (d != a.axis) off += coord * a.data_stride[d];
  }
  return off;
}

// Every index is checked on the calling thread before any chunk runs: a chunk never throws.
void check_indices(const GatherArgs& a, const char* op) {
  for (int64_t p = 0; p < a.positions; ++p) {
    int64_t v = index_at(a.idx, a.i64, p);
    if (v < 0 || v >= a.axis_size) bad_index(op, v, a.axis_size);
  }
}

template <class T>  // T: an unsigned integer of the element's size (gather copies bits)
void gather_chunk_t(const GatherArgs& a, int64_t chunk) {
  const T* x = static_cast<const T*>(a.data);
  T* y = static_cast<T*>(a.out);
  int64_t b = chunk * kPositions, e = std::min(a.positions, b + kPositions);
  for (int64_t p = b; p < e; ++p) y[p] = x[data_offset(a, p)];
}
void gather_chunk(const void* p, int64_t chunk) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  a.wide ? gather_chunk_t<uint64_t>(a, chunk) : gather_chunk_t<uint32_t>(a, chunk);
}
void gather_launch(const void* p, ThreadPool& pool) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  check_indices(a, "gather");
  pool.run((a.positions + kPositions - 1) / kPositions, gather_chunk, p);
}

// The gradient: slab s (one combination of the index's coordinates before the axis) adds into
// the data elements with those leading coordinates only, its positions in ascending order, so
// slabs run in parallel (several to a chunk) and every sum has one order.
template <class T>
void gather_grad_chunk_t(const GatherArgs& a, int64_t chunk) {
  const T* g = static_cast<const T*>(a.data);
  T* out = static_cast<T*>(a.out);
  int64_t b = chunk * a.slabs_per_chunk * a.slab,
          e = std::min(a.positions, b + a.slabs_per_chunk * a.slab);
  for (int64_t p = b; p < e; ++p) out[data_offset(a, p)] += g[p];
}
void gather_grad_chunk(const void* p, int64_t chunk) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  a.wide ? gather_grad_chunk_t<double>(a, chunk) : gather_grad_chunk_t<float>(a, chunk);
}
void gather_grad_launch(const void* p, ThreadPool& pool) {
  const GatherArgs& a = *static_cast<const GatherArgs*>(p);
  check_indices(a, "gather_grad");
  std::memset(a.out, 0, size_t(a.data_numel) * (a.wide ? 8 : 4));
  if (a.slab == 0) return;
  int64_t per = a.slabs_per_chunk * a.slab;
  pool.run((a.positions + per - 1) / per, gather_grad_chunk, p);
}

GatherArgs* gather_args(LowerCtx& c, const Shape& data, const void* values) {
  auto* a = c.args<GatherArgs>();
  const Shape& idx = c.in_shape(1);
  if (idx.size() > size_t(kMaxRank))
    throw Error(std::string(op_name(c.node.op)) + ": rank above 16");
  a->rank = int(idx.size());
  const int64_t axis = c.node.op == Op::GatherGrad ? c.node.attr<attr::GatherGrad>().axis : c.node.attr<attr::Axis>().axis;
  a->axis = normalize_axis(axis, data.size(), op_name(c.node.op), data);
  std::vector<int64_t> st = contiguous_strides(data);
  a->positions = numel(idx);
  a->slab = 1;
  for (int d = 0; d < a->rank; ++d) {
    a->idx_shape[d] = idx[size_t(d)];
    a->data_stride[d] = st[size_t(d)];
    if (d >= a->axis) a->slab *= idx[size_t(d)];
  }
  a->axis_size = data[size_t(a->axis)];
  a->data_numel = numel(data);
  a->data = values;
  a->idx = c.in[1];
  a->out = c.out;
  a->wide = dtype_size(c.node.dtype) == 8;
  a->i64 = c.in_dtype(1) == DType::I64;
  a->slabs_per_chunk = std::max<int64_t>(1, kPositions / std::max<int64_t>(1, a->slab));
  return a;
}
}  // namespace

Launch lower_argmax(LowerCtx& c) {
  auto* a = c.args<ArgArgs>();
  const Shape& s = c.in_shape(0);
  const auto& at = c.node.attr<attr::ArgMax>();
  int axis = normalize_axis(at.axis, s.size(), "argmax", s);
  *a = {axis_walk(s, axis), c.in[0], static_cast<int64_t*>(c.out), c.in_dtype(0), at.min};
  return {arg_launch, a, c.id};
}

Launch lower_cumsum(LowerCtx& c) {
  auto* a = c.args<CumArgs>();
  const Shape& s = c.in_shape(0);
  const auto& at = c.node.attr<attr::Scan>();
  int axis = normalize_axis(at.axis, s.size(), op_name(c.node.op), s);
  Scan scan = c.node.op == Op::CumprodExclusive ? Scan::ExclusiveProduct
              : c.node.op == Op::Cumprod        ? Scan::InclusiveProduct
              : c.node.op == Op::CumprodGrad    ? Scan::ProductGrad
                                                : Scan::Sum;
  *a = {axis_walk(s, axis), c.in[0], c.out, c.node.dtype == DType::F64, at.reverse, scan,
        scan == Scan::ProductGrad ? c.in[1] : nullptr};
  return {cum_launch, a, c.id};
}
Launch lower_cumprod_grad(LowerCtx& c) { return lower_cumsum(c); }

Launch lower_prod(LowerCtx& c) {
  auto* a = c.args<CumArgs>();
  const Shape& s = c.in_shape(0);
  int axis = normalize_axis(c.node.attr<attr::Axis>().axis, s.size(), "prod", s);
  *a = {axis_walk(s, axis), c.in[0], c.out, c.node.dtype == DType::F64, false, Scan::Product};
  return {cum_launch, a, c.id};
}

Launch lower_gather(LowerCtx& c) {
  return {gather_launch, gather_args(c, c.in_shape(0), c.in[0]), c.id};
}
Launch lower_gather_grad(LowerCtx& c) {
  return {gather_grad_launch, gather_args(c, c.node.shape, c.in[0]), c.id};
}

}  // namespace synoros::kernels
