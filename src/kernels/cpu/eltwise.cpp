// Elementwise maps with numpy broadcasting, casts and dropout.
#include <algorithm>

#include "core/philox.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/odometer.hpp"
#include "kernels/cpu/line_fn.hpp"

namespace synoros::kernels {

namespace {
constexpr int64_t kMapChunk = 1 << 14;  // elements per work chunk; fixed, independent of threads
}  // namespace

// A single elementwise op is a fused group of one (src/kernels/cpu/fused.cpp).
Launch lower_map(LowerCtx& c) {
  std::vector<ValueId> ext;
  std::vector<void*> ptrs;
  for (size_t k = 0; k < c.node.in.size(); ++k) {
    if (std::find(ext.begin(), ext.end(), c.node.in[k]) != ext.end()) continue;
    ext.push_back(c.node.in[k]);
    ptrs.push_back(c.in[k]);
  }
  return lower_group(c.g, {c.id}, ext, ptrs, c.out, c.storage);
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

// ---- dropout: y = x * (1 / (1 - p)) where philox(seed, i) >= p, else x * 0 (PyTorch's product
// with the mask: a dropped NaN or infinity gives NaN, a dropped finite x the zero of x's sign)
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
    y[i] = x[i] * (philox_uniform(a.seed, uint64_t(i)) >= a.p ? scale : T(0));
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
  *a = {c.in[0], c.out, numel(c.node.shape), float(c.node.attr<attr::Dropout>().p), c.node.attr<attr::Dropout>().seed,
        c.node.dtype == DType::F64};
  return {dropout_launch, a, c.id};
}

}  // namespace synoros::kernels
