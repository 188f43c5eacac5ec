// The gather kernel drops size-1 dimensions and merges dimensions whose strides continue into
// each other (kernels::make_gather). These views are built so that the merges happen next to
// dimensions that must stay apart (a broadcast, a wrapped shift, a padding gate, a stride), and
// every element is checked against index arithmetic or a float64 loop.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/onednn_conv.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

// x [A, 1, B, 1, C] permuted to [B, 1, A, C, 1]: A and C become adjacent but do not merge
// (A's stride is B*C), the size-1 dimensions vanish; inside a fused group too.
TEST(GatherLayout, PermuteAcrossSizeOneDimensions) {
  const int64_t A = 3, B = 4, C = 5;
  HostTensor x = synoros::testing::random_tensor({DType::F32, {A, 1, B, 1, C}}, 21);
  Tensor t = Tensor::from(x);
  HostTensor p = t.permute({2, 1, 0, 4, 3}).value();
  HostTensor q = (t.permute({2, 1, 0, 4, 3}) + 1.0).value();
  ASSERT_EQ(p.shape, (Shape{B, 1, A, C, 1}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < C; ++c) {
        int64_t o = (b * A + a) * C + c;
        float want = float(x.get((a * B + b) * C + c));
        ASSERT_EQ(float(p.get(o)), want) << o;
        ASSERT_EQ(float(q.get(o)), want + 1.0f) << o;
      }
}

// A slice of the middle axis keeps rows contiguous: [A, B, C] -> [A, B', C] merges B' and C.
// Then a broadcast of size-1 axes [A, 1, C] -> [A, R, C] must not merge the repeated axis.
TEST(GatherLayout, SliceMergesRowsAndBroadcastDoesNot) {
  const int64_t A = 6, B = 7, C = 9, R = 4;
  HostTensor x = synoros::testing::random_tensor({DType::F32, {A, B, C}}, 22);
  Tensor t = Tensor::from(x);
  HostTensor s = t.slice(1, 2, 6).value();
  ASSERT_EQ(s.shape, (Shape{A, 4, C}));
  for (int64_t a = 0; a < A; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(float(s.get((a * 4 + b) * C + c)), float(x.get((a * B + b + 2) * C + c)));
  HostTensor e = t.slice(1, 3, 4).expand({A, R, C}).value();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(float(e.get((a * R + r) * C + c)), float(x.get((a * B + 3) * C + c)));
}

// A wrapped shift along the middle axis of [A, 1, N, 1, C]: the shifted axis has stride 0 and a
// wrapping coordinate, so it merges with neither neighbour.
TEST(GatherLayout, WrappedShiftNextToSizeOneDimensions) {
  const int64_t A = 3, N = 7, C = 4;
  HostTensor x = synoros::testing::random_tensor({DType::F32, {A, 1, N, 1, C}}, 23);
  for (int64_t amount : {2, -3, 9}) {
    HostTensor y = Tensor::apply(Op::Shift, {Tensor::from(x)}, attr::Shift{2, amount}).value();
    ASSERT_EQ(y.shape, x.shape);
    for (int64_t a = 0; a < A; ++a)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c) {
          int64_t src = ((i + amount) % N + N) % N;
          ASSERT_EQ(float(y.get((a * N + i) * C + c)), float(x.get((a * N + src) * C + c)))
              << "shift " << amount << " at " << a << "," << i << "," << c;
        }
  }
}

// A 1x1 stride-2 convolution through the gather + GEMM lowering (its window axes are size 1,
// its strided rows must not merge), forward and both gradients, against float64 loops.
TEST(GatherLayout, OneByOneStrideTwoConvolutionThroughTheGemmLowering) {
  struct Forced {
    Forced() { kernels::force_conv_lowering("gemm"); }
    ~Forced() { kernels::force_conv_lowering(""); }
  } forced;
  const int64_t N = 3, C = 5, H = 9, W = 8, O = 6, Ho = 5, Wo = 4;
  nn::Conv2d conv(C, O, 1, 7, 2, 0, 1, 1, false);
  HostTensor x = synoros::testing::random_tensor({DType::F32, {N, C, H, W}}, 24);
  HostTensor r = synoros::testing::random_tensor({DType::F32, {N, O, Ho, Wo}}, 25);
  HostTensor w = conv.weight.value();
  Tensor xt = Tensor::from(x);
  xt.requires_grad();
  Tensor y = conv(xt);
  (y * Tensor::from(r)).sum().backward();
  HostTensor yv = y.value(), dx = xt.grad().value(), dw = conv.weight.grad().value();
  auto X = [&](int64_t n, int64_t c, int64_t h, int64_t v) { return x.get(((n * C + c) * H + h) * W + v); };
  auto R = [&](int64_t n, int64_t o, int64_t h, int64_t v) { return r.get(((n * O + o) * Ho + h) * Wo + v); };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t h = 0; h < Ho; ++h)
        for (int64_t v = 0; v < Wo; ++v) {
          double want = 0;
          for (int64_t c = 0; c < C; ++c) want += X(n, c, 2 * h, 2 * v) * w.get(o * C + c);
          ASSERT_NEAR(yv.get(((n * O + o) * Ho + h) * Wo + v), want, 1e-5) << "y " << n << o << h << v;
        }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t v = 0; v < W; ++v) {
          double want = 0;
          if (h % 2 == 0 && v % 2 == 0 && h / 2 < Ho && v / 2 < Wo)
            for (int64_t o = 0; o < O; ++o) want += R(n, o, h / 2, v / 2) * w.get(o * C + c);
          ASSERT_NEAR(dx.get(((n * C + c) * H + h) * W + v), want, 1e-5) << "dx " << n << c << h << v;
        }
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      double want = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < Ho; ++h)
          for (int64_t v = 0; v < Wo; ++v) want += R(n, o, h, v) * X(n, c, 2 * h, 2 * v);
      ASSERT_NEAR(dw.get(o * C + c), want, 1e-4) << "dw " << o << c;
    }
}

}  // namespace
