// Contraction lowering: a two-operand einsum becomes a batched GEMM over merged label groups
// (batch, M, N, K); operands whose labels cannot be merged with their strides are first gathered
// into GEMM layout. Anything else (one operand, labels summed within one operand) runs a direct
// loop nest. Both paths accumulate each output as one chain in ascending contracted index.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "ir/einsum_spec.hpp"
#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/packed_weights.hpp"
#include "kernels/cpu/window_einsum.hpp"
#include "kernels/onednn_conv.hpp"
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
    throw Error("einsum '" + c.node.attr<attr::Einsum>().spec + "': too many labels for the direct kernel");
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
//
// The output's labels are split as P + G1 + G2: a batch prefix P, then G1 (labels of one operand
// only, the GEMM's rows) and G2 (labels of the other operand only, its columns); K are the
// contracted labels, always in the first operand's order, so every formulation sums each output
// in the same order. When the output cannot be split that way it is computed as
// [batch][A-only][B-only] in scratch and gathered into place. An operand whose labels do not
// merge into (rows, K) strides, or that reads through a zero-padding view (pad, unfold), is
// gathered into GEMM layout first -- one batch slice at a time, so the slice stays in cache.

// Stride of `group` merged into one dimension, if its labels (sizes from e) merge.
bool merge_group(const std::string& labels, const std::vector<int64_t>& strides, const EinsumSpec& e,
                 const std::string& group, int64_t& stride) {
  stride = 0;
  bool first = true;
  int64_t expect = 0;
  for (size_t i = group.size(); i-- > 0;) {  // innermost label last
    char l = group[i];
    int64_t sz = e.size[int(l)];
    auto pos = labels.find(l);
    int64_t st = pos == std::string::npos ? 0 : strides[pos];
    if (sz == 1) continue;
    if (first) {
      stride = st;
      first = false;
    } else if (st != expect) {
      return false;
    }
    expect = st * sz;
  }
  return true;
}

int64_t group_size(const EinsumSpec& e, const std::string& g) {
  int64_t s = 1;
  for (char l : g) s *= e.size[int(l)];
  return s;
}

bool has(const std::string& s, char l) { return s.find(l) != std::string::npos; }

std::string only_in(const std::string& labels, const std::string& of) {
  std::string r;
  for (char l : labels)
    if (has(of, l)) r += l;
  return r;
}

// A gather that lays `labels` (with `strides`, gates) out contiguously in the order of `want`.
GatherSpec layout_gather(const std::string& labels, const std::vector<int64_t>& strides,
                         const std::vector<passes::ViewGate>& gates, const std::string& want,
                         const EinsumSpec& e) {
  GatherSpec s;
  for (char l : want) {
    s.shape.push_back(e.size[int(l)]);
    s.stride.push_back(strides[labels.find(l)]);
  }
  s.cstride.assign(s.shape.size(), 0);
  for (const passes::ViewGate& g : gates) {
    passes::ViewGate t{{}, g.c0, g.limit};
    for (char l : want) t.cstride.push_back(g.cstride[labels.find(l)]);
    s.gates.push_back(std::move(t));
  }
  return s;
}

struct Operand {
  const void* ptr = nullptr;
  std::string labels;
  std::vector<int64_t> strides;
  std::vector<passes::ViewGate> gates;
  const Buffer* param = nullptr;
  // Set when gathered slice by slice: the gather, its slice length and the slice buffer.
  const void* gather = nullptr;
  int64_t slice = 0;
  void* buf = nullptr;
  int64_t rs = 0, cs = 0;  // GEMM row and column strides of this operand
};

struct GemmArgs {
  int64_t rows;  // GEMM calls: batch elements x leading-K slices
  GemmShape shape;
  const void* A;
  const void* B;
  void* C;
  // Per call: offsets of A, B, C (elements), the gather slices of A and B, and whether C's chains
  // continue (a later slice of a split K).
  const int64_t* boff;
  const void* gat[2];   // per-slice gathers of A and B (null when read in place)
  int64_t gslice[2];
  void* gbuf[2];
  float* scratch;
  bool f64;
  const GemmProvider* provider;
  Launch post;
  // Many small independent products (no gathered slices, no split K): one task per product on a
  // thread of its own, instead of each product split over the pool (32 products of 128x64x128 had
  // run slower on two threads than on one).
  bool batch_tasks = false;
  // Pinned weight: a parameter B read transposed by a small GEMM is kept laid out as [K][N] and
  // re-laid only when the parameter's version moves.
  const Buffer* pin_src = nullptr;
  const float* pin_from = nullptr;
  float* pinned = nullptr;
  int64_t pin_rs = 0, pin_cs = 0;
  mutable uint64_t pin_seen = ~uint64_t(0);
  // A parameter B the provider reads packed (see packed_weights.hpp); null when none.
  PackedWeight* packs = nullptr;
  mutable const float* packed_b = nullptr;  // this call's packed B, or null
};

constexpr int64_t kRow = 6;

struct SliceJob {
  const void* gather;
  int64_t begin, end;
  char* dst;
  int64_t esize;
};
constexpr int64_t kSliceChunk = 1 << 13;
void slice_chunk(const void* p, int64_t ch) {
  const SliceJob& j = *static_cast<const SliceJob*>(p);
  int64_t b = j.begin + ch * kSliceChunk, e = std::min(j.end, b + kSliceChunk);
  gather_range(j.gather, b, e, j.dst + (b - j.begin) * j.esize);
}

// One product of a batch on the calling thread (see GemmArgs::batch_tasks): the provider's bits
// do not depend on how its work is split, so they are those of a call over the whole pool.
void gemm_batch_task(const void* p, int64_t bi) {
  const GemmArgs& g = *static_cast<const GemmArgs*>(p);
  static thread_local ThreadPool inline_pool(1);
  static thread_local std::vector<float> scratch;
  const size_t need = g.provider->scratch_floats(g.shape) + 16;
  if (scratch.size() < need) scratch.resize(need);
  float* sp = scratch.data();
  while (reinterpret_cast<uintptr_t>(sp) % 64) ++sp;
  const int64_t* off = g.boff + bi * kRow;
  g.provider->run({g.shape, static_cast<const float*>(g.A) + off[0], static_cast<const float*>(g.B) + off[1],
                   static_cast<float*>(g.C) + off[2], sp, false, g.packed_b},
                  inline_pool);
}

void gemm_launch(const void* p, ThreadPool& pool) {
  const GemmArgs& g = *static_cast<const GemmArgs*>(p);
  if (g.pin_src && g.pin_src->version() != g.pin_seen) {
    lay_out_kn(g.pin_from, g.pin_rs, g.pin_cs, g.shape.N, g.shape.K, g.pinned, int(active_isa()));
    g.pin_seen = g.pin_src->version();
  }
  if (g.packs) g.packed_b = packed_weight(*g.packs, *g.provider, g.shape, g.B, pool);
  if (g.batch_tasks && pool.size() > 1 && g.rows >= pool.size()) {
    pool.run(g.rows, gemm_batch_task, p);
    if (g.post.fn) g.post.fn(g.post.args, pool);
    return;
  }
  int64_t es = g.f64 ? 8 : 4;
  int64_t held[2] = {-1, -1};  // the slice each gather buffer holds (a weight: gathered once)
  for (int64_t bi = 0; bi < g.rows; ++bi) {
    const int64_t* off = g.boff + bi * kRow;
    for (int k = 0; k < 2; ++k) {
      if (!g.gat[k] || held[k] == off[3 + k]) continue;
      held[k] = off[3 + k];
      SliceJob j{g.gat[k], off[3 + k] * g.gslice[k], (off[3 + k] + 1) * g.gslice[k], static_cast<char*>(g.gbuf[k]),
                 es};
      pool.run((g.gslice[k] + kSliceChunk - 1) / kSliceChunk, slice_chunk, &j);
    }
    if (g.f64) {
      dgemm(g.shape, static_cast<const double*>(g.A) + off[0], static_cast<const double*>(g.B) + off[1],
            static_cast<double*>(g.C) + off[2], off[5] != 0);
    } else {
      g.provider->run({g.shape, static_cast<const float*>(g.A) + off[0], static_cast<const float*>(g.B) + off[1],
                       static_cast<float*>(g.C) + off[2], g.scratch, off[5] != 0, g.packed_b},
                      pool);
    }
  }
  if (g.post.fn) g.post.fn(g.post.args, pool);
}

// Materialises gated operands (pad/unfold views) contiguously for the direct loop nest.
Launch direct_with_gates(LowerCtx& c, const EinsumSpec& e) {
  Launch pre{};
  size_t es = dtype_size(c.node.dtype);
  for (size_t k = 0; k < e.in.size(); ++k) {
    auto gates = c.in_gate(k);
    if (gates.empty()) continue;
    Shape sh = c.in_shape(k);
    void* t = c.storage.scratch(size_t(numel(sh)) * es);
    Launch l = make_gather(c, layout_gather(e.in[k], c.in_stride(k), gates, e.in[k], e), c.in[k], t, es);
    pre = pre.fn ? sequence(c.storage, pre, l, c.id) : l;
    c.in[k] = t;
    c.in_strides[k] = contiguous_strides(sh);
    c.in_gates[k].clear();
  }
  Launch d = lower_direct(c, e);
  return pre.fn ? sequence(c.storage, pre, d, c.id) : d;
}

// Splits the output labels into batch prefix, rows (operand x only) and columns (the other
// operand only); false when no split with a worthwhile GEMM exists.
bool split_output(const EinsumSpec& e, std::string& pre, std::string& g1, std::string& g2, int& x) {
  const std::string &la = e.in[0], &lb = e.in[1], &lo = e.out;
  for (size_t p = 0; p <= lo.size(); ++p) {
    std::string rest = lo.substr(p);
    bool ok = true;
    for (char l : rest) ok = ok && !(has(la, l) && has(lb, l));
    if (!ok) continue;
    size_t cut = 0;
    while (cut < rest.size() && has(la, rest[cut]) == has(la, rest[0])) ++cut;
    bool two = true;
    for (size_t i = cut; i < rest.size(); ++i) two = two && has(la, rest[i]) != has(la, rest[0]);
    if (!two) continue;
    // A prefix label only one operand has makes the other's batch stride 0: fine when each
    // GEMM stays large; a tiny GEMM per batch element is worse than one GEMM plus a gather, and
    // so is a matrix-vector product per element (attention's probabilities times values written
    // as [b, t, h, d]: 256 times slower per call than the one GEMM over t it replaces).
    std::string prefix = lo.substr(0, p);
    bool broadcast = false;
    for (char l : prefix) broadcast = broadcast || !(has(la, l) && has(lb, l));
    int64_t work = group_size(e, rest);
    for (char l : la)
      if (!has(lo, l)) work *= e.size[int(l)];
    bool vector_calls = cut == rest.size();  // one side of the product is a single row or column
    if (broadcast && (work < 4096 || vector_calls)) return false;
    pre = prefix;
    g1 = rest.substr(0, cut);
    g2 = rest.substr(cut);
    x = rest.empty() || has(la, rest[0]) ? 0 : 1;
    return true;
  }
  return false;
}
}  // namespace

Launch lower_einsum(LowerCtx& c) {
  const Node& n = c.node;
  std::vector<Shape> shapes;
  for (size_t k = 0; k < n.in.size(); ++k) shapes.push_back(c.in_shape(k));
  EinsumSpec e = parse_einsum(n.attr<attr::Einsum>().spec, shapes);
  c.in_strides.resize(n.in.size());
  c.in_gates.resize(n.in.size());
  for (size_t k = 0; k < n.in.size(); ++k)
    if (c.in_strides[k].empty() && !shapes[k].empty()) c.in_strides[k] = contiguous_strides(shapes[k]);
  if (e.in.size() != 2) return direct_with_gates(c, e);
  const std::string &la = e.in[0], &lb = e.in[1], &lo = e.out;
  std::string k;
  for (char l : la) {
    if (!has(lo, l) && has(lb, l)) k += l;
    if (!has(lo, l) && !has(lb, l)) return direct_with_gates(c, e);
  }
  for (char l : lb)
    if (!has(lo, l) && !has(la, l)) return direct_with_gates(c, e);
  // A convolution the engine's direct kernels take (same bits as gather + GEMM, no gather).
  if (std::optional<passes::ConvGeom> m = passes::match_conv(n.dtype, e, read_views(c))) {
    const int v = e.in[0].size() == 6 ? 0 : 1;  // the unfold view's operand
    const float* base = static_cast<const float*>(c.in[size_t(v)]) - c.in_offsets[size_t(v)];
    const auto* other = static_cast<const float*>(c.in[size_t(1 - v)]);
    std::optional<Launch> d = m->kind == passes::ConvKind::BwdWeights ? lower_conv_weight_grad_direct(c, *m, base, other)
                                                                       : lower_conv_direct(c, *m, base, other);
    if (d) return select_conv_lowering(c, e, *d);
  }
  if (std::optional<Launch> w = lower_window_einsum(c, e))  // (fast mode measures oneDNN against the column form)
    return c.kernel == "window-cols" ? select_conv_lowering(c, e, *w) : *w;

  // Output layout: P + G1 + G2 straight into the output, else computed in scratch and gathered.
  std::string P, G1, G2;
  int x = 0;
  bool direct_out = split_output(e, P, G1, G2, x);
  if (!direct_out) {
    P = G1 = G2 = "";
    for (char l : lo) {
      if (has(la, l) && has(lb, l)) P += l;
      else if (has(la, l)) G1 += l;
      else G2 += l;
    }
    x = 0;
  }
  int y = 1 - x;
  size_t es = dtype_size(n.dtype);
  // A large operand that must be gathered, with a long K (a weight gradient over a whole batch of
  // image positions): its leading K label is iterated outside the GEMM, each slice gathered into
  // cache and its GEMM continuing the chains in C -- the bits of one GEMM over the whole K.
  std::string KP;
  {
    int nk = 0;
    for (char l : k) nk += e.size[int(l)] > 1;
    bool big_gather = false;
    const std::string inner[2][2] = {{G1, k}, {k, G2}};
    for (int role = 0; role < 2; ++role) {
      int i = role == 0 ? x : y;
      int64_t rs = 0, cs = 0;
      bool in_place = c.in_gates[size_t(i)].empty() &&
                      merge_group(e.in[size_t(i)], c.in_strides[size_t(i)], e, inner[role][0], rs) &&
                      merge_group(e.in[size_t(i)], c.in_strides[size_t(i)], e, inner[role][1], cs);
      if (!in_place && group_size(e, inner[role][0]) * group_size(e, k) > (int64_t(1) << 18)) big_gather = true;
    }
    if (big_gather && nk >= 2 && e.size[int(k[0])] > 1) {
      KP = k.substr(0, 1);
      k = k.substr(1);
    }
  }
  Operand op[2];
  for (int i = 0; i < 2; ++i) {
    op[i].ptr = c.in[size_t(i)];
    op[i].labels = e.in[size_t(i)];
    op[i].strides = c.in_strides[size_t(i)];
    op[i].gates = c.in_gates[size_t(i)];
    op[i].param = i < int(c.in_param.size()) ? c.in_param[size_t(i)] : nullptr;
  }
  auto* g = c.args<GemmArgs>();
  g->f64 = n.dtype == DType::F64;
  g->provider = nullptr;
  int64_t batch = group_size(e, P), kslices = group_size(e, KP);
  g->rows = batch * kslices;
  g->shape.M = group_size(e, G1);
  g->shape.N = group_size(e, G2);
  g->shape.K = group_size(e, k);  // the K inside one call
  // Rows of operand x are G1 (its GEMM A), of operand y are K (its GEMM B).
  const std::string inner[2][2] = {{G1, k}, {k, G2}};  // [role][row, col]: role 0 = A, 1 = B
  for (int role = 0; role < 2; ++role) {
    Operand& o = op[role == 0 ? x : y];
    const std::string &rows = inner[role][0], &cols = inner[role][1];
    int64_t rs = 0, cs = 0;
    bool in_place = o.gates.empty() && merge_group(o.labels, o.strides, e, rows, rs) &&
                    merge_group(o.labels, o.strides, e, cols, cs);
    if (in_place) {
      o.rs = rs, o.cs = cs;
      continue;
    }
    // Gather one batch slice at a time, laid out so the innermost run is the source's
    // shortest stride (a contiguous image row for an unfolded convolution input).
    // Gather cost per element when a group's innermost label forms the runs: a fixed price per
    // run spread over its length, plus a copy that is cheap only for unit stride. A strided
    // window's 14-wide rows beat its 3-wide contiguous window rows; unit-stride image rows
    // beat everything. A stride of a cache line or more loads a line per element: a 1x1
    // stride-2 convolution's 14-wide strided rows beat its 16 channels a plane apart.
    auto inner_cost = [&](const std::string& grp) {
      for (size_t i = grp.size(); i-- > 0;)
        if (e.size[int(grp[i])] > 1) {
          int64_t st = std::abs(o.strides[o.labels.find(grp[i])]);
          double copy = st == 1 ? 0.1 : st * int64_t(es) < 64 ? 1.0 : 3.0;
          return 20.0 / double(e.size[int(grp[i])]) + copy;
        }
      return 1e30;
    };
    bool col_major = inner_cost(rows) < inner_cost(cols);
    std::string bl = only_in(P + KP, o.labels);
    std::string want = bl + (col_major ? cols + rows : rows + cols);
    GatherSpec spec = layout_gather(o.labels, o.strides, o.gates, want, e);
    Launch gl = make_gather(c, spec, o.ptr, nullptr, es);
    o.gather = gl.args;
    o.slice = group_size(e, rows) * group_size(e, cols);
    o.buf = c.storage.scratch(size_t(std::max<int64_t>(o.slice, 1)) * es);
    o.rs = col_major ? 1 : group_size(e, cols);
    o.cs = col_major ? group_size(e, rows) : 1;
  }
  Operand &A = op[x], &B = op[y];
  // Per GEMM call (batch element x K slice): offsets of A, B, C, the slice index of each
  // gathered operand, and whether the call continues C's chains.
  auto* boff = static_cast<int64_t*>(c.storage.persistent(size_t(std::max<int64_t>(g->rows, 1)) * kRow * 8));
  {
    std::string PK = P + KP;
    std::vector<int64_t> idx(PK.size(), 0);
    for (int64_t r = 0; r < g->rows; ++r) {
      int64_t* off = boff + r * kRow;
      for (int role = 0; role < 2; ++role) {
        const Operand& o = role == 0 ? A : B;
        int64_t s = 0, slice = 0;
        for (size_t d = 0; d < PK.size(); ++d) {
          auto pos = o.labels.find(PK[d]);
          if (pos == std::string::npos) continue;
          s += idx[d] * o.strides[pos];
          slice = slice * e.size[int(PK[d])] + idx[d];
        }
        off[role] = o.gather ? 0 : s;
        off[3 + role] = slice;
      }
      off[2] = (r / kslices) * g->shape.M * g->shape.N;
      off[5] = r % kslices != 0;
      for (size_t d = PK.size(); d-- > 0;) {
        if (++idx[d] < e.size[int(PK[d])]) break;
        idx[d] = 0;
      }
    }
  }
  g->boff = boff;
  g->A = A.gather ? A.buf : A.ptr;
  g->B = B.gather ? B.buf : B.ptr;
  g->gat[0] = A.gather, g->gat[1] = B.gather;
  g->gslice[0] = A.slice, g->gslice[1] = B.slice;
  g->gbuf[0] = A.buf, g->gbuf[1] = B.buf;
  void* C = c.out;
  std::string clabels = P + G1 + G2;
  if (clabels != lo) {
    Shape ws;
    for (char l : clabels) ws.push_back(e.size[int(l)]);
    C = c.storage.scratch(size_t(numel(ws)) * es);
    // Scatter-free write-back: gather the output (labels in `lo` order) from the scratch layout.
    g->post = make_gather(c, layout_gather(clabels, contiguous_strides(ws), {}, lo, e), C, c.out, es);
  }
  g->C = C;
  g->shape.a_rs = A.rs, g->shape.a_cs = A.cs;
  g->shape.b_rs = B.rs, g->shape.b_cs = B.cs;
  g->shape.c_rs = g->shape.N;
  if (g->f64) {
    g->scratch = nullptr;
    c.kernel = "dgemm";
  } else {
    // Pin a transposed parameter B of a small GEMM in [K][N] layout (see GemmArgs).
    bool tiny = g->shape.M * g->shape.N * g->shape.K < (1 << 15);
    bool b_fixed = true;
    for (int64_t r = 0; r < g->rows; ++r) b_fixed = b_fixed && boff[r * kRow + 1] == 0;
    if (B.param && tiny && g->shape.b_cs != 1 && !B.gather && b_fixed && g->shape.K > 0 && g->shape.N > 0) {
      g->pin_src = B.param;
      g->pin_from = static_cast<const float*>(g->B);
      g->pin_rs = g->shape.b_rs;
      g->pin_cs = g->shape.b_cs;
      g->pinned = static_cast<float*>(c.storage.persistent(size_t(g->shape.K * g->shape.N) * 4));
      g->B = g->pinned;
      g->shape.b_rs = g->shape.N;
      g->shape.b_cs = 1;
    }
    Selection sel = select_gemm(g->shape, strict_kernels());
    g->provider = sel.provider;
    if (B.param && !g->pin_src && !B.gather && b_fixed && !c.storage.sizing() && may_keep_derived_copy(B.param)) {
      g->packs = c.storage.own(std::make_unique<PackedWeight>(packed_weight_for(*g->provider, B.param, g->B, g->shape)));
    }
    g->batch_tasks = g->rows >= 2 && kslices == 1 && !A.gather && !B.gather &&
                     g->shape.M * g->shape.N * g->shape.K <= (int64_t(1) << 21);
    g->scratch = static_cast<float*>(c.storage.scratch(sel.provider->scratch_floats(g->shape) * 4 + 64));
    c.kernel = sel.provider->name();
  }
  if (A.gather || B.gather) c.kernel += "+gather";
  if (g->f64) return {gemm_launch, g, c.id};
  return select_conv_lowering(c, e, {gemm_launch, g, c.id});
}

}  // namespace synoros::kernels
