// Elementwise maps with numpy broadcasting, casts and dropout.
#include <algorithm>

#include "core/philox.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/odometer.hpp"
#include "kernels/cpu/line_fn.hpp"

namespace synoros::kernels {

namespace {
constexpr int kMaxRank = 8;
constexpr int64_t kMapChunk = 1 << 14;  // elements per work chunk; fixed, independent of threads

struct MapArgs {
  LineFn line;
  int n_in;
  int rank;
  int64_t total;
  int64_t shape[kMaxRank];
  int64_t stride[3][kMaxRank];
  const char* in[3];
  char* out;
  int64_t esize;
};

void map_chunk(const void* p, int64_t chunk) {
  const MapArgs& a = *static_cast<const MapArgs*>(p);
  int64_t begin = chunk * kMapChunk, end = std::min(a.total, begin + kMapChunk);
  int r = a.rank;
  int64_t idx[kMaxRank];
  unravel_index(begin, r, a.shape, idx);
  int64_t inner = a.shape[r - 1];
  int64_t s_inner[3];
  for (int k = 0; k < a.n_in; ++k) s_inner[k] = a.stride[k][r - 1];
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = std::min(inner - idx[r - 1], end - pos);
    const void* src[3];
    for (int k = 0; k < a.n_in; ++k) {
      int64_t off = 0;
      for (int d = 0; d < r; ++d) off += idx[d] * a.stride[k][d];
      src[k] = a.in[k] + off * a.esize;
    }
    a.line(a.out + pos * a.esize, src, s_inner, len);
    pos += len;
    advance_index(len, r, a.shape, idx);
  }
}

void map_launch(const void* p, ThreadPool& pool) {
  const MapArgs& a = *static_cast<const MapArgs*>(p);
  pool.run((a.total + kMapChunk - 1) / kMapChunk, map_chunk, p);
}
}  // namespace

Launch lower_map(LowerCtx& c) {
  const Node& n = c.node;
  DType t = c.in_dtype(c.node.in.size() - 1);
  LineFn line = active_isa() == Isa::Avx2 ? avx2::pick_line(n.op, t) : scalar::pick_line(n.op, t);
  if (!line) throw Error(std::string(op_name(n.op)) + ": no CPU kernel for dtype " + dtype_name(t));
  auto* a = c.args<MapArgs>();
  a->line = line;
  a->n_in = int(n.in.size());
  a->total = numel(n.shape);
  a->out = static_cast<char*>(c.out);
  a->esize = int64_t(dtype_size(n.dtype));
  // Per-input strides against the output shape (0 along broadcast dims), then merge dims that
  // are contiguous for every operand so the inner line is as long as possible.
  size_t R = n.shape.size();
  std::vector<int64_t> shape = n.shape;
  std::vector<std::vector<int64_t>> st(n.in.size(), std::vector<int64_t>(R, 0));
  for (size_t k = 0; k < n.in.size(); ++k) {
    const Shape& is = c.in_shape(k);
    auto cs = contiguous_strides(is);
    size_t lead = R - is.size();
    for (size_t d = 0; d < is.size(); ++d) st[k][lead + d] = is[d] == 1 ? 0 : cs[d];
    a->in[k] = static_cast<const char*>(c.in[k]);
  }
  std::vector<int64_t> ms;
  std::vector<std::vector<int64_t>> mst(n.in.size());
  for (size_t d = 0; d < R; ++d) {
    if (shape[d] == 1) continue;
    bool merge = !ms.empty();
    for (size_t k = 0; k < n.in.size() && merge; ++k)
      merge = mst[k].back() == st[k][d] * shape[d];
    if (merge) {
      ms.back() *= shape[d];
      for (size_t k = 0; k < n.in.size(); ++k) mst[k].back() = st[k][d];
    } else {
      ms.push_back(shape[d]);
      for (size_t k = 0; k < n.in.size(); ++k) mst[k].push_back(st[k][d]);
    }
  }
  if (ms.empty()) {
    ms.push_back(1);
    for (auto& v : mst) v.push_back(0);
  }
  if (ms.size() > size_t(kMaxRank))
    throw Error(std::string(op_name(n.op)) + ": broadcast of rank " + std::to_string(ms.size()) +
                " exceeds the kernel's limit of " + std::to_string(kMaxRank));
  a->rank = int(ms.size());
  for (size_t d = 0; d < ms.size(); ++d) {
    a->shape[d] = ms[d];
    for (size_t k = 0; k < n.in.size(); ++k) a->stride[k][d] = mst[k][d];
  }
  return {map_launch, a, c.id};
}

// ---- cast
namespace {
struct CastArgs {
  const void* in;
  void* out;
  int64_t n;
  DType from, to;
};
template <class S, class D>
void cast_run(const CastArgs& a) {
  const S* s = static_cast<const S*>(a.in);
  D* d = static_cast<D*>(a.out);
  for (int64_t i = 0; i < a.n; ++i) d[i] = static_cast<D>(s[i]);
}
template <class S>
void cast_from(const CastArgs& a) {
  switch (a.to) {
    case DType::F32: cast_run<S, float>(a); break;
    case DType::F64: cast_run<S, double>(a); break;
    case DType::I32: cast_run<S, int32_t>(a); break;
    case DType::I64: cast_run<S, int64_t>(a); break;
  }
}
void cast_launch(const void* p, ThreadPool&) {
  const CastArgs& a = *static_cast<const CastArgs*>(p);
  switch (a.from) {
    case DType::F32: cast_from<float>(a); break;
    case DType::F64: cast_from<double>(a); break;
    case DType::I32: cast_from<int32_t>(a); break;
    case DType::I64: cast_from<int64_t>(a); break;
  }
}
}  // namespace

Launch lower_cast(LowerCtx& c) {
  auto* a = c.args<CastArgs>();
  *a = {c.in[0], c.out, numel(c.node.shape), c.in_dtype(0), c.node.dtype};
  return {cast_launch, a, c.id};
}

// ---- dropout: y = x / (1 - p) where philox(seed, i) >= p, else 0
namespace {
struct DropoutArgs {
  const void* in;
  void* out;
  int64_t n;
  float p;
  uint64_t seed;
  bool f64;
};
template <class T>
void dropout_chunk_t(const DropoutArgs& a, int64_t chunk) {
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  T scale = T(1) / (T(1) - T(a.p));
  int64_t b = chunk * kMapChunk, e = std::min(a.n, b + kMapChunk);
  for (int64_t i = b; i < e; ++i)
    y[i] = philox_uniform(a.seed, uint64_t(i)) >= a.p ? x[i] * scale : T(0);
}
void dropout_chunk(const void* p, int64_t chunk) {
  const DropoutArgs& a = *static_cast<const DropoutArgs*>(p);
  a.f64 ? dropout_chunk_t<double>(a, chunk) : dropout_chunk_t<float>(a, chunk);
}
void dropout_launch(const void* p, ThreadPool& pool) {
  const DropoutArgs& a = *static_cast<const DropoutArgs*>(p);
  pool.run((a.n + kMapChunk - 1) / kMapChunk, dropout_chunk, p);
}
}  // namespace

Launch lower_dropout(LowerCtx& c) {
  auto* a = c.args<DropoutArgs>();
  *a = {c.in[0], c.out, numel(c.node.shape), float(c.node.attrs.scalar), c.node.attrs.seed,
        c.node.dtype == DType::F64};
  return {dropout_launch, a, c.id};
}

}  // namespace synoros::kernels
