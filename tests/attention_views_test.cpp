// Attention reads q, k, v, o and g in place through the slice, reshape and permute views that
// split a projection into heads (no copies launched), with the bits it gives contiguous operands.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <functional>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/kernel_api.hpp"
#include "passes/views.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

std::vector<uint8_t> output_bytes(Plan& p, const std::vector<ValueId>& outs) {
  std::vector<uint8_t> bytes;
  for (ValueId o : outs) {
    HostTensor v = p.read(o);
    auto* b = static_cast<const uint8_t*>(v.buffer->data());
    bytes.insert(bytes.end(), b, b + v.bytes());
  }
  return bytes;
}

// Heads [B, H, T, D] of columns [c0, c0 + H D) of x [B, T, W], as the graph's views and on the host.
ValueId heads_view(Graph& g, ValueId x, int64_t c0, int64_t H, int64_t D) {
  const Shape s = g.shape(x);  // a copy: adding nodes may move the graph's
  ValueId sl = g.add(Op::Slice, {x}, attr::Slice{2, c0, c0 + H * D});
  ValueId r = g.add(Op::Reshape, {sl}, attr::Target{{s[0], s[1], H, D}});
  return g.add(Op::Permute, {r}, attr::Permute{{0, 2, 1, 3}});
}
HostTensor heads_host(const HostTensor& x, int64_t c0, int64_t H, int64_t D) {
  const int64_t B = x.shape[0], T = x.shape[1], W = x.shape[2];
  HostTensor out(x.dtype, {B, H, T, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) out.set(((b * H + h) * T + t) * D + d, x.get((b * T + t) * W + c0 + h * D + d));
  return out;
}

struct Case {
  int64_t B, H, Tq, Tk, D;
  bool causal;
  DType dt;
  int64_t offset = -1;     // causal at this offset, given as a view (-1: none)
  bool grad_only = false;  // the gradient alone, o an input (it then computes the lse itself)
};

// Restores the thread count however the test ends.
struct ThreadsScope {
  int saved = num_threads();
  ~ThreadsScope() { set_num_threads(saved); }
};

// Attention and its gradient with q from xq [B, Tq, H D], k and v from kv [B, Tk, 2 H D], g from
// gy [B, Tq, H D] and (grad_only) o from xo [B, Tq, H D] (views, or contiguous copies made on the
// host); the offset as the one element of a slice of an i64 [1, 3] (always a view, which the plan
// must copy out, as an attention reads rows only). The outputs' bytes and the kernels launched.
std::pair<std::vector<uint8_t>, std::vector<std::string>> run(const Case& c, bool views) {
  const int64_t C = c.H * c.D;
  const HostTensor xq = testing::random_tensor({c.dt, {c.B, c.Tq, C}, -3, 3}, 31);
  const HostTensor kv = testing::random_tensor({c.dt, {c.B, c.Tk, 2 * C}, -3, 3}, 32);
  const HostTensor gy = testing::random_tensor({c.dt, {c.B, c.Tq, C}}, 33);
  const HostTensor xo = testing::random_tensor({c.dt, {c.B, c.Tq, C}}, 34);
  HostTensor pos(DType::I64, {1, 3});
  for (int64_t i = 0; i < 3; ++i) pos.set(i, double(c.offset + i - 1));
  Graph g;
  const attr::Attention at{c.causal, 0.25};
  std::vector<std::pair<ValueId, HostTensor>> inputs;
  ValueId q, k, v, go, o = kNoValue;
  if (views) {
    ValueId xi = g.input(c.dt, xq.shape, "xq"), kvi = g.input(c.dt, kv.shape, "kv"), gi = g.input(c.dt, gy.shape, "gy");
    inputs = {{xi, xq}, {kvi, kv}, {gi, gy}};
    q = heads_view(g, xi, 0, c.H, c.D);
    k = heads_view(g, kvi, 0, c.H, c.D);
    v = heads_view(g, kvi, C, c.H, c.D);
    go = heads_view(g, gi, 0, c.H, c.D);
    if (c.grad_only) {
      ValueId oi = g.input(c.dt, xo.shape, "xo");
      inputs.emplace_back(oi, xo);
      o = heads_view(g, oi, 0, c.H, c.D);
    }
  } else {
    const HostTensor hq = heads_host(xq, 0, c.H, c.D), hk = heads_host(kv, 0, c.H, c.D),
                     hv = heads_host(kv, C, c.H, c.D), hg = heads_host(gy, 0, c.H, c.D);
    q = g.input(c.dt, hq.shape, "q"), k = g.input(c.dt, hk.shape, "k"), v = g.input(c.dt, hv.shape, "v");
    go = g.input(c.dt, hg.shape, "g");
    inputs = {{q, hq}, {k, hk}, {v, hv}, {go, hg}};
    if (c.grad_only) {
      const HostTensor ho = heads_host(xo, 0, c.H, c.D);
      o = g.input(c.dt, ho.shape, "o");
      inputs.emplace_back(o, ho);
    }
  }
  std::vector<ValueId> in{q, k, v};
  ValueId off = kNoValue;
  if (c.offset >= 0) {
    ValueId pi = g.input(DType::I64, pos.shape, "pos");
    inputs.emplace_back(pi, pos);
    off = g.add(Op::Slice, {pi}, attr::Slice{1, 1, 2});
    in.push_back(off);
  }
  std::vector<ValueId> outs;
  if (!c.grad_only) o = g.add(Op::Attention, in, at), outs.push_back(o);
  std::vector<ValueId> gin{q, k, v, o, go};
  if (off != kNoValue) gin.push_back(off);
  outs.push_back(g.add(Op::AttentionGrad, gin, at));
  Plan p(g, outs);
  for (const auto& [id, t] : inputs) p.set_input(id, t);
  p.run();
  std::vector<std::string> kernels;
  for (const LaunchInfo& li : p.launch_info()) kernels.push_back(li.kernel);
  return {output_bytes(p, outs), kernels};
}

// Every case on every instruction set at 1 and 3 threads against scalar contiguous operands.
void check(const std::vector<Case>& cases) {
  ThreadsScope restore;
  for (const Case& c : cases) {
    set_num_threads(1);
    std::vector<uint8_t> ref;
    {
      testing::IsaScope scalar(kernels::Isa::Scalar);
      ref = run(c, false).first;
    }
    for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (int(isa) > int(kernels::best_isa())) continue;
      testing::IsaScope scope(isa);
      for (int threads : {1, 3}) {
        set_num_threads(threads);
        auto [bytes, kernels] = run(c, true);
        const std::string where = std::string(kernels::isa_name(isa)) + " threads=" + std::to_string(threads) +
                                  " Tq=" + std::to_string(c.Tq) + " Tk=" + std::to_string(c.Tk);
        EXPECT_EQ(bytes, ref) << where;
        // The views are folded into the attention launches, nothing is copied but the offset.
        std::vector<std::string> expected;
        if (c.offset >= 0) expected.push_back("slice");
        if (!c.grad_only) expected.push_back("attention");
        for (const std::string& kname : kernels)
          if (kname.rfind("attention-grad", 0) == 0) expected.push_back(kname);
        EXPECT_EQ(kernels, expected) << where;
        EXPECT_EQ(kernels.size(), size_t(1 + !c.grad_only + (c.offset >= 0))) << where;
      }
    }
  }
}

// Causal and not, several query and key blocks with short last ones, a few queries over many keys
// (the forward's split tasks), float64.
TEST(AttentionViews, ReadsHeadsInPlaceWithTheBitsOfContiguousOperands) {
  check({{2, 3, 130, 130, 24, true, DType::F32},
         {2, 3, 70, 130, 24, false, DType::F32},
         {3, 2, 3, 600, 16, false, DType::F32},
         {2, 2, 65, 65, 8, true, DType::F64}});
}

// One query at an offset (a decoding step: keys read in place, not transposed) and the gradient
// alone with o a view (its own lse), both with dS stored and recomputed.
TEST(AttentionViews, DecodingStepsAndTheGradientAloneReadViews) {
  const size_t saved = kernels::attention_store_limit;
  for (size_t limit : {saved, size_t(0)}) {
    kernels::attention_store_limit = limit;
    check({{2, 3, 1, 300, 16, true, DType::F32, 200},
           {2, 2, 130, 70, 24, false, DType::F32, -1, true},
           {1, 2, 70, 130, 8, true, DType::F32, 40, true}});
  }
  kernels::attention_store_limit = saved;
}

// Causal attention over `qkv`, and again with operand `slot` computed by `view` from `source`
// (a view the attention cannot read in place, equal to qkv[slot]): the same bytes, and one more
// launch, the copy, before the attention.
void expect_view_copied_with_same_bits(const std::array<HostTensor, 3>& qkv, size_t slot, const HostTensor& source,
                                       const std::function<ValueId(Graph&, ValueId)>& view) {
  auto run_with = [&](bool viewed) {
    Graph g;
    std::array<ValueId, 3> in{}, args{};
    const char* names[3] = {"q", "k", "v"};
    for (size_t i = 0; i < 3; ++i) {
      const bool from_view = viewed && i == slot;
      in[i] = g.input(DType::F32, from_view ? source.shape : qkv[i].shape, names[i]);
      args[i] = from_view ? view(g, in[i]) : in[i];
    }
    ValueId o = g.add(Op::Attention, {args[0], args[1], args[2]}, attr::Attention{true, 0.25});
    Plan p(g, {o});
    for (size_t i = 0; i < 3; ++i) p.set_input(in[i], viewed && i == slot ? source : qkv[i]);
    p.run();
    return std::make_pair(output_bytes(p, {o}), p.launch_info().size());
  };
  const auto [ref, n_ref] = run_with(false);
  const auto [bytes, n] = run_with(true);
  EXPECT_EQ(bytes, ref);
  EXPECT_EQ(n_ref, 1u);
  EXPECT_EQ(n, 2u);  // the copy, then the attention
}

// A view whose rows are not contiguous (keys read as the transpose of [B, H, D, T]) is copied
// before the attention reads it, and the result is the same.
TEST(AttentionViews, ViewWithStridedRowsIsMaterialised) {
  const int64_t B = 2, H = 2, T = 70, D = 16;
  const HostTensor q = testing::random_tensor({DType::F32, {B, H, T, D}, -3, 3}, 41);
  const HostTensor kt = testing::random_tensor({DType::F32, {B, H, D, T}, -3, 3}, 42);
  const HostTensor v = testing::random_tensor({DType::F32, {B, H, T, D}}, 43);
  HostTensor k(DType::F32, {B, H, T, D});
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) k.set((bh * T + t) * D + d, kt.get((bh * D + d) * T + t));
  expect_view_copied_with_same_bits({q, k, v}, 1, kt,
                                    [](Graph& g, ValueId x) { return g.add(Op::Permute, {x}, attr::Permute{{0, 1, 3, 2}}); });
}

// A zero-padded view (values padded along the sequence, a gated view) is copied too.
TEST(AttentionViews, PaddedViewIsMaterialised) {
  const int64_t B = 2, H = 2, T = 70, D = 16, pad = 3;
  const HostTensor q = testing::random_tensor({DType::F32, {B, H, T, D}, -3, 3}, 51);
  const HostTensor k = testing::random_tensor({DType::F32, {B, H, T, D}, -3, 3}, 52);
  const HostTensor vs = testing::random_tensor({DType::F32, {B, H, T - pad, D}}, 53);
  HostTensor v(DType::F32, {B, H, T, D});  // vs with `pad` rows of zeros first
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t t = pad; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) v.set((bh * T + t) * D + d, vs.get((bh * (T - pad) + t - pad) * D + d));
  expect_view_copied_with_same_bits({q, k, v}, 2, vs,
                                    [&](Graph& g, ValueId x) { return g.add(Op::Pad, {x}, attr::Pad{2, pad, 0}); });
}

// The row layout the attention reads: leading dims merged where their strides allow, at most two
// left; the innermost stride 1.
TEST(AttentionViews, RowsViewMergesLeadingDims) {
  // q of [B=2, H=3, T=5, D=4] sliced and permuted from [2, 5, 3 * 12]: strides (180, 4, 36, 1).
  auto v = passes::rows_view({2, 3, 5, 4}, {180, 4, 36, 1});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->row_stride, 36);
  EXPECT_EQ(v->inner, 3);
  EXPECT_EQ(v->outer, 180);
  EXPECT_EQ(v->inner_stride, 4);
  EXPECT_EQ(v->item(4), 180 + 4);  // b = 1, h = 1
  // Contiguous [2, 3, 5, 4]: one leading run of 6 items, 20 elements apart.
  v = passes::rows_view({2, 3, 5, 4}, {60, 20, 4, 1});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->inner, 1);
  EXPECT_EQ(v->item(5), 100);
  // Size-1 dims are skipped; a [T, D] has no leading dims.
  EXPECT_TRUE(passes::rows_view({1, 2, 1, 5, 4}, {0, 20, 7, 4, 1}).has_value());
  v = passes::rows_view({5, 4}, {4, 1});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->item(0), 0);
  // Not rows: the innermost stride is not 1, three leading dims that do not merge, rank 1.
  EXPECT_FALSE(passes::rows_view({2, 5, 4}, {20, 1, 5}).has_value());
  EXPECT_FALSE(passes::rows_view({2, 3, 2, 5, 4}, {1000, 100, 30, 4, 1}).has_value());
  EXPECT_FALSE(passes::rows_view({4}, {1}).has_value());
}

}  // namespace
}  // namespace synoros
