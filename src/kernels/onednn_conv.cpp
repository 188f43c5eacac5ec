// oneDNN direct convolution (Debian's libdnnl 2.6, C API) as a lowering of a convolution
// contraction. oneDNN wants its own blocked layouts (nChw16c activations, blocked weights), so a
// launch reorders the input in, convolves and reorders the output back, one fixed chunk of images
// per single-threaded call spread over the engine's pool: the chunking depends only on the batch,
// so the bits never depend on the thread count. The blocked weights are kept between runs and
// redone only when the weights change.
#include "kernels/onednn_conv.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "kernels/providers.hpp"

namespace synoros::kernels {

namespace {
// Images per oneDNN call: as many as keep one call's input and output within ~512 KiB (they stay
// in L2 between the reorders and the convolution; measured: 1 image of 32x28x28 -> 64x28x28 is
// as fast as 4 and faster than 8). Depends only on the shape, never on the thread count.
int64_t chunk_images(const ConvGeom& g) {
  int64_t per_image = (g.C * g.H * g.W + g.O * g.OH * g.OW) * 4;
  return std::clamp<int64_t>((int64_t(512) << 10) / std::max<int64_t>(per_image, 1), 1, g.N);
}

// SYNOROS_CONV_LOWERING=gemm|onednn-conv forces one lowering (for comparisons); unset: measured.
std::string& forced() {
  static std::string f = [] {
    const char* v = std::getenv("SYNOROS_CONV_LOWERING");
    return std::string(v ? v : "");
  }();
  return f;
}

void ok(dnnl_status_t st, const char* what) {
  if (st != dnnl_success) throw Error(std::string("onednn conv: ") + what + " failed with status " + std::to_string(int(st)));
}

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// Everything oneDNN needs for one minibatch size: the convolution, the reorders around it and the
// sizes of the blocked buffers (0 when oneDNN works on the plain layout directly).
struct Prims {
  int64_t mb = 0;
  dnnl_primitive_t conv = nullptr, src_re = nullptr, dst_re = nullptr, w_re = nullptr;
  dnnl_memory_desc_t usrc{}, psrc{}, udst{}, pdst{}, uw{}, pw{}, pad{};
  int64_t src_bytes = 0, dst_bytes = 0, w_bytes = 0, pad_bytes = 0;
  int64_t chunk_bytes() const { return align64(src_bytes) + align64(dst_bytes) + align64(pad_bytes); }
};

struct Chunk {
  Prims* p = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_memory_t usrc = nullptr, psrc = nullptr, pdst = nullptr, udst = nullptr, pad = nullptr, w = nullptr;
};

struct ConvState {
  ConvGeom g{};
  dnnl_engine_t eng = nullptr;
  Prims full, last;  // last: the remainder chunk when the batch is not a multiple
  int64_t chunks = 0;
  std::vector<Chunk> ch;
  // Weights: user (plain oihw) and blocked copies, one per minibatch size that needs its own.
  dnnl_memory_t uw = nullptr, pw_full = nullptr, pw_last = nullptr;
  dnnl_stream_t wstream = nullptr;
  // The blocked weights are redone when the weights' bytes change (compared with a copy: cheap
  // next to the convolution, and right however the weights were written).
  const float* w_ptr = nullptr;
  std::vector<float> w_copy;
  bool w_valid = false;

  ConvState(const ConvState&) = delete;
  ConvState& operator=(const ConvState&) = delete;
  ConvState() = default;
  ~ConvState() {
    for (Chunk& c : ch) {
      for (dnnl_memory_t m : {c.usrc, c.psrc, c.pdst, c.udst, c.pad})
        if (m) dnnl_memory_destroy(m);
      if (c.stream) dnnl_stream_destroy(c.stream);
    }
    for (dnnl_memory_t m : {uw, pw_full, pw_last})
      if (m) dnnl_memory_destroy(m);
    if (wstream) dnnl_stream_destroy(wstream);
    for (Prims* p : {&full, &last})
      for (dnnl_primitive_t q : {p->conv, p->src_re, p->dst_re, p->w_re})
        if (q) dnnl_primitive_destroy(q);
    if (eng) dnnl_engine_destroy(eng);
  }
};

dnnl_primitive_t make_reorder(const dnnl_memory_desc_t& from, const dnnl_memory_desc_t& to, dnnl_engine_t eng) {
  if (dnnl_memory_desc_equal(&from, &to)) return nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  ok(dnnl_reorder_primitive_desc_create(&pd, &from, eng, &to, eng, nullptr), "reorder descriptor");
  dnnl_primitive_t prim = nullptr;
  dnnl_status_t st = dnnl_primitive_create(&prim, pd);
  dnnl_primitive_desc_destroy(pd);
  ok(st, "reorder primitive");
  return prim;
}

// Descriptors and sizes for minibatch mb; the primitives too unless only sizing.
void init_prims(Prims& p, const ConvGeom& g, int64_t mb, dnnl_engine_t eng, bool create) {
  p.mb = mb;
  dnnl_dims_t src_dims = {mb, g.C, g.H, g.W}, w_dims = {g.O, g.C, g.KH, g.KW}, dst_dims = {mb, g.O, g.OH, g.OW};
  dnnl_dims_t strides = {g.sh, g.sw}, dil = {g.dh - 1, g.dw - 1}, pl = {g.pt, g.pl}, pr = {g.pb, g.pr};
  dnnl_memory_desc_t any_src, any_w, any_dst;
  ok(dnnl_memory_desc_init_by_tag(&any_src, 4, src_dims, dnnl_f32, dnnl_format_tag_any), "src desc");
  ok(dnnl_memory_desc_init_by_tag(&any_w, 4, w_dims, dnnl_f32, dnnl_format_tag_any), "weights desc");
  ok(dnnl_memory_desc_init_by_tag(&any_dst, 4, dst_dims, dnnl_f32, dnnl_format_tag_any), "dst desc");
  ok(dnnl_memory_desc_init_by_tag(&p.usrc, 4, src_dims, dnnl_f32, dnnl_nchw), "src desc");
  ok(dnnl_memory_desc_init_by_tag(&p.uw, 4, w_dims, dnnl_f32, dnnl_oihw), "weights desc");
  ok(dnnl_memory_desc_init_by_tag(&p.udst, 4, dst_dims, dnnl_f32, dnnl_nchw), "dst desc");
  dnnl_convolution_desc_t cd;
  ok(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct, &any_src, &any_w,
                                                nullptr, &any_dst, strides, dil, pl, pr),
     "convolution descriptor");
  dnnl_primitive_attr_t attr = nullptr;
  ok(dnnl_primitive_attr_create(&attr), "attributes");
  // A scratchpad per call, in the plan's scratch: calls of one primitive run concurrently.
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_status_t st = dnnl_primitive_desc_create(&pd, &cd, attr, eng, nullptr);
  dnnl_primitive_attr_destroy(attr);
  ok(st, "convolution primitive descriptor");
  p.psrc = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  p.pw = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  p.pdst = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  p.pad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p.src_bytes = dnnl_memory_desc_equal(&p.psrc, &p.usrc) ? 0 : int64_t(dnnl_memory_desc_get_size(&p.psrc));
  p.dst_bytes = dnnl_memory_desc_equal(&p.pdst, &p.udst) ? 0 : int64_t(dnnl_memory_desc_get_size(&p.pdst));
  p.w_bytes = dnnl_memory_desc_equal(&p.pw, &p.uw) ? 0 : int64_t(dnnl_memory_desc_get_size(&p.pw));
  p.pad_bytes = int64_t(dnnl_memory_desc_get_size(&p.pad));
  if (create) {
    st = dnnl_primitive_create(&p.conv, pd);
    dnnl_primitive_desc_destroy(pd);
    ok(st, "convolution primitive");
    p.src_re = make_reorder(p.usrc, p.psrc, eng);
    p.dst_re = make_reorder(p.pdst, p.udst, eng);
    p.w_re = make_reorder(p.uw, p.pw, eng);
  } else {
    dnnl_primitive_desc_destroy(pd);
  }
}

// Sizes: chunks x per-chunk scratch, plus blocked weights.
struct Layout {
  int64_t chunks, chunk_bytes, w_bytes;
  int64_t total() const { return chunks * chunk_bytes + w_bytes; }
};

std::unique_ptr<ConvState> make_state(const ConvGeom& g, bool create) {
  auto s = std::make_unique<ConvState>();
  s->g = g;
  ok(dnnl_engine_create(&s->eng, dnnl_cpu, 0), "engine");
  int64_t mb = chunk_images(g);
  init_prims(s->full, g, mb, s->eng, create);
  s->chunks = (g.N + mb - 1) / mb;
  if (g.N % mb != 0) init_prims(s->last, g, g.N % mb, s->eng, create);
  return s;
}

Layout layout_of(const ConvState& s) {
  int64_t cb = std::max(s.full.chunk_bytes(), s.last.mb ? s.last.chunk_bytes() : 0);
  return {s.chunks, cb, align64(s.full.w_bytes) + align64(s.last.mb ? s.last.w_bytes : 0)};
}

dnnl_memory_t mem(const dnnl_memory_desc_t& md, dnnl_engine_t eng, void* ptr) {
  dnnl_memory_t m = nullptr;
  ok(dnnl_memory_create(&m, &md, eng, ptr), "memory");
  return m;
}

// Binds the buffers: input x [N, C, H, W], weights w [O, C, KH, KW], output y, and `scratch` of
// layout_of(s).total() bytes.
void bind(ConvState& s, const float* x, const float* w, float* y, char* scratch) {
  const ConvGeom& g = s.g;
  Layout lay = layout_of(s);
  char* wbuf = scratch + lay.chunks * lay.chunk_bytes;
  s.uw = mem(s.full.uw, s.eng, const_cast<float*>(w));
  s.w_ptr = w;
  s.w_copy.assign(size_t(g.O * g.C * g.KH * g.KW), 0.0f);
  s.w_valid = false;
  s.pw_full = s.full.w_bytes ? mem(s.full.pw, s.eng, wbuf) : nullptr;
  if (s.last.mb && s.last.w_bytes) s.pw_last = mem(s.last.pw, s.eng, wbuf + align64(s.full.w_bytes));
  ok(dnnl_stream_create(&s.wstream, s.eng, dnnl_stream_default_flags), "stream");
  for (int64_t i = 0; i < s.chunks; ++i) {
    Chunk c;
    bool is_last = s.last.mb && i == s.chunks - 1;
    c.p = is_last ? &s.last : &s.full;
    const Prims& p = *c.p;
    int64_t n0 = i * s.full.mb;
    char* base = scratch + i * lay.chunk_bytes;
    ok(dnnl_stream_create(&c.stream, s.eng, dnnl_stream_default_flags), "stream");
    c.usrc = mem(p.usrc, s.eng, const_cast<float*>(x + n0 * g.C * g.H * g.W));
    c.udst = mem(p.udst, s.eng, y + n0 * g.O * g.OH * g.OW);
    c.psrc = p.src_bytes ? mem(p.psrc, s.eng, base) : nullptr;
    c.pdst = p.dst_bytes ? mem(p.pdst, s.eng, base + align64(p.src_bytes)) : nullptr;
    c.pad = mem(p.pad, s.eng, base + align64(p.src_bytes) + align64(p.dst_bytes));
    c.w = is_last ? (s.pw_last ? s.pw_last : s.uw) : (s.pw_full ? s.pw_full : s.uw);
    s.ch.push_back(c);
  }
}

void exec(dnnl_primitive_t prim, dnnl_stream_t st, std::initializer_list<dnnl_exec_arg_t> args) {
  ok(dnnl_primitive_execute(prim, st, int(args.size()), args.begin()), "execute");
}

void conv_chunk(const void* p, int64_t i) {
  thread_local bool single = (omp_set_num_threads(1), true);  // one OpenMP thread per caller
  (void)single;
  const ConvState& s = *static_cast<const ConvState*>(p);
  const Chunk& c = s.ch[size_t(i)];
  const Prims& pr = *c.p;
  dnnl_memory_t src = c.usrc, dst = c.pdst ? c.pdst : c.udst;
  if (pr.src_re) {
    exec(pr.src_re, c.stream, {{DNNL_ARG_FROM, c.usrc}, {DNNL_ARG_TO, c.psrc}});
    src = c.psrc;
  }
  exec(pr.conv, c.stream,
       {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, c.w}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, c.pad}});
  if (pr.dst_re) exec(pr.dst_re, c.stream, {{DNNL_ARG_FROM, c.pdst}, {DNNL_ARG_TO, c.udst}});
}

void run_state(ConvState& s, ThreadPool& pool) {
  size_t wb = s.w_copy.size() * sizeof(float);
  if (!s.w_valid || std::memcmp(s.w_copy.data(), s.w_ptr, wb) != 0) {  // blocked weights, redone on change
    thread_local bool single = (omp_set_num_threads(1), true);
    (void)single;
    if (s.full.w_re) exec(s.full.w_re, s.wstream, {{DNNL_ARG_FROM, s.uw}, {DNNL_ARG_TO, s.pw_full}});
    if (s.last.mb && s.last.w_re) exec(s.last.w_re, s.wstream, {{DNNL_ARG_FROM, s.uw}, {DNNL_ARG_TO, s.pw_last}});
    std::memcpy(s.w_copy.data(), s.w_ptr, wb);
    s.w_valid = true;
  }
  pool.run(s.chunks, conv_chunk, &s);
}

struct ConvArgs {
  ConvState* state;
};
void conv_launch(const void* p, ThreadPool& pool) { run_state(*static_cast<const ConvArgs*>(p)->state, pool); }

// The float64 value of output (n, o, oh, ow).
double reference(const ConvGeom& g, const std::vector<float>& x, const std::vector<float>& w, int64_t n, int64_t o,
                 int64_t oh, int64_t ow, double& mag) {
  double acc = 0;
  mag = 0;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) {
        int64_t r = oh * g.sh + i * g.dh - g.pt, q = ow * g.sw + j * g.dw - g.pl;
        if (r < 0 || r >= g.H || q < 0 || q >= g.W) continue;
        double t = double(x[size_t(((n * g.C + c) * g.H + r) * g.W + q)]) * double(w[size_t(((o * g.C + c) * g.KH + i) * g.KW + j)]);
        acc += t;
        mag += std::fabs(t);
      }
  return acc;
}

// Random probe inputs of the convolution's shapes: the candidates are checked and timed on these,
// never on the plan's buffers (running a launch while compiling must not touch the plan).
struct Probe {
  std::vector<float> x, w, y;
};
Probe make_probe(const ConvGeom& g) {
  Probe p{std::vector<float>(size_t(g.N * g.C * g.H * g.W)), std::vector<float>(size_t(g.O * g.C * g.KH * g.KW)),
          std::vector<float>(size_t(g.N * g.O * g.OH * g.OW), std::numeric_limits<float>::quiet_NaN())};
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& v : p.x) v = u(rng);
  for (float& v : p.w) v = u(rng);
  return p;
}

// Checks the corners and a random sample of the outputs in p.y against float64; "" or why not.
std::string oracle_check(const ConvGeom& g, const Probe& p) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<int64_t> rn(0, g.N - 1), ro(0, g.O - 1), rh(0, g.OH - 1), rw(0, g.OW - 1);
  double eps = std::numeric_limits<float>::epsilon(), klen = double(g.C * g.KH * g.KW);
  for (int k = 0; k < 260; ++k) {
    int64_t n = k < 4 ? (k & 1) * (g.N - 1) : rn(rng), o = k < 4 ? (k >> 1) * (g.O - 1) : ro(rng);
    int64_t oh = k < 4 ? (k & 1) * (g.OH - 1) : rh(rng), ow = k < 4 ? (k >> 1) * (g.OW - 1) : rw(rng);
    double mag = 0, ref = reference(g, p.x, p.w, n, o, oh, ow, mag);
    double got = p.y[size_t(((n * g.O + o) * g.OH + oh) * g.OW + ow)];
    if (!(std::fabs(got - ref) <= 4 * eps * (std::sqrt(klen) + 2) * mag + 1e-30)) {
      std::ostringstream m;
      m << "onednn-conv: y[" << n << "," << o << "," << oh << "," << ow << "] = " << got << ", float64 says " << ref;
      return m.str();
    }
  }
  return "";
}

thread_local bool probing = false;  // lowering the GEMM path on probe buffers: no conv there

// Interleaved timing: best of a few rounds each (the first round warms up: JIT, packing).
bool first_is_faster(const std::function<void()>& a, const std::function<void()>& b) {
  using Clock = std::chrono::steady_clock;
  double best[2] = {1e300, 1e300};
  auto t_end = Clock::now() + std::chrono::milliseconds(100);
  for (int round = 0; round < 8; ++round) {
    for (int k = 0; k < 2; ++k) {
      auto t0 = Clock::now();
      (k == 0 ? a : b)();
      double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      if (round > 0) best[k] = std::min(best[k], ns);
    }
    if (round >= 3 && Clock::now() > t_end) break;
  }
  return best[0] < best[1];
}

// Runs oneDNN's convolution on a probe, checks it against float64 and times it against the
// GEMM lowering of the same node on the same probe. Returns "" and sets faster, or why it failed.
std::string check_and_time(const LowerCtx& c, const ConvGeom& g, bool time, bool& faster) {
  Probe p = make_probe(g);
  auto st = make_state(g, true);
  Buffer scratch(size_t(std::max<int64_t>(layout_of(*st).total(), 64)));
  bind(*st, p.x.data(), p.w.data(), p.y.data(), static_cast<char*>(scratch.data()));
  ThreadPool& pool = default_pool();
  run_state(*st, pool);
  std::string why = oracle_check(g, p);
  if (!why.empty() || !time) return why;
  // The GEMM lowering of this node, on the probe: sized first, then for real.
  std::vector<float> y2(p.y.size());
  auto lower_on = [&](PlanStorage& storage) {
    LowerCtx pc{c.g, c.id, c.node, {p.x.data() - c.in_offsets[0], p.w.data()}, y2.data(), storage};
    pc.in_param = {nullptr, nullptr};
    pc.in_strides = c.in_strides;
    pc.in_gates = c.in_gates;
    pc.in_base_shapes = c.in_base_shapes;
    pc.in_offsets = c.in_offsets;
    probing = true;
    Launch l = lower(pc);
    probing = false;
    return l;
  };
  PlanStorage sizing;
  sizing.set_sizing(true);
  sizing.begin_frame(reinterpret_cast<char*>(uintptr_t(1) << 20));  // a placeholder, never dereferenced
  lower_on(sizing);
  Buffer frame(std::max<size_t>(sizing.frame_bytes(), 64));
  PlanStorage real;
  real.begin_frame(static_cast<char*>(frame.data()));
  Launch gemm = lower_on(real);
  faster = first_is_faster([&] { run_state(*st, pool); }, [&] { gemm.fn(gemm.args, pool); });
  return "";
}
std::string key_of(const ConvGeom& g) {
  std::ostringstream o;
  o << "conv2d N=" << g.N << " C=" << g.C << " H=" << g.H << " W=" << g.W << " O=" << g.O << " k=" << g.KH << "x"
    << g.KW << " s=" << g.sh << "," << g.sw << " d=" << g.dh << "," << g.dw << " p=" << g.pt << "," << g.pl << ","
    << g.pb << "," << g.pr;
  return tuning_key(o.str(), false);
}

}  // namespace

void force_conv_lowering(const std::string& name) { forced() = name; }

std::string kernel_config() {
  return std::string(isa_name(active_isa())) + (strict_kernels() ? " strict" : "") +
         (forced().empty() ? "" : " conv=" + forced());
}

std::optional<ConvGeom> match_conv(const LowerCtx& c, const EinsumSpec& e) {
  if (c.node.dtype != DType::F32 || e.in.size() != 2 || c.in_base_shapes.empty() || c.in_offsets.empty())
    return std::nullopt;
  const std::string &a = e.in[0], &b = e.in[1], &o = e.out;
  if (a.size() != 6 || b.size() != 4 || o.size() != 4) return std::nullopt;
  if (!(a[0] == o[0] && a[2] == o[2] && a[3] == o[3] && b[0] == o[1] && b[1] == a[1] && b[2] == a[4] && b[3] == a[5]) ||
      a.find(o[1]) != std::string::npos)
    return std::nullopt;
  ConvGeom g{};
  auto sz = [&](char l) { return e.size[int(l)]; };
  g.N = sz(a[0]), g.C = sz(a[1]), g.OH = sz(a[2]), g.OW = sz(a[3]), g.KH = sz(a[4]), g.KW = sz(a[5]), g.O = sz(b[0]);
  if (g.N < 1 || g.C < 1 || g.O < 1 || g.OH < 1 || g.OW < 1) return std::nullopt;
  // Plain weights [O, C, KH, KW]; the input a view of a plain [N, C, H, W] buffer.
  if (c.in_strides.size() < 2 || c.in_strides[1] != contiguous_strides(c.in_shape(1)) ||
      (c.in_gates.size() > 1 && !c.in_gates[1].empty()))
    return std::nullopt;
  const Shape& bs = c.in_base_shapes[0];
  if (bs.size() != 4 || bs[0] != g.N || bs[1] != g.C) return std::nullopt;
  g.H = bs[2], g.W = bs[3];
  const std::vector<int64_t>& s = c.in_strides[0];
  if (s.size() != 6) return std::nullopt;
  if ((g.N > 1 && s[0] != g.C * g.H * g.W) || (g.C > 1 && s[1] != g.H * g.W)) return std::nullopt;
  auto derive = [&](int64_t stride, int64_t size, int64_t unit, int64_t& out) {
    if (size == 1) return out = 1, true;
    if (stride <= 0 || stride % unit != 0) return false;
    out = stride / unit;
    return true;
  };
  if (!derive(s[2], g.OH, g.W, g.sh) || !derive(s[4], g.KH, g.W, g.dh) || !derive(s[3], g.OW, 1, g.sw) ||
      !derive(s[5], g.KW, 1, g.dw))
    return std::nullopt;
  // Zero padding: each gate must concern only the rows (h, kh) or only the columns (w, kw).
  std::vector<const passes::ViewGate*> hg, wg;
  const auto& gates = c.in_gates.empty() ? std::vector<passes::ViewGate>{} : c.in_gates[0];
  for (const passes::ViewGate& gt : gates) {
    if (gt.cstride.size() != 6) return std::nullopt;
    bool rows = gt.cstride[2] || gt.cstride[4], cols = gt.cstride[3] || gt.cstride[5];
    if (gt.cstride[0] || gt.cstride[1] || (rows && cols)) return std::nullopt;
    if (!rows && !cols && !(gt.c0 >= 0 && gt.c0 < gt.limit)) return std::nullopt;  // everything zero
    if (rows) hg.push_back(&gt);
    if (cols) wg.push_back(&gt);
  }
  auto axis_matches = [](const std::vector<const passes::ViewGate*>& gs, int dout, int dk, int64_t nout, int64_t nk,
                         int64_t st, int64_t dil, int64_t pad, int64_t extent) {
    for (int64_t i = 0; i < nout; ++i)
      for (int64_t k = 0; k < nk; ++k) {
        bool view = true;
        for (const passes::ViewGate* gt : gs) {
          int64_t v = gt->c0 + i * gt->cstride[size_t(dout)] + k * gt->cstride[size_t(dk)];
          view = view && v >= 0 && v < gt->limit;
        }
        int64_t r = i * st + k * dil - pad;
        if (view != (r >= 0 && r < extent)) return false;
      }
    return true;
  };
  // The view's offset is -(pt W + pl): try each top padding the window allows.
  int64_t off = c.in_offsets[0];
  bool found = false;
  for (int64_t pt = 0; pt <= (g.KH - 1) * g.dh && !found; ++pt) {
    int64_t pl = -off - pt * g.W;
    if (pl < 0 || pl > (g.KW - 1) * g.dw) continue;
    if (axis_matches(hg, 2, 4, g.OH, g.KH, g.sh, g.dh, pt, g.H) && axis_matches(wg, 3, 5, g.OW, g.KW, g.sw, g.dw, pl, g.W))
      g.pt = pt, g.pl = pl, found = true;
  }
  if (!found) return std::nullopt;
  // Bottom/right padding that makes oneDNN's output size ours (floor division: up to stride - 1
  // unread rows are fine).
  g.pb = (g.OH - 1) * g.sh + (g.KH - 1) * g.dh + 1 - g.H - g.pt;
  g.pr = (g.OW - 1) * g.sw + (g.KW - 1) * g.dw + 1 - g.W - g.pl;
  if (g.pb < 0) g.pb = -g.pb < g.sh ? 0 : g.pb;
  if (g.pr < 0) g.pr = -g.pr < g.sw ? 0 : g.pr;
  if (g.pb < 0 || g.pr < 0) return std::nullopt;
  return g;
}

Launch select_conv_lowering(LowerCtx& c, const EinsumSpec& e, Launch gemm_path) {
  if (probing || strict_kernels() || active_isa() != best_isa() || forced() == "gemm") return gemm_path;
  std::optional<ConvGeom> m = match_conv(c, e);
  if (!m) return gemm_path;
  std::unique_ptr<ConvState> st;
  try {
    st = make_state(*m, !c.storage.sizing());
  } catch (const Error&) {
    return gemm_path;  // a geometry this oneDNN does not implement
  }
  // Both lowerings get scratch in both passes, so the frame is the same whichever is chosen.
  char* scratch = static_cast<char*>(c.storage.scratch(size_t(std::max<int64_t>(layout_of(*st).total(), 64))));
  if (c.storage.sizing()) return gemm_path;
  std::string key = key_of(*m), name, version;
  if (!forced().empty() || !cached_choice(key, name, version)) {
    bool faster = false;
    std::string why;
    try {
      why = check_and_time(c, *m, forced().empty(), faster);
    } catch (const Error& err) {
      why = std::string("onednn-conv: failed: ") + err.what();
    }
    if (!why.empty()) {
      if (!forced().empty()) throw Error("onednn conv: failed the float64 oracle: " + why);
      record_rejection(key, why);
    }
    if (forced().empty()) {
      name = why.empty() && faster ? "onednn-conv" : "gemm";
      version = name == "onednn-conv" ? dnnl_version_string() : "1";
      store_choice(key, name, version);
    } else {
      name = "onednn-conv", version = dnnl_version_string();
    }
  }
  if (name != "onednn-conv" || version != dnnl_version_string()) return gemm_path;
  bind(*st, static_cast<const float*>(c.in[0]) - c.in_offsets[0], static_cast<const float*>(c.in[1]),
       static_cast<float*>(c.out), scratch);
  auto* args = c.args<ConvArgs>();
  args->state = c.storage.own(std::move(st));
  c.kernel = "onednn-conv";
  return {conv_launch, args, c.id};
}

}  // namespace synoros::kernels
