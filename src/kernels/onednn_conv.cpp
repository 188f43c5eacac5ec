// oneDNN's convolution (Debian's libdnnl 2.6, C API; direct or Winograd) as a lowering of a convolution
// contraction. oneDNN wants its own blocked layouts (nChw16c activations, blocked weights), so a
// launch reorders the input in, convolves and reorders the output back, one fixed chunk of images
// per single-threaded call spread over the engine's pool: the chunking depends only on the batch,
// so the bits never depend on the thread count. The blocked weights are kept between runs and
// redone only when the weights change.
#include "synoros/config.hpp"
#include "kernels/onednn_conv.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <utility>

#include "kernels/providers.hpp"
#include "kernels/vendor_gemm.hpp"
#include "oracle/contraction.hpp"

namespace synoros::kernels {

namespace {
// Images per oneDNN call: as many as keep one call's input and output within ~512 KiB (they stay
// in L2 between the reorders and the convolution; measured: 1 image of 32x28x28 -> 64x28x28 is
// as fast as 4 and faster than 8). A divisor of the batch down to half that size is preferred:
// one minibatch size means one primitive and one copy of the blocked weights (Winograd's weight
// transform costs up to ~1 ms a copy). Depends only on the shape, never on the thread count.
int64_t chunk_images(const ConvGeom& g) {
  int64_t per_image = (g.C * g.H * g.W + g.O * g.OH * g.OW) * 4;
  int64_t mb = std::clamp<int64_t>((int64_t(512) << 10) / std::max<int64_t>(per_image, 1), 1, g.N);
  for (int64_t d = mb; 2 * d >= mb; --d)
    if (g.N % d == 0) return d;
  return mb;
}

// SYNOROS_CONV_LOWERING=gemm|onednn-conv|onednn-wino|onednn-bwd forces one lowering (for comparisons);
// unset: measured.
std::string checked_lowering(const std::string& v, const char* from) {
  if (v.empty() || v == "gemm" || v == "onednn-conv" || v == "onednn-wino" || v == "onednn-bwd") return v;
  throw Error(std::string(from) + ": unknown convolution lowering '" + v +
              "' (gemm, onednn-conv, onednn-wino or onednn-bwd)");
}
std::string& forced() {
  static std::string f = config::text("SYNOROS_CONV_LOWERING");
  return f;
}

void ok(dnnl_status_t st, const char* what) {
  if (st != dnnl_success) throw Error(std::string("onednn conv: ") + what + " failed with status " + std::to_string(int(st)));
}

int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// oneDNN runs each call with the calling thread's OpenMP thread count, and picks a primitive's
// work split (a weight gradient's reduction order among them) from the count at creation: both
// must be one, on every thread, before anything is created or run, or the bits would depend on
// which thread created the primitive and what it had run before.
void one_omp_thread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);  // checked every time: others may change it
}

// An owned oneDNN handle, destroyed by its C API's destroy function when the owner goes (also
// when a later step of building a state throws).
template <class T, dnnl_status_t (*Destroy)(T)>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) reset(std::exchange(o.h_, nullptr));
    return *this;
  }
  ~Owned() { reset(); }
  T get() const { return h_; }
  // Where a create call writes the new handle (any old one is destroyed first).
  T* out() {
    reset();
    return &h_;
  }
  explicit operator bool() const { return h_ != nullptr; }
  void reset(T h = nullptr) {
    if (h_) Destroy(h_);
    h_ = h;
  }

 private:
  T h_ = nullptr;
};
using Engine = Owned<dnnl_engine_t, dnnl_engine_destroy>;
using Stream = Owned<dnnl_stream_t, dnnl_stream_destroy>;
using Memory = Owned<dnnl_memory_t, dnnl_memory_destroy>;
using Primitive = Owned<dnnl_primitive_t, dnnl_primitive_destroy>;
using PrimitiveDesc = Owned<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy>;
using Attr = Owned<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy>;

// Everything oneDNN needs for one minibatch size: the convolution, the reorders around it and the
// sizes of the blocked buffers (0 when oneDNN works on the plain layout directly). Operands: the
// image input (src), the second input b (weights forward, dY for the weight gradient) and the
// output (dst forward, dW for the weight gradient).
struct Prims {
  int64_t mb = 0;
  Primitive conv, src_re, b_re, out_re;
  dnnl_memory_desc_t usrc{}, psrc{}, ub{}, pb{}, uout{}, pout{}, pad{};
  int64_t src_bytes = 0, b_bytes = 0, out_bytes = 0, pad_bytes = 0;
};

struct Chunk {
  const Prims* p = nullptr;
  Stream stream;
  Memory usrc, psrc, ub, pb, pout, uout, pad;
  dnnl_memory_t b = nullptr;  // what the convolution reads as its second input (not owned here)
};

struct ConvState {
  ConvGeom g{};
  Engine eng;  // first: destroyed after everything made with it
  Prims full, last;  // last: the remainder chunk when the batch is not a multiple
  int64_t chunks = 0;
  int64_t slots = 1;  // scratch slots: the engine's thread count when compiled, at most one per chunk
  std::vector<Chunk> ch;
  // Forward: the weights, user (plain oihw) and blocked copies per minibatch size, redone when the
  // weights' bytes change (compared with a copy: cheap next to the convolution, and right however
  // the weights were written).
  Memory uw, pw_full, pw_last;
  Stream wstream;
  const float* w_ptr = nullptr;
  std::vector<float> w_copy;
  bool w_valid = false;
  bool plain_w = false;        // the weights [O, C, KW, KH] go through w_plain [O, C, KH, KW]
  // Set for a stride-1 forward convolution run as the backward-data convolution of the
  // transposed problem (see transposed_problem): the forward geometry, whose weights w_plain
  // holds transposed and flipped.
  std::optional<ConvGeom> flipped_from;
  std::vector<float> w_plain;
  // Weight gradient over several chunks: per-chunk partial sums, added in chunk order.
  float* out = nullptr;
  std::vector<float*> partial;
  mutable std::vector<char> failed;  // per chunk, set by the pool thread that ran it

  ConvState(const ConvState&) = delete;
  ConvState& operator=(const ConvState&) = delete;
  ConvState() = default;
};

Primitive make_reorder(const dnnl_memory_desc_t& from, const dnnl_memory_desc_t& to, dnnl_engine_t eng) {
  Primitive prim;
  if (dnnl_memory_desc_equal(&from, &to)) return prim;
  PrimitiveDesc pd;
  ok(dnnl_reorder_primitive_desc_create(pd.out(), &from, eng, &to, eng, nullptr), "reorder descriptor");
  ok(dnnl_primitive_create(prim.out(), pd.get()), "reorder primitive");
  return prim;
}

int64_t blocked_bytes(const dnnl_memory_desc_t& prim, const dnnl_memory_desc_t& user) {
  return dnnl_memory_desc_equal(&prim, &user) ? 0 : int64_t(dnnl_memory_desc_get_size(&prim));
}

// Descriptors and sizes for minibatch mb; the primitives too unless only sizing. The slots: src is
// what each chunk reads (x forward and for the weight gradient, dY for the data gradient), b the
// second input (weights, or dY for the weight gradient), out the result (y, dW or dX).
void init_prims(Prims& p, const ConvGeom& g, int64_t mb, dnnl_engine_t eng, bool create, dnnl_alg_kind_t alg,
                bool plain_w) {
  p.mb = mb;
  bool bww = g.kind == ConvKind::BwdWeights, bwd = g.kind == ConvKind::BwdData;
  dnnl_dims_t src_dims = {mb, g.C, g.H, g.W}, w_dims = {g.O, g.C, g.KH, g.KW}, dst_dims = {mb, g.O, g.OH, g.OW};
  dnnl_dims_t strides = {g.sh, g.sw}, dil = {g.dh - 1, g.dw - 1}, pl = {g.pt, g.pl}, pr = {g.pb, g.pr};
  dnnl_memory_desc_t any_src, any_w, any_dst, usrc, uw, udst;
  ok(dnnl_memory_desc_init_by_tag(&any_src, 4, src_dims, dnnl_f32, dnnl_format_tag_any), "src desc");
  ok(dnnl_memory_desc_init_by_tag(&any_w, 4, w_dims, dnnl_f32, dnnl_format_tag_any), "weights desc");
  ok(dnnl_memory_desc_init_by_tag(&any_dst, 4, dst_dims, dnnl_f32, dnnl_format_tag_any), "dst desc");
  ok(dnnl_memory_desc_init_by_tag(&usrc, 4, src_dims, dnnl_f32, dnnl_nchw), "src desc");
  if (g.kswap && !plain_w) {
    dnnl_dims_t ws = {g.C * g.KH * g.KW, g.KH * g.KW, 1, g.KH};
    ok(dnnl_memory_desc_init_by_strides(&uw, 4, w_dims, dnnl_f32, ws), "weights desc");
  } else {
    ok(dnnl_memory_desc_init_by_tag(&uw, 4, w_dims, dnnl_f32, dnnl_oihw), "weights desc");
  }
  ok(dnnl_memory_desc_init_by_tag(&udst, 4, dst_dims, dnnl_f32, dnnl_nchw), "dst desc");
  Attr attr;
  ok(dnnl_primitive_attr_create(attr.out()), "attributes");
  // A scratchpad per call, in the plan's scratch: calls of one primitive run concurrently.
  dnnl_primitive_attr_set_scratchpad_mode(attr.get(), dnnl_scratchpad_mode_user);
  dnnl_convolution_desc_t fd;
  dnnl_status_t st = dnnl_dilated_convolution_forward_desc_init(
      &fd, g.kind == ConvKind::Forward ? dnnl_forward_inference : dnnl_forward_training, alg,
      &any_src, &any_w, nullptr, &any_dst, strides, dil, pl, pr);
  PrimitiveDesc fpd, bpd;
  if (st == dnnl_success)
    st = dnnl_primitive_desc_create(fpd.out(), &fd, g.kind == ConvKind::Forward ? attr.get() : nullptr, eng, nullptr);
  if (st == dnnl_success && g.kind != ConvKind::Forward) {
    dnnl_convolution_desc_t bd;
    st = bww ? dnnl_dilated_convolution_backward_weights_desc_init(&bd, alg, &any_src, &any_w,
                                                                  nullptr, &any_dst, strides, dil, pl, pr)
             : dnnl_dilated_convolution_backward_data_desc_init(&bd, alg, &any_src, &any_w,
                                                               &any_dst, strides, dil, pl, pr);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(bpd.out(), &bd, attr.get(), eng, fpd.get());
  }
  ok(st, "convolution primitive descriptor");
  dnnl_primitive_desc_t pd = g.kind == ConvKind::Forward ? fpd.get() : bpd.get();
  if (bww) {
    p.usrc = usrc, p.ub = udst, p.uout = uw;
    p.psrc = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    p.pb = *dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    p.pout = *dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0);
  } else if (bwd) {
    p.usrc = udst, p.ub = uw, p.uout = usrc;
    p.psrc = *dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0);
    p.pb = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    p.pout = *dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0);
  } else {
    p.usrc = usrc, p.ub = uw, p.uout = udst;
    p.psrc = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    p.pb = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    p.pout = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  }
  p.pad = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  p.src_bytes = blocked_bytes(p.psrc, p.usrc);
  p.b_bytes = blocked_bytes(p.pb, p.ub);
  p.out_bytes = blocked_bytes(p.pout, p.uout);
  p.pad_bytes = int64_t(dnnl_memory_desc_get_size(&p.pad));
  if (create) {
    ok(dnnl_primitive_create(p.conv.out(), pd), "convolution primitive");
    p.src_re = make_reorder(p.usrc, p.psrc, eng);
    p.b_re = make_reorder(p.ub, p.pb, eng);
    p.out_re = make_reorder(p.pout, p.uout, eng);
  }
}

// Elements per image of what a chunk reads and writes.
int64_t in_per_image(const ConvGeom& g) { return g.kind == ConvKind::BwdData ? g.O * g.OH * g.OW : g.C * g.H * g.W; }
int64_t out_per_image(const ConvGeom& g) { return g.kind == ConvKind::BwdData ? g.C * g.H * g.W : g.O * g.OH * g.OW; }

// A slot's scratch, used by one chunk at a time: blocked src, blocked dY (weight gradient),
// blocked output and the scratchpad.
int64_t slot_bytes(const ConvState& s, const Prims& p) {
  int64_t b = s.g.kind == ConvKind::BwdWeights ? p.b_bytes : 0;
  return align64(p.src_bytes) + align64(b) + align64(p.out_bytes) + align64(p.pad_bytes);
}

// The plain partial dW of each chunk (a weight gradient over several chunks).
int64_t partial_bytes(const ConvState& s) {
  return s.g.kind == ConvKind::BwdWeights && s.chunks > 1 ? align64(s.g.O * s.g.C * s.g.KH * s.g.KW * 4) : 0;
}

// Scratch: `slots` slots (chunk i uses slot i % slots, and the chunks of one slot run one after
// another on one thread, so its blocked buffers stay in cache from chunk to chunk; measured: a
// 5-image 16 -> 16 channel 28x28 Winograd call took 167 us with fresh buffers per chunk, ~100 us
// with reused ones), then the per-chunk partials.
struct Layout {
  int64_t slots, slot_bytes, chunks, partial_bytes, w_bytes;
  int64_t scratch() const { return std::max<int64_t>(slots * slot_bytes + chunks * partial_bytes, 64); }  // per run
  int64_t weights() const { return std::max<int64_t>(w_bytes, 64); }  // kept between runs
};

std::unique_ptr<ConvState> make_state(const ConvGeom& g, bool create, dnnl_alg_kind_t alg,
                                      const ConvGeom* flipped_from = nullptr) {
  one_omp_thread();
  auto s = std::make_unique<ConvState>();
  s->g = g;
  if (flipped_from) s->flipped_from = *flipped_from;
  ok(dnnl_engine_create(s->eng.out(), dnnl_cpu, 0), "engine");
  int64_t mb = chunk_images(g);
  s->chunks = (g.N + mb - 1) / mb;
  s->slots = std::clamp<int64_t>(num_threads(), 1, s->chunks);
  // oneDNN has no reorder from the swapped weights' strides into Winograd's layout: those are
  // transposed to plain [O, C, KH, KW] first (see run_state).
  s->plain_w = (g.kswap && alg == dnnl_convolution_winograd) || s->flipped_from;
  init_prims(s->full, g, mb, s->eng.get(), create, alg, s->plain_w);
  if (g.N % mb != 0) init_prims(s->last, g, g.N % mb, s->eng.get(), create, alg, s->plain_w);
  return s;
}

// oneDNN's two algorithms, each a candidate of its own. Winograd (F(4x4, 3x3) on AVX-512 in
// oneDNN 2.6) does 3x3 stride-1 convolutions in fewer multiplications and with a different
// rounding than the direct sum, which the float64 gate bounds like any other candidate's.
struct Algorithm {
  const char* name;
  dnnl_alg_kind_t alg;
};
// The third, "onednn-bwd", runs a stride-1 forward convolution as oneDNN's backward-data
// convolution of the transposed problem (below): the data gradient of a convolution with few input
// channels, which autodiff writes as a forward convolution over dY with the flipped weights,
// then runs through oneDNN's kernels for that case (LeNet's second layer: 6 channels).
constexpr Algorithm kAlgorithms[] = {{"onednn-conv", dnnl_convolution_direct},
                                     {"onednn-wino", dnnl_convolution_winograd},
                                     {"onednn-bwd", dnnl_convolution_direct}};
constexpr int kNumAlgorithms = 3;

// y = conv(x, K) with stride 1 and dilation 1 is the backward-data convolution whose dY is x,
// whose dX is y and whose weights are W[c, o, i, j] = K[o, c, KH-1-i, KW-1-j], with padding
// K-1-p on each side (the transposed convolution's definition, read backwards).
bool transposable(const ConvGeom& g) {
  return g.kind == ConvKind::Forward && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.pt < g.KH &&
         g.pb < g.KH && g.pl < g.KW && g.pr < g.KW;
}
ConvGeom transposed_problem(const ConvGeom& g) {
  ConvGeom t = g;
  t.kind = ConvKind::BwdData, t.kswap = false;
  t.C = g.O, t.H = g.OH, t.W = g.OW;  // dX: the forward output
  t.O = g.C, t.OH = g.H, t.OW = g.W;  // dY: the forward input
  t.pt = g.KH - 1 - g.pt, t.pb = g.KH - 1 - g.pb, t.pl = g.KW - 1 - g.pl, t.pr = g.KW - 1 - g.pr;
  return t;
}

bool algorithm_applies(const ConvGeom& g, int a) {
  if (a == 2) return transposable(g);
  return a == 0 || (g.KH == 3 && g.KW == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1);
}

// The state of candidate a for the convolution g.
std::unique_ptr<ConvState> make_candidate(const ConvGeom& g, int a, bool create) {
  if (a == 2) return make_state(transposed_problem(g), create, kAlgorithms[a].alg, &g);
  return make_state(g, create, kAlgorithms[a].alg);
}

Layout layout_of(const ConvState& s) {
  int64_t sb = std::max(slot_bytes(s, s.full), s.last.mb ? slot_bytes(s, s.last) : 0);
  int64_t wb = s.g.kind == ConvKind::BwdWeights ? 0 : align64(s.full.b_bytes) + align64(s.last.mb ? s.last.b_bytes : 0);
  return {s.slots, sb, s.chunks, partial_bytes(s), wb};
}

Memory mem(const dnnl_memory_desc_t& md, dnnl_engine_t eng, const void* ptr) {
  Memory m;
  ok(dnnl_memory_create(m.out(), &md, eng, const_cast<void*>(ptr)), "memory");
  return m;
}

// Binds the buffers: the images x [N, C, H, W], the second input b (weights [O, C, KH, KW], or dY
// [N, O, OH, OW]), the output y, `scratch` of layout_of(s).scratch() bytes (needed only during a
// run) and `wstore` of layout_of(s).weights() bytes, which must persist between runs: it holds
// the blocked weights, redone only when the weights change (in a scratch frame other launches
// would overwrite them between runs).
void bind(ConvState& s, const float* x, const float* b, float* y, char* scratch, char* wstore) {
  const ConvGeom& g = s.g;
  Layout lay = layout_of(s);
  bool bww = g.kind == ConvKind::BwdWeights;
  if (!bww) {
    char* wbuf = wstore;
    if (s.plain_w) s.w_plain.assign(size_t(g.O * g.C * g.KH * g.KW), 0.0f);
    dnnl_engine_t eng = s.eng.get();
    s.uw = mem(s.full.ub, eng, s.plain_w ? s.w_plain.data() : b);
    if (s.full.b_bytes) s.pw_full = mem(s.full.pb, eng, wbuf);
    if (s.last.mb && s.last.b_bytes) s.pw_last = mem(s.last.pb, eng, wbuf + align64(s.full.b_bytes));
    ok(dnnl_stream_create(s.wstream.out(), eng, dnnl_stream_default_flags), "stream");
    s.w_ptr = b;
    s.w_copy.assign(size_t(g.O * g.C * g.KH * g.KW), 0.0f);
    s.w_valid = false;
  }
  s.out = y;
  s.failed.assign(size_t(s.chunks), 0);
  s.ch.reserve(size_t(s.chunks));
  for (int64_t i = 0; i < s.chunks; ++i) {
    s.ch.emplace_back();  // owned by s before any handle is made: a failure below leaks nothing
    Chunk& c = s.ch.back();
    bool is_last = s.last.mb && i == s.chunks - 1;
    c.p = is_last ? &s.last : &s.full;
    const Prims& p = *c.p;
    int64_t n0 = i * s.full.mb;
    char* at = scratch + (i % lay.slots) * lay.slot_bytes;
    auto take = [&](int64_t bytes) {
      char* r = at;
      at += align64(bytes);
      return r;
    };
    dnnl_engine_t eng = s.eng.get();
    ok(dnnl_stream_create(c.stream.out(), eng, dnnl_stream_default_flags), "stream");
    c.usrc = mem(p.usrc, eng, x + n0 * in_per_image(g));
    if (p.src_bytes) c.psrc = mem(p.psrc, eng, take(p.src_bytes));
    if (bww) {
      c.ub = mem(p.ub, eng, b + n0 * g.O * g.OH * g.OW);
      if (p.b_bytes) c.pb = mem(p.pb, eng, take(p.b_bytes));
      c.b = c.pb ? c.pb.get() : c.ub.get();
    } else {
      const Memory& pw = is_last ? s.pw_last : s.pw_full;
      c.b = pw ? pw.get() : s.uw.get();
    }
    if (p.out_bytes) c.pout = mem(p.pout, eng, take(p.out_bytes));
    float* uout = y + n0 * out_per_image(g);
    if (bww) {
      uout = y;
      if (s.chunks > 1) {
        uout = reinterpret_cast<float*>(scratch + lay.slots * lay.slot_bytes + i * lay.partial_bytes);
        s.partial.push_back(uout);
      }
    }
    c.uout = mem(p.uout, eng, uout);
    c.pad = mem(p.pad, eng, take(p.pad_bytes));
  }
}

void exec(const Primitive& prim, const Stream& st, std::initializer_list<dnnl_exec_arg_t> args) {
  ok(dnnl_primitive_execute(prim.get(), st.get(), int(args.size()), args.begin()), "execute");
}

void conv_chunk_or_throw(const ConvState& s, int64_t i) {
  const Chunk& c = s.ch[size_t(i)];
  const Prims& pr = *c.p;
  dnnl_memory_t src = c.usrc.get(), out = c.pout ? c.pout.get() : c.uout.get(), pad = c.pad.get();
  if (pr.src_re) {
    exec(pr.src_re, c.stream, {{DNNL_ARG_FROM, c.usrc.get()}, {DNNL_ARG_TO, c.psrc.get()}});
    src = c.psrc.get();
  }
  if (s.g.kind == ConvKind::BwdWeights) {
    if (pr.b_re) exec(pr.b_re, c.stream, {{DNNL_ARG_FROM, c.ub.get()}, {DNNL_ARG_TO, c.pb.get()}});
    exec(pr.conv, c.stream,
         {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, c.b}, {DNNL_ARG_DIFF_WEIGHTS, out}, {DNNL_ARG_SCRATCHPAD, pad}});
  } else if (s.g.kind == ConvKind::BwdData) {
    exec(pr.conv, c.stream,
         {{DNNL_ARG_DIFF_DST, src}, {DNNL_ARG_WEIGHTS, c.b}, {DNNL_ARG_DIFF_SRC, out}, {DNNL_ARG_SCRATCHPAD, pad}});
  } else {
    exec(pr.conv, c.stream,
         {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, c.b}, {DNNL_ARG_DST, out}, {DNNL_ARG_SCRATCHPAD, pad}});
  }
  if (pr.out_re) exec(pr.out_re, c.stream, {{DNNL_ARG_FROM, c.pout.get()}, {DNNL_ARG_TO, c.uout.get()}});
}

// The chunks of slot t, one after another. On a pool thread an exception would end the process:
// a failed chunk is recorded instead and reported by run_state once every chunk has finished.
void conv_slot(const void* p, int64_t t) {
  one_omp_thread();
  const ConvState& s = *static_cast<const ConvState*>(p);
  for (int64_t i = t; i < s.chunks; i += s.slots) {
    try {
      conv_chunk_or_throw(s, i);
    } catch (const std::exception&) {
      s.failed[size_t(i)] = 1;
    }
  }
}

void run_state(ConvState& s, ThreadPool& pool) {
  one_omp_thread();
  size_t wb = s.w_copy.size() * sizeof(float);
  if (s.g.kind != ConvKind::BwdWeights && (!s.w_valid || std::memcmp(s.w_copy.data(), s.w_ptr, wb) != 0)) {
    if (s.flipped_from) {  // W[c, o, i, j] = K[o, c, KH-1-i, KW-1-j], K's window swapped when kswap
      const ConvGeom& f = *s.flipped_from;
      for (int64_t o = 0; o < f.O; ++o)
        for (int64_t c = 0; c < f.C; ++c)
          for (int64_t i = 0; i < f.KH; ++i)
            for (int64_t j = 0; j < f.KW; ++j) {
              int64_t ki = f.KH - 1 - i, kj = f.KW - 1 - j;
              int64_t from = (o * f.C + c) * f.KH * f.KW + (f.kswap ? kj * f.KH + ki : ki * f.KW + kj);
              s.w_plain[size_t(((c * f.O + o) * f.KH + i) * f.KW + j)] = s.w_ptr[from];
            }
    } else if (s.plain_w) {
      const ConvGeom& g = s.g;
      for (int64_t oc = 0; oc < g.O * g.C; ++oc)
        for (int64_t i = 0; i < g.KH; ++i)
          for (int64_t j = 0; j < g.KW; ++j)
            s.w_plain[size_t((oc * g.KH + i) * g.KW + j)] = s.w_ptr[(oc * g.KW + j) * g.KH + i];
    }
    if (s.full.b_re) exec(s.full.b_re, s.wstream, {{DNNL_ARG_FROM, s.uw.get()}, {DNNL_ARG_TO, s.pw_full.get()}});
    if (s.last.mb && s.last.b_re)
      exec(s.last.b_re, s.wstream, {{DNNL_ARG_FROM, s.uw.get()}, {DNNL_ARG_TO, s.pw_last.get()}});
    std::memcpy(s.w_copy.data(), s.w_ptr, wb);
    s.w_valid = true;
  }
  std::fill(s.failed.begin(), s.failed.end(), 0);
  pool.run(s.slots, conv_slot, &s);
  for (int64_t i = 0; i < s.chunks; ++i)
    if (s.failed[size_t(i)]) throw Error("onednn conv: executing chunk " + std::to_string(i) + " failed");
  if (!s.partial.empty()) {  // the weight gradient: chunk partials added in chunk order
    int64_t n = s.g.O * s.g.C * s.g.KH * s.g.KW;
    std::memcpy(s.out, s.partial[0], size_t(n) * 4);
    for (size_t k = 1; k < s.partial.size(); ++k)
      for (int64_t j = 0; j < n; ++j) s.out[j] += s.partial[k][j];
  }
}

struct ConvArgs {
  ConvState* state;
};
void conv_launch(const void* p, ThreadPool& pool) { run_state(*static_cast<const ConvArgs*>(p)->state, pool); }

// Probe data in the engine's 64-byte aligned Buffers, like a plan's (oneDNN's reorders ran 7%
// slower on the 16-byte alignment of a std::vector, enough to lose a close selection).
struct Floats {
  explicit Floats(int64_t n) : buf(std::make_unique<Buffer>(size_t(std::max<int64_t>(n, 1)) * 4)), size(n) {}
  float* data() const { return static_cast<float*>(buf->data()); }
  float& operator[](size_t i) const { return data()[i]; }
  std::unique_ptr<Buffer> buf;
  int64_t size;
};

// One output of the convolution as the oracle's contraction (oracle/contraction.hpp) over the
// probe's data: y[n, o, oh, ow] forward, dW[o, c, i, j] for the weight gradient, dX[n, c, h, w]
// for the data gradient, each with the three labels it sums over. x: the images (dY for the data
// gradient); b: the weights (dY for the weight gradient).
struct ConvContraction {
  std::vector<oracle::Operand> ops;
  int64_t summed[3];
};
ConvContraction contraction(const ConvGeom& g, const float* x, const float* b) {
  using oracle::affine;
  using oracle::axis;
  const int64_t kh = g.kswap ? 1 : g.KW, kw = g.kswap ? g.KH : 1;  // the weights' strides of i and j
  const int64_t wo = g.C * g.KH * g.KW, wc = g.KH * g.KW;
  if (g.kind == ConvKind::BwdWeights) {  // labels o, c, i, j | n, oh, ow
    return {{{x, nullptr, {axis(7, 4, g.C * g.H * g.W), axis(7, 1, g.H * g.W),
                           affine(7, {{5, g.sh}, {2, g.dh}}, -g.pt, 1, g.H, g.W),
                           affine(7, {{6, g.sw}, {3, g.dw}}, -g.pl, 1, g.W, 1)}},
             {b, nullptr, {axis(7, 4, g.O * g.OH * g.OW), axis(7, 0, g.OH * g.OW), axis(7, 5, g.OW), axis(7, 6, 1)}}},
            {g.N, g.OH, g.OW}};
  }
  // labels n, c, h, w | o, i, j: oh = (h + pt - i dh) / sh where that divides
  if (g.kind == ConvKind::BwdData) {
    return {{{x, nullptr, {axis(7, 0, g.O * g.OH * g.OW), axis(7, 4, g.OH * g.OW),
                           affine(7, {{2, 1}, {5, -g.dh}}, g.pt, g.sh, g.OH, g.OW),
                           affine(7, {{3, 1}, {6, -g.dw}}, g.pl, g.sw, g.OW, 1)}},
             {b, nullptr, {axis(7, 4, wo), axis(7, 1, wc), axis(7, 5, kh), axis(7, 6, kw)}}},
            {g.O, g.KH, g.KW}};
  }
  // labels n, o, oh, ow | c, i, j
  return {{{x, nullptr, {axis(7, 0, g.C * g.H * g.W), axis(7, 4, g.H * g.W),
                         affine(7, {{2, g.sh}, {5, g.dh}}, -g.pt, 1, g.H, g.W),
                         affine(7, {{3, g.sw}, {6, g.dw}}, -g.pl, 1, g.W, 1)}},
           {b, nullptr, {axis(7, 1, wo), axis(7, 4, wc), axis(7, 5, kh), axis(7, 6, kw)}}},
          {g.C, g.KH, g.KW}};
}

// Random probe inputs of the convolution's shapes: the candidates are checked and timed on these,
// never on the plan's buffers (running a launch while compiling must not touch the plan).
struct Probe {
  Shape out;
  Floats x, b;
};
Probe make_probe(const ConvGeom& g) {
  Shape out = g.kind == ConvKind::BwdWeights ? Shape{g.O, g.C, g.KH, g.KW}
              : g.kind == ConvKind::BwdData  ? Shape{g.N, g.C, g.H, g.W}
                                             : Shape{g.N, g.O, g.OH, g.OW};
  int64_t dy = g.N * g.O * g.OH * g.OW, w = g.O * g.C * g.KH * g.KW;
  Probe p{out, Floats(g.N * in_per_image(g)), Floats(g.kind == ConvKind::BwdWeights ? dy : w)};
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Floats* f : {&p.x, &p.b})
    for (int64_t i = 0; i < f->size; ++i) (*f)[size_t(i)] = u(rng);
  return p;
}

// Checks the corners and a random sample of the outputs y (of the probe p) against float64: why
// not ("" when it passes) and the worst error as a share of the allowed bound.
Verdict oracle_check(const ConvGeom& g, const Probe& p, const Floats& y, const char* name) {
  std::mt19937 rng(99);
  const ConvContraction c = contraction(g, p.x.data(), p.b.data());
  const double terms = double(c.summed[0] * c.summed[1] * c.summed[2]);
  const char* what = g.kind == ConvKind::BwdWeights ? "dW[" : g.kind == ConvKind::BwdData ? "dX[" : "y[";
  oracle::PointVerdict v;
  for (int k = 0; k < 260; ++k) {
    int64_t at[4], flat = 0;
    for (int d = 0; d < 4; ++d) {
      std::uniform_int_distribution<int64_t> r(0, p.out[size_t(d)] - 1);
      at[d] = k < 2 ? k * (p.out[size_t(d)] - 1) : r(rng);
      flat = flat * p.out[size_t(d)] + at[d];
    }
    std::ostringstream where;
    where << what << at[0] << "," << at[1] << "," << at[2] << "," << at[3] << "]";
    v.check(y[size_t(flat)], oracle::contraction_point(c.ops, at, c.summed), terms, name, where.str());
  }
  return {v.why, v.worst};
}

// The roofline model's work of one convolution (each kind reads two of the three tensors and
// writes the third, with the same products).
double conv_flops(const ConvGeom& g) {
  return 2.0 * double(g.N) * double(g.O) * double(g.OH) * double(g.OW) * double(g.C) * double(g.KH) * double(g.KW);
}
double conv_bytes(const ConvGeom& g) {
  return 4.0 * (double(g.N) * double(g.C) * double(g.H) * double(g.W) + double(g.O) * double(g.C) * double(g.KH * g.KW) +
                double(g.N) * double(g.O) * double(g.OH) * double(g.OW));
}

thread_local bool probing = false;  // lowering the alternative on probe buffers: no conv there

// The candidates' runs on one probe: each algorithm checked against float64, and the
// alternative lowered over the same buffers, all made only when the choice is measured. Each
// timed run prepares the weights again: probes run on copies, with no parameter buffer whose
// version would say the weights are constant (the engine's own Winograd launch transforms a
// parameter's weights once per version outside probes), and Winograd's weight transform costs as
// much as its gain on small images (64 channels at 7x7: ~1 ms against ~0.8 ms saved); constant
// weights may thus pass over Winograd where it would win.
class ProbeRuns {
 public:
  ProbeRuns(const ConvGeom& g, const ProbeLowering& alt) : g_(g), alt_(alt) {}

  // Algorithm a's result on the probe against float64.
  Verdict check(int a) {
    const char* name = kAlgorithms[a].name;
    try {
      const Probe& p = probe();
      Run& r = runs_[size_t(a)];
      r.st = make_candidate(g_, a, true);
      Layout lay = layout_of(*r.st);
      r.scratch = std::make_unique<Buffer>(size_t(lay.scratch()));
      r.wstore = std::make_unique<Buffer>(size_t(lay.weights()));
      r.y = std::make_unique<Floats>(numel(p.out));
      std::fill(r.y->data(), r.y->data() + r.y->size, std::numeric_limits<float>::quiet_NaN());
      bind(*r.st, p.x.data(), p.b.data(), r.y->data(), static_cast<char*>(r.scratch->data()),
           static_cast<char*>(r.wstore->data()));
      run_state(*r.st, default_pool());
      return oracle_check(g_, p, *r.y, name);
    } catch (const Error& err) {
      return std::string(name) + ": failed: " + err.what();
    }
  }
  void run(int a) {
    Run& r = runs_[size_t(a)];
    r.st->w_valid = false;  // the weights blocked (or transformed) again, as after an update
    run_state(*r.st, default_pool());
  }
  // The alternative lowered on the probe (sized first, then for real), before it is timed.
  void prepare_alternative() {
    if (!other_) {
      const Probe& p = probe();
      y_alt_ = std::make_unique<Floats>(numel(p.out));
      auto lower_on = [&](PlanStorage& storage) {
        struct Probing {  // reset even when the lowering throws
          Probing() { probing = true; }
          ~Probing() { probing = false; }
        } guard;
        return alt_(storage, p.x.data(), p.b.data(), y_alt_->data());
      };
      PlanStorage sizing;
      sizing.set_sizing(true);
      sizing.begin_frame(reinterpret_cast<char*>(uintptr_t(1) << 20));  // a placeholder, never dereferenced
      lower_on(sizing);
      frame_ = std::make_unique<Buffer>(std::max<size_t>(sizing.frame_bytes(), 64));
      real_.begin_frame(static_cast<char*>(frame_->data()));
      other_ = lower_on(real_);
    }
  }
  void run_alternative() { other_->fn(other_->args, default_pool()); }

 private:
  struct Run {
    std::unique_ptr<ConvState> st;
    std::unique_ptr<Buffer> scratch, wstore;
    std::unique_ptr<Floats> y;
  };
  const Probe& probe() {
    if (!probe_) probe_ = make_probe(g_);
    return *probe_;
  }
  ConvGeom g_;
  const ProbeLowering& alt_;
  std::optional<Probe> probe_;
  Run runs_[kNumAlgorithms];
  std::unique_ptr<Floats> y_alt_;
  std::unique_ptr<Buffer> frame_;
  PlanStorage real_;
  std::optional<Launch> other_;
};

// `alt`: the alternative oneDNN is timed against, when not the contraction's lowering ("gemm"):
// part of the key before the tail that replays drop, so each alternative's choice replays apart.
std::string key_of(const ConvGeom& g, const std::string& alt = "gemm") {
  std::ostringstream o;
  o << (g.kind == ConvKind::BwdWeights ? "conv2d-dweights" : g.kind == ConvKind::BwdData ? "conv2d-ddata" : "conv2d")
    << " N=" << g.N << " C=" << g.C << " H=" << g.H << " W=" << g.W << " O=" << g.O << " k=" << g.KH << "x" << g.KW
    << (g.kswap ? "T" : "") << " s=" << g.sh << "," << g.sw << " d=" << g.dh << "," << g.dw << " p=" << g.pt << ","
    << g.pl << "," << g.pb << "," << g.pr << " algorithms=direct,winograd,bwd";  // re-measured when the set grows
  if (alt != "gemm") o << " alt=" << alt;
  return tuning_key(o.str(), false);
}

}  // namespace

std::vector<passes::ReadView> read_views(const LowerCtx& c) {
  std::vector<passes::ReadView> out;
  if (c.in_strides.size() != c.node.in.size()) return out;  // no folded views: nothing to match
  for (size_t k = 0; k < c.node.in.size(); ++k) {
    passes::ReadView r;
    r.viewed = true;
    r.shape = c.in_shape(k);
    r.strides = c.in_strides[k];
    if (k < c.in_gates.size()) r.gates = c.in_gates[k];
    if (k < c.in_base_shapes.size()) r.base_shape = c.in_base_shapes[k];
    if (k < c.in_offsets.size()) r.offset = c.in_offsets[k];
    out.push_back(std::move(r));
  }
  return out;
}

void force_conv_lowering(const std::string& name) { forced() = checked_lowering(name, "force_conv_lowering"); }

const std::string& forced_conv_lowering() { return forced(); }

namespace {
// The forced lowering, the probe, strict mode and the instruction-set cap keep the alternative.
bool alternative_only() { return probing || strict_kernels() || active_isa() != best_isa() || forced() == "gemm"; }
}  // namespace

Launch select_onednn(LowerCtx& c, const ConvGeom& g, const float* x, const float* b, Launch alt,
                     const ProbeLowering& alt_on_probe, const std::string& alt_name) {
  if (alternative_only()) return alt;
  // The algorithms oneDNN implements for this geometry.
  std::unique_ptr<ConvState> st[kNumAlgorithms];
  int64_t scratch_bytes = 0;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    if (!algorithm_applies(g, a) || (forced() == "onednn-conv" && a != 0)) continue;
    try {
      st[a] = make_candidate(g, a, !c.storage.sizing());
      scratch_bytes = std::max(scratch_bytes, layout_of(*st[a]).scratch());
    } catch (const Error&) {
      // a geometry this oneDNN does not implement with this algorithm
    }
  }
  // A forced Winograd or transposed lowering takes the direct one where it does not apply.
  for (int only : {1, 2})
    if (forced() == kAlgorithms[only].name) {
      int keep = st[only] ? only : 0;
      for (int a = 0; a < kNumAlgorithms; ++a)
        if (a != keep) st[a].reset();
    }
  // The choice is kept per geometry and alternative (the convolution op's own, or the engine's
  // lowering of the contraction).
  const std::string key = key_of(g, alt_name);
  if (!st[0] && !st[1] && !st[2]) {
    // None applies here: the alternative is the one candidate, and a recorded oneDNN choice for
    // this geometry cannot be honoured (choose says so).
    if (!c.storage.sizing() && forced().empty()) {
      ChooseOptions o;
      o.cached = false;
      choose(key, {{alt_name, "1", nullptr, nullptr}}, o);
    }
    return alt;
  }
  // Every lowering gets the same scratch in both passes, so the frame is the same whichever is chosen.
  char* scratch = static_cast<char*>(c.storage.scratch(size_t(scratch_bytes)));
  if (c.storage.sizing()) return alt;
  // The candidates: each algorithm oneDNN implements here, then (unless one is forced) the
  // alternative lowering, which is the engine's own and needs no check.
  ProbeRuns probe(g, alt_on_probe);
  std::vector<Candidate> cands;
  std::vector<int> algorithm;  // per candidate; -1 for the alternative
  for (int k = 0; k < kNumAlgorithms; ++k)
    if (st[k]) {
      cands.push_back({kAlgorithms[k].name, onednn_version(), [&probe, k] { return probe.check(k); },
                       [&probe, k] { probe.run(k); }});
      algorithm.push_back(k);
    }
  bool measured = forced().empty();
  if (measured) {
    cands.push_back({alt_name, "1",
                     [&probe] {
                       probe.prepare_alternative();  // its lowering (and GEMM selection) not timed
                       return Verdict();
                     },
                     [&probe] { probe.run_alternative(); }});
    algorithm.push_back(-1);
  }
  ChooseOptions o;
  o.replay = o.cached = o.time = measured;
  o.flops = conv_flops(g);
  o.bytes = conv_bytes(g);
  Choice ch;
  try {
    ch = choose(key, cands, o);
  } catch (const UnreplayableChoice&) {
    throw;
  } catch (const Error& err) {  // a probe run failed: the engine's own lowering stands
    if (!measured) throw;
    record_rejection(key, std::string("onednn conv: failed: ") + err.what());
    store_choice(key, alt_name, "1");
    return alt;
  }
  if (!measured && !ch.rejected.empty()) throw Error("onednn conv: failed the float64 oracle: " + ch.rejected[0]);
  int a = ch.index < 0 ? -1 : algorithm[size_t(ch.index)];
  bool replayed = ch.replayed;
  auto unreplayable = [&] { return unreplayable_choice(key, cands[size_t(ch.index)].name, onednn_version()); };
  if (a < 0) return alt;
  char* wstore = static_cast<char*>(c.storage.persistent(size_t(layout_of(*st[a]).weights())));
  try {
    bind(*st[a], x, b, static_cast<float*>(c.out), scratch, wstore);
  } catch (const Error&) {
    if (!forced().empty()) throw;
    if (replayed) throw unreplayable();
    return alt;
  }
  auto* args = c.args<ConvArgs>();
  args->state = c.storage.own(std::move(st[a]));
  c.kernel = kAlgorithms[a].name;
  return {conv_launch, args, c.id};
}

Launch select_conv_lowering(LowerCtx& c, const EinsumSpec& e, Launch gemm_path) {
  if (alternative_only()) return gemm_path;
  std::optional<ConvGeom> m = passes::match_conv(c.node.dtype, e, read_views(c));
  if (!m) return gemm_path;
  int v = m->kind == ConvKind::BwdWeights ? 1 : 0;  // the unfold view's operand
  // The GEMM lowering of this node over probe buffers (the view starts at base + offset).
  ProbeLowering on_probe = [&c, v](PlanStorage& storage, float* x, float* b, float* y) {
    std::vector<void*> in(2);
    in[size_t(v)] = x + c.in_offsets[size_t(v)];
    in[size_t(1 - v)] = b;
    LowerCtx pc{c.g, c.id, c.node, in, y, storage};
    pc.in_param = {nullptr, nullptr};
    pc.in_strides = c.in_strides;
    pc.in_gates = c.in_gates;
    pc.in_base_shapes = c.in_base_shapes;
    pc.in_offsets = c.in_offsets;
    return lower(pc);
  };
  return select_onednn(c, *m, static_cast<const float*>(c.in[size_t(v)]) - c.in_offsets[size_t(v)],
                       static_cast<const float*>(c.in[size_t(1 - v)]), gemm_path, on_probe);
}

}  // namespace synoros::kernels
