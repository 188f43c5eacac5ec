// Broadcasts materialised by the gather kernel: a repeated innermost element (an upsample, a 2x2
// pooling window's broadcast) and a repeated block above it, alone and inside a fused group, on
// sizes that cross the gather's chunks and the fused group's blocks.
#include <gtest/gtest.h>

#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

// x [A, 1, W, 1] broadcast to [A, R, W, I]: element (a, r, w, i) is x[a, w].
void check_repeat(int64_t A, int64_t R, int64_t W, int64_t I) {
  HostTensor x = synoros::testing::random_tensor({DType::F32, {A, 1, W, 1}}, uint64_t(A * 131 + W));
  Tensor t = Tensor::from(x);
  HostTensor bare = t.expand({A, R, W, I}).value();
  HostTensor fused = (t.expand({A, R, W, I}) * 2.0).value();
  ASSERT_EQ(bare.shape, (Shape{A, R, W, I}));
  for (int64_t a = 0; a < A; ++a)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t i = 0; i < I; ++i) {
          int64_t o = ((a * R + r) * W + w) * I + i;
          float want = float(x.get(a * W + w));
          ASSERT_EQ(float(bare.get(o)), want) << A << "x" << R << "x" << W << "x" << I << " at " << o;
          ASSERT_EQ(float(fused.get(o)), 2.0f * want) << A << "x" << R << "x" << W << "x" << I << " at " << o;
        }
}

TEST(BroadcastGather, RepeatedPairsAndBlocks) {
  check_repeat(3, 2, 14, 2);     // a pooling window's broadcast
  check_repeat(37, 3, 301, 2);   // crosses gather chunks and fused blocks mid-block
  check_repeat(5, 4, 7, 3);      // a longer repeat
  check_repeat(64, 2, 5, 2);     // short rows
  check_repeat(2, 1, 9, 2);      // nothing above to repeat
}

}  // namespace
