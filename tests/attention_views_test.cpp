// Attention reads q, k, v, o and g in place through the slice, reshape and permute views that
// split a projection into heads (no copies launched), with the bits it gives contiguous operands.
#include <gtest/gtest.h>

#include <cstring>

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
  const Shape& s = g.shape(x);
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
};

// Attention and its gradient with q from xq [B, Tq, H D], k and v from kv [B, Tk, 2 H D] and g
// from gy [B, Tq, H D] (views, or contiguous copies made on the host): the outputs' bytes and
// the kernels launched.
std::pair<std::vector<uint8_t>, std::vector<std::string>> run(const Case& c, bool views) {
  const int64_t C = c.H * c.D;
  const HostTensor xq = testing::random_tensor({c.dt, {c.B, c.Tq, C}, -3, 3}, 31);
  const HostTensor kv = testing::random_tensor({c.dt, {c.B, c.Tk, 2 * C}, -3, 3}, 32);
  const HostTensor gy = testing::random_tensor({c.dt, {c.B, c.Tq, C}}, 33);
  Graph g;
  const attr::Attention at{c.causal, 0.25};
  std::vector<std::pair<ValueId, HostTensor>> inputs;
  ValueId q, k, v, go;
  if (views) {
    ValueId xi = g.input(c.dt, xq.shape, "xq"), kvi = g.input(c.dt, kv.shape, "kv"), gi = g.input(c.dt, gy.shape, "gy");
    inputs = {{xi, xq}, {kvi, kv}, {gi, gy}};
    q = heads_view(g, xi, 0, c.H, c.D);
    k = heads_view(g, kvi, 0, c.H, c.D);
    v = heads_view(g, kvi, C, c.H, c.D);
    go = heads_view(g, gi, 0, c.H, c.D);
  } else {
    const HostTensor hq = heads_host(xq, 0, c.H, c.D), hk = heads_host(kv, 0, c.H, c.D),
                     hv = heads_host(kv, C, c.H, c.D), hg = heads_host(gy, 0, c.H, c.D);
    q = g.input(c.dt, hq.shape, "q"), k = g.input(c.dt, hk.shape, "k"), v = g.input(c.dt, hv.shape, "v");
    go = g.input(c.dt, hg.shape, "g");
    inputs = {{q, hq}, {k, hk}, {v, hv}, {go, hg}};
  }
  ValueId o = g.add(Op::Attention, {q, k, v}, at);
  std::vector<ValueId> outs{o, g.add(Op::AttentionGrad, {q, k, v, o, go}, at)};
  Plan p(g, outs);
  for (const auto& [id, t] : inputs) p.set_input(id, t);
  p.run();
  std::vector<std::string> kernels;
  for (const LaunchInfo& li : p.launch_info()) kernels.push_back(li.kernel);
  return {output_bytes(p, outs), kernels};
}

// Causal and not, several query and key blocks with short last ones, a few queries over many keys
// (the forward's split tasks, which fetch the next batch item's keys through its view), float64;
// every instruction set and 1 and 3 threads.
TEST(AttentionViews, ReadsHeadsInPlaceWithTheBitsOfContiguousOperands) {
  const Case cases[] = {{2, 3, 130, 130, 24, true, DType::F32},
                        {2, 3, 70, 130, 24, false, DType::F32},
                        {3, 2, 3, 600, 16, false, DType::F32},
                        {2, 2, 65, 65, 8, true, DType::F64}};
  const int saved = num_threads();
  for (const Case& c : cases) {
    set_num_threads(1);
    std::vector<uint8_t> ref;
    {
      testing::IsaScope scalar(kernels::Isa::Scalar);
      auto [bytes, kernels] = run(c, false);
      ref = bytes;
    }
    for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (int(isa) > int(kernels::best_isa())) continue;
      testing::IsaScope scope(isa);
      for (int threads : {1, 3}) {
        set_num_threads(threads);
        auto [bytes, kernels] = run(c, true);
        EXPECT_EQ(bytes, ref) << kernels::isa_name(isa) << " threads=" << threads << " Tq=" << c.Tq << " Tk=" << c.Tk;
        // Two launches: the views are folded into both readers, nothing is copied.
        ASSERT_EQ(kernels.size(), 2u) << kernels::isa_name(isa) << " Tq=" << c.Tq;
        EXPECT_EQ(kernels[0], "attention");
        EXPECT_EQ(kernels[1].rfind("attention-grad", 0), 0u) << kernels[1];
      }
    }
  }
  set_num_threads(saved);
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
  auto run_with = [&](bool transposed) {
    Graph g;
    ValueId qi = g.input(DType::F32, q.shape, "q"), vi = g.input(DType::F32, v.shape, "v");
    ValueId ki = g.input(DType::F32, transposed ? kt.shape : k.shape, "k");
    ValueId kk = transposed ? g.add(Op::Permute, {ki}, attr::Permute{{0, 1, 3, 2}}) : ki;
    ValueId o = g.add(Op::Attention, {qi, kk, vi}, attr::Attention{true, 0.25});
    Plan p(g, {o});
    p.set_input(qi, q);
    p.set_input(ki, transposed ? kt : k);
    p.set_input(vi, v);
    p.run();
    return std::make_pair(output_bytes(p, {o}), p.launch_info().size());
  };
  const auto [ref, n_ref] = run_with(false);
  const auto [bytes, n] = run_with(true);
  EXPECT_EQ(bytes, ref);
  EXPECT_EQ(n_ref, 1u);
  EXPECT_EQ(n, 2u);  // the permute, then the attention
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
