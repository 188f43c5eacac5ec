// The middle-axis sums (a batch norm's statistics over N and H x W) and batch norm's gradient
// sums reduce each channel's row in the documented order -- element t of the row into lane t % 8
// of its 4096-element segment, in increasing t, lanes combined pairwise, segments added in order
// -- on every instruction set: checked bit for bit against that order written out here, on rows
// whose pieces start off a multiple of 8 (7x7 images) and whose rows cross a segment.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

// Channel c's row of [N, C, inner] with element values v(a, i), in the documented order.
template <class V>
float row_sum(int64_t N, int64_t inner, V v) {
  float lane[8] = {}, total = 0.0f;
  auto flush = [&] {
    total = total + (((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])));
    for (float& l : lane) l = 0.0f;
  };
  int64_t t = 0;
  for (int64_t a = 0; a < N; ++a)
    for (int64_t i = 0; i < inner; ++i) {
      lane[t % 8] += v(a, i);
      if (++t % 4096 == 0) flush();
    }
  if (t % 4096 != 0) flush();
  return total;
}

void expect_bits(float got, float want, const std::string& what) {
  EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << what << ": " << got << " vs " << want;
}

class ReduceOrder : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(ReduceOrder, ChannelSumsFollowTheDocumentedLaneOrder) {
  kernels::Isa isa = GetParam();
  if (int(isa) > int(kernels::best_isa())) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(isa);
  synoros::testing::IsaScope at_isa(isa);
  for (Shape s : {Shape{3, 9, 7, 7}, Shape{3, 5, 37, 41}}) {
    int64_t N = s[0], C = s[1], inner = s[2] * s[3];
    std::string at = std::string(kernels::isa_name(isa)) + " " + shape_str(s);
    Graph g;
    ValueId x = g.input(DType::F32, s, "x"), dy = g.input(DType::F32, s, "g");
    ValueId mean = g.input(DType::F32, {C}, "m"), var = g.input(DType::F32, {C}, "v");
    ValueId sums = g.add(Op::BatchNormSums, {dy, x, mean, var}, attr::Eps{1e-5});
    ValueId total = g.sum(x, {0, 2, 3});
    Plan plan(g, {sums, total});
    HostTensor hx = synoros::testing::random_tensor({DType::F32, s, -2, 2}, 11);
    HostTensor hg = synoros::testing::random_tensor({DType::F32, s, -1, 1}, 12);
    HostTensor hm = synoros::testing::random_tensor({DType::F32, {C}, -0.5, 0.5}, 13);
    HostTensor hv = synoros::testing::random_tensor({DType::F32, {C}, 0.2, 2}, 14);
    plan.set_input(x, hx), plan.set_input(dy, hg), plan.set_input(mean, hm), plan.set_input(var, hv);
    plan.run();
    HostTensor got_sums = plan.read(sums), got_total = plan.read(total);
    const float* px = static_cast<const float*>(hx.buffer->data());
    const float* pg = static_cast<const float*>(hg.buffer->data());
    for (int64_t c = 0; c < C; ++c) {
      auto at_x = [&](int64_t a, int64_t i) { return px[(a * C + c) * inner + i]; };
      auto at_g = [&](int64_t a, int64_t i) { return pg[(a * C + c) * inner + i]; };
      float m = float(hm.get(c)), r = 1.0f / std::sqrt(float(hv.get(c)) + float(1e-5));
      expect_bits(float(got_total.get(c)), row_sum(N, inner, at_x), at + " sum c" + std::to_string(c));
      expect_bits(float(got_sums.get(c)), row_sum(N, inner, at_g), at + " sum(g) c" + std::to_string(c));
      expect_bits(float(got_sums.get(C + c)),
                  row_sum(N, inner, [&](int64_t a, int64_t i) { return at_g(a, i) * ((at_x(a, i) - m) * r); }),
                  at + " sum(g x^) c" + std::to_string(c));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, ReduceOrder,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         [](const auto& p) { return std::string(kernels::isa_name(p.param)); });

}  // namespace
