// Contraction lowering: a two-operand einsum becomes a batched GEMM over merged label groups
// (batch, M, N, K); operands whose labels cannot be merged with their strides are first gathered
// into GEMM layout. Anything else (one operand, labels summed within one operand) runs a direct
// loop nest. Both paths accumulate each output as one chain in ascending contracted index.
#include <algorithm>
#include <cmath>

#include "ir/einsum_spec.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/providers.hpp"

namespace synoros::kernels {

namespace {
// ---- direct loop nest (general fallback)
constexpr int kMaxLabels = 16;
struct DirectArgs {
  int n_in;
  int n_out_labels, n_red_labels;
  int64_t out_size[kMaxLabels], red_size[kMaxLabels];
  int64_t in_out_stride[2][kMaxLabels], in_red_stride[2][kMaxLabels];
  int64_t total;
  const void* in[2];
  void* out;
  bool f64;
};

template <class T>
void direct_chunk_t(const DirectArgs& a, int64_t o) {
  const T* x = static_cast<const T*>(a.in[0]);
  const T* y = static_cast<const T*>(a.in[1]);
  int64_t base[2] = {0, 0}, rem = o;
  for (int d = a.n_out_labels - 1; d >= 0; --d) {
    int64_t i = rem % a.out_size[d];
    rem /= a.out_size[d];
    for (int k = 0; k < a.n_in; ++k) base[k] += i * a.in_out_stride[k][d];
  }
  int64_t rtotal = 1;
  for (int d = 0; d < a.n_red_labels; ++d) rtotal *= a.red_size[d];
  T acc = T(0);
  for (int64_t r = 0; r < rtotal; ++r) {
    int64_t off[2] = {base[0], base[1]}, rr = r;
    for (int d = a.n_red_labels - 1; d >= 0; --d) {
      int64_t i = rr % a.red_size[d];
      rr /= a.red_size[d];
      for (int k = 0; k < a.n_in; ++k) off[k] += i * a.in_red_stride[k][d];
    }
    acc = a.n_in == 2 ? std::fma(x[off[0]], y[off[1]], acc) : acc + x[off[0]];
  }
  static_cast<T*>(a.out)[o] = acc;
}

void direct_chunk(const void* p, int64_t c) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  int64_t per = 256, o1 = std::min(a.total, (c + 1) * per);
  for (int64_t o = c * per; o < o1; ++o) a.f64 ? direct_chunk_t<double>(a, o) : direct_chunk_t<float>(a, o);
}

void direct_launch(const void* p, ThreadPool& pool) {
  const DirectArgs& a = *static_cast<const DirectArgs*>(p);
  pool.run((a.total + 255) / 256, direct_chunk, p);
}

Launch lower_direct(LowerCtx& c, const EinsumSpec& e) {
  auto* a = c.args<DirectArgs>();
  a->n_in = int(e.in.size());
  a->f64 = c.node.dtype == DType::F64;
  a->out = c.out;
  a->total = numel(c.node.shape);
  std::string red;
  for (char l : e.labels())
    if (e.out.find(l) == std::string::npos) red += l;
  if (e.out.size() > size_t(kMaxLabels) || red.size() > size_t(kMaxLabels))
    throw Error("einsum '" + c.node.attrs.spec + "': too many labels for the direct kernel");
  a->n_out_labels = int(e.out.size());
  a->n_red_labels = int(red.size());
  for (size_t k = 0; k < e.in.size(); ++k) {
    a->in[k] = c.in[k];
    auto cs = c.in_stride(k);
    auto stride_of = [&](char l) -> int64_t {
      auto pos = e.in[k].find(l);
      return pos == std::string::npos ? 0 : cs[pos];
    };
    for (size_t d = 0; d < e.out.size(); ++d) a->in_out_stride[k][d] = stride_of(e.out[d]);
    for (size_t d = 0; d < red.size(); ++d) a->in_red_stride[k][d] = stride_of(red[d]);
  }
  if (e.in.size() == 1) a->in[1] = c.in[0];
  for (size_t d = 0; d < e.out.size(); ++d) a->out_size[d] = e.size[int(e.out[d])];
  for (size_t d = 0; d < red.size(); ++d) a->red_size[d] = e.size[int(red[d])];
  return {direct_launch, a, c.id};
}

// ---- batched GEMM path
struct Grouped {
  int64_t batch_stride, row_stride, col_stride;
};

// Strides of `labels` (an operand's labels with their contiguous strides) viewed as three merged
// groups. Returns false when some group cannot be merged.
bool merge_groups(const std::string& labels, const std::vector<int64_t>& strides,
                  const EinsumSpec& e, const std::string* groups, Grouped& out) {
  int64_t res[3];
  for (int g = 0; g < 3; ++g) {
    int64_t stride = 0;
    bool first = true;
    int64_t expect = 0;
    for (size_t i = groups[g].size(); i-- > 0;) {  // innermost label last
      char l = groups[g][i];
      int64_t sz = e.size[int(l)];
      int64_t st = strides[labels.find(l)];
      if (sz == 1) continue;
      if (first) {
        stride = st;
        expect = st * sz;
        first = false;
      } else {
        if (st != expect) return false;
        expect = st * sz;
      }
    }
    res[g] = stride;
  }
  out = {res[0], res[1], res[2]};
  return true;
}

int64_t group_size(const EinsumSpec& e, const std::string& g) {
  int64_t s = 1;
  for (char l : g) s *= e.size[int(l)];
  return s;
}

struct GemmArgs {
  int64_t batch;
  Grouped a, b, c;
  GemmShape shape;
  const void* A;
  const void* B;
  void* C;
  float* scratch;
  bool f64;
  const GemmProvider* provider;
  Launch pre[2];
  Launch post;
  // Pinned weight: a parameter B read transposed by a small GEMM is kept laid out as [K][N] and
  // re-laid only when the parameter's version moves.
  const Buffer* pin_src = nullptr;
  const float* pin_from = nullptr;
  float* pinned = nullptr;
  int64_t pin_rs = 0, pin_cs = 0;
  mutable uint64_t pin_seen = ~uint64_t(0);
};

void gemm_launch(const void* p, ThreadPool& pool) {
  const GemmArgs& g = *static_cast<const GemmArgs*>(p);
  for (const Launch& l : g.pre)
    if (l.fn) l.fn(l.args, pool);
  if (g.pin_src && g.pin_src->version() != g.pin_seen) {
    for (int64_t n = 0; n < g.shape.N; ++n)
      for (int64_t k = 0; k < g.shape.K; ++k) g.pinned[k * g.shape.N + n] = g.pin_from[k * g.pin_rs + n * g.pin_cs];
    g.pin_seen = g.pin_src->version();
  }
  for (int64_t bi = 0; bi < g.batch; ++bi) {
    if (g.f64) {
      dgemm(g.shape, static_cast<const double*>(g.A) + bi * g.a.batch_stride,
            static_cast<const double*>(g.B) + bi * g.b.batch_stride,
            static_cast<double*>(g.C) + bi * g.c.batch_stride);
    } else {
      g.provider->run({g.shape, static_cast<const float*>(g.A) + bi * g.a.batch_stride,
                       static_cast<const float*>(g.B) + bi * g.b.batch_stride,
                       static_cast<float*>(g.C) + bi * g.c.batch_stride, g.scratch},
                      pool);
    }
  }
  if (g.post.fn) g.post.fn(g.post.args, pool);
}

// A gather that lays `labels` (with `strides`) out contiguously in the order of `want`.
GatherSpec layout_gather(const std::string& labels, const std::vector<int64_t>& strides,
                         const std::string& want, const EinsumSpec& e) {
  GatherSpec s;
  for (char l : want) {
    s.shape.push_back(e.size[int(l)]);
    s.stride.push_back(strides[labels.find(l)]);
  }
  s.cstride.assign(s.shape.size(), 0);
  return s;
}
}  // namespace

Launch lower_einsum(LowerCtx& c) {
  const Node& n = c.node;
  std::vector<Shape> shapes;
  for (size_t k = 0; k < n.in.size(); ++k) shapes.push_back(c.in_shape(k));
  EinsumSpec e = parse_einsum(n.attrs.spec, shapes);
  if (e.in.size() != 2) return lower_direct(c, e);
  const std::string &la = e.in[0], &lb = e.in[1], &lo = e.out;
  auto has = [](const std::string& s, char l) { return s.find(l) != std::string::npos; };
  std::string bat, m, nn, k;
  for (char l : lo) {
    if (has(la, l) && has(lb, l)) bat += l;
    else if (has(la, l)) m += l;
    else nn += l;
  }
  for (char l : la) {
    if (!has(lo, l) && has(lb, l)) k += l;
    if (!has(lo, l) && !has(lb, l)) return lower_direct(c, e);
  }
  for (char l : lb)
    if (!has(lo, l) && !has(la, l)) return lower_direct(c, e);

  size_t es = dtype_size(n.dtype);
  auto* g = c.args<GemmArgs>();
  g->f64 = n.dtype == DType::F64;
  g->provider = nullptr;
  g->batch = group_size(e, bat);
  g->shape.M = group_size(e, m);
  g->shape.N = group_size(e, nn);
  g->shape.K = group_size(e, k);
  const std::string ga[3] = {bat, m, k}, gb[3] = {bat, k, nn}, gc[3] = {bat, m, nn};
  const void* A = c.in[0];
  const void* B = c.in[1];
  auto sa = c.in_stride(0), sb = c.in_stride(1);
  auto so = contiguous_strides(n.shape);
  if (!merge_groups(la, sa, e, ga, g->a)) {
    void* t = c.storage.scratch(size_t(numel(shapes[0])) * es);
    g->pre[0] = make_gather(c, layout_gather(la, sa, bat + m + k, e), A, t, es);
    A = t;
    merge_groups(bat + m + k, contiguous_strides(layout_gather(la, sa, bat + m + k, e).shape), e, ga, g->a);
  }
  if (!merge_groups(lb, sb, e, gb, g->b)) {
    void* t = c.storage.scratch(size_t(numel(shapes[1])) * es);
    g->pre[1] = make_gather(c, layout_gather(lb, sb, bat + k + nn, e), B, t, es);
    B = t;
    merge_groups(bat + k + nn, contiguous_strides(layout_gather(lb, sb, bat + k + nn, e).shape), e, gb, g->b);
  }
  void* C = c.out;
  bool c_ok = merge_groups(lo, so, e, gc, g->c) && (g->shape.N == 1 || g->c.col_stride == 1);
  if (!c_ok) {
    std::string want = bat + m + nn;
    Shape ws;
    for (char l : want) ws.push_back(e.size[int(l)]);
    C = c.storage.scratch(size_t(numel(ws)) * es);
    merge_groups(want, contiguous_strides(ws), e, gc, g->c);
    // Scatter-free write-back: gather the output (labels in `lo` order) from the scratch layout.
    g->post = make_gather(c, layout_gather(want, contiguous_strides(ws), lo, e), C, c.out, es);
  }
  g->A = A, g->B = B, g->C = C;
  g->shape.a_rs = g->a.row_stride, g->shape.a_cs = g->a.col_stride;
  g->shape.b_rs = g->b.row_stride, g->shape.b_cs = g->b.col_stride;
  g->shape.c_rs = g->c.row_stride;
  if (g->f64) {
    g->scratch = nullptr;
    c.kernel = "dgemm";
  } else {
    // Pin a transposed parameter B of a small GEMM in [K][N] layout (see GemmArgs).
    bool tiny = g->shape.M * g->shape.N * g->shape.K < (1 << 15);
    const Buffer* pb = c.in_param.size() > 1 ? c.in_param[1] : nullptr;
    if (pb && tiny && g->shape.b_cs != 1 && g->pre[1].fn == nullptr && (g->batch == 1 || g->b.batch_stride == 0) &&
        g->shape.K > 0 && g->shape.N > 0) {
      g->pin_src = pb;
      g->pin_from = static_cast<const float*>(g->B);
      g->pin_rs = g->shape.b_rs;
      g->pin_cs = g->shape.b_cs;
      g->pinned = static_cast<float*>(c.storage.persistent(size_t(g->shape.K * g->shape.N) * 4));
      g->B = g->pinned;
      g->b.batch_stride = 0;
      g->shape.b_rs = g->shape.N;
      g->shape.b_cs = 1;
    }
    Selection sel = select_gemm(g->shape, strict_kernels());
    g->provider = sel.provider;
    g->scratch = static_cast<float*>(c.storage.scratch(sel.provider->scratch_floats(g->shape) * 4 + 64));
    c.kernel = sel.provider->name();
  }
  return {gemm_launch, g, c.id};
}

}  // namespace synoros::kernels
