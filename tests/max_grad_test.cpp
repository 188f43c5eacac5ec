// reduce_max_grad (a max's input gradient as one op, one pass per window) gives the bits of the
// composite it replaced -- mask = (x == max), count = sum(mask), mask * (g / count) -- on every
// instruction set, for pooling tiles (2-wide: the vector path with its scalar tail; 3-wide:
// scalar), a max along a middle axis (the 1-wide vector path), and axes that need the general
// form; with ties, NaN, signed zeros and infinities in x and in the upstream gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct Case {
  Shape shape;
  std::vector<int64_t> axes;
  bool keepdim;
  const char* kernel;  // the form the plan must take
};

// Values with many ties per window and the awkward ones: NaN, +-0, +-inf.
HostTensor awkward(const Shape& s, uint64_t seed, bool gradient) {
  HostTensor t(DType::F32, s);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float pool[] = {-1.0f, 0.0f, -0.0f, 0.5f, 1.0f, 2.0f, 2.0f, 2.0f};
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    float v = gradient ? float(int64_t(r % 2001) - 1000) / 250.0f : pool[r % 8];
    if (r % 97 == 0) v = nan;
    if (r % 89 == 0) v = (r & 1) ? inf : -inf;
    t.set(i, v);
  }
  return t;
}

class MaxGrad : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(MaxGrad, OneOpGivesTheCompositesBits) {
  kernels::Isa isa = GetParam();
  if (int(isa) > int(kernels::best_isa())) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(isa);
  synoros::testing::IsaScope at_isa(isa);
  const Case cases[] = {
      {{3, 5, 6, 2, 7, 2}, {3, 5}, false, "max-grad-tile"},  // 2x2 pooling tiles, 7 windows a row: 4 + 3
      {{2, 3, 4, 2, 9, 2}, {3, 5}, true, "max-grad-tile"},
      {{2, 4, 3, 3, 5, 3}, {3, 5}, false, "max-grad-tile"},  // 3x3 tiles: scalar
      {{4, 3, 19}, {1}, true, "max-grad-tile"},              // a middle axis: 8 + 8 + 3 windows a row
      {{5, 11}, {1}, false, "max-grad-tile"},                // the last axis
      {{2, 3, 4, 5}, {0, 2}, false, "max-grad"},             // reduced, kept, reduced, kept: general
      {{2, 1, 3, 4, 5}, {0, 3, 4}, true, "max-grad-tile"},
      {{3, 4}, {}, false, "max-grad-tile"},                  // every axis: one window
  };
  for (const Case& k : cases) {
    std::string at = std::string(kernels::isa_name(isa)) + " " + shape_str(k.shape);
    Graph g;
    ValueId x = g.input(DType::F32, k.shape, "x");
    const attr::Reduce ra{k.axes, k.keepdim};
    ValueId y = g.add(Op::ReduceMax, {x}, ra);
    ValueId go = g.input(DType::F32, g.shape(y), "g");
    ValueId fast = g.add(Op::ReduceMaxGrad, {x, y, go}, ra);
    // The composite, as the max's gradient was written before.
    attr::Reduce kd = ra;
    kd.keepdim = true;
    Shape ks = k.shape;  // the max's shape with kept 1s
    for (int64_t a : k.axes) ks[size_t(a)] = 1;
    if (k.axes.empty()) ks.assign(k.shape.size(), 1);
    ValueId yk = g.reshape(y, ks);
    ValueId mask = g.binary(Op::CmpEq, x, g.expand(yk, k.shape));
    ValueId count = g.add(Op::Sum, {mask}, kd);
    ValueId share = g.binary(Op::Div, g.reshape(go, g.shape(count)), count);
    ValueId slow = g.binary(Op::Mul, mask, g.expand(share, k.shape));
    Plan plan(g, {fast, slow});
    bool found = false;
    for (const LaunchInfo& li : plan.launch_info()) found = found || li.kernel == k.kernel;
    EXPECT_TRUE(found) << at << ": no launch ran " << k.kernel;
    plan.set_input(x, awkward(k.shape, k.shape.size() * 7 + uint64_t(k.axes.size()), false));
    plan.set_input(go, awkward(g.shape(y), 3, true));
    plan.run();
    HostTensor a = plan.read(fast), b = plan.read(slow);
    ASSERT_EQ(a.bytes(), b.bytes()) << at;
    const uint32_t* pa = static_cast<const uint32_t*>(a.buffer->data());
    const uint32_t* pb = static_cast<const uint32_t*>(b.buffer->data());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_EQ(pa[i], pb[i]) << at << " element " << i << ": " << a.get(i) << " vs " << b.get(i);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, MaxGrad,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         [](const auto& p) { return std::string(kernels::isa_name(p.param)); });

// Bad operands are named.
TEST(MaxGradOp, RejectsAMaxOfTheWrongShape) {
  Graph g;
  ValueId x = g.input(DType::F32, {2, 6, 4}, "x");
  ValueId y = g.input(DType::F32, {2, 5}, "y");
  ValueId go = g.input(DType::F32, {2, 4}, "g");
  try {
    g.add(Op::ReduceMaxGrad, {x, y, go}, attr::Reduce{{1}});
    FAIL() << "accepted a max of the wrong shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_max_grad: the max must be [2,4] of x's dtype, got [2,5]"), std::string::npos) << e.what();
  }
}

}  // namespace
