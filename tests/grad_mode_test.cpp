// No-grad mode, torch.matmul's shapes, and buffers over memory the engine does not own.
#include <gtest/gtest.h>

#include <cstdlib>

#include "synoros/synoros.hpp"

namespace synoros {
namespace {

TEST(GradMode, NoGradResultsCarryNoGradientPath) {
  Tensor w = Tensor::randn({3, 3}, 1).requires_grad();
  Tensor x = Tensor::randn({2, 3}, 2);
  Tensor y;
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_enabled());
    y = (x.matmul(w) * 2.0).sum();
  }
  EXPECT_TRUE(grad_enabled());
  // The same value as with gradients on, but backward() finds no leaf to reach.
  Tensor z = (x.matmul(w) * 2.0).sum();
  EXPECT_EQ(y.item(), z.item());
  EXPECT_THROW(y.backward(), Error);  // as PyTorch: nothing behind it requires a gradient
  EXPECT_FALSE(w.grad().defined());
  z.backward();
  EXPECT_TRUE(w.grad().defined());
}

TEST(GradMode, NoGradReadsTheParameterAsItIsWhenRealized) {
  // The parameter is aliased in place: an update before the result is read is seen, as for
  // any lazy op on it.
  Tensor w = Tensor::from({1.0f, 2.0f}, {2}).requires_grad();
  Tensor y;
  {
    NoGradGuard guard;
    y = w * 3.0;
  }
  w.assign(Tensor::from({5.0f, 7.0f}, {2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{15.0f, 21.0f}));
}

TEST(GradMode, NoGradCutsAComputedValueFromItsLeaves) {
  Tensor w = Tensor::from({1.0f, 2.0f}, {2}).requires_grad();
  Tensor h = w * w;  // on the gradient path
  Tensor y;
  {
    NoGradGuard guard;
    y = h + 1.0;
  }
  Tensor loss = (y * w).sum();
  loss.backward();
  // d/dw of sum((w^2 + 1) * w) with w^2 + 1 constant: w^2 + 1.
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{2.0f, 5.0f}));
}

TEST(GradMode, InsideCompileUpdatesWorkAndACutOnTheLossPathIsRefused) {
  Tensor w = Tensor::from({1.0f, 2.0f}, {2}).requires_grad();
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor loss = (a[0] * w * w).sum();
        loss.backward();
        {
          NoGradGuard guard;  // the manual SGD idiom
          w.assign(w - w.grad() * 0.125);
        }
        return std::vector<Tensor>{loss};
      },
      {{DType::F32, {2}}});
  step({Tensor::from({1.0f, 1.0f}, {2}).value()});
  EXPECT_EQ(w.to_vector(), (std::vector<float>{0.75f, 1.5f}));  // w - 0.125 * 2w
  EXPECT_THROW(compile(
                   [&](const std::vector<Tensor>& a) {
                     Tensor h = w * w, cut;
                     {
                       NoGradGuard guard;
                       cut = h + 1.0;
                     }
                     Tensor loss = (cut * w * a[0]).sum();
                     loss.backward();
                     return std::vector<Tensor>{loss};
                   },
                   {{DType::F32, {2}}}),
               Error);
  EXPECT_TRUE(grad_enabled());
}

// A plain loop product in double: out[b][m][n] = sum_k a[b][m][k] * c[b][k][n].
std::vector<double> loop_matmul(const std::vector<float>& a, const std::vector<float>& c, int64_t B, int64_t M,
                                int64_t K, int64_t N, bool a_batched, bool c_batched) {
  std::vector<double> out(size_t(B * M * N));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(a[size_t((a_batched ? b * M * K : 0) + m * K + k)]) *
               double(c[size_t((c_batched ? b * K * N : 0) + k * N + n)]);
        out[size_t((b * M + m) * N + n)] = s;
      }
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
}

TEST(Matmul, BroadcastsBatchAxesAndTakesVectorsAsPyTorch) {
  Tensor a = Tensor::randn({3, 4, 5}, 1), w = Tensor::randn({5, 2}, 2), bw = Tensor::randn({3, 5, 2}, 3);
  Tensor a2 = Tensor::randn({4, 5}, 4), v = Tensor::randn({5}, 5);
  EXPECT_EQ(a.matmul(w).shape(), (Shape{3, 4, 2}));
  expect_near(a.matmul(w).to_vector(), loop_matmul(a.to_vector(), w.to_vector(), 3, 4, 5, 2, true, false));
  EXPECT_EQ(a2.matmul(bw).shape(), (Shape{3, 4, 2}));
  expect_near(a2.matmul(bw).to_vector(), loop_matmul(a2.to_vector(), bw.to_vector(), 3, 4, 5, 2, false, true));
  Tensor one = Tensor::randn({1, 4, 5}, 6);
  EXPECT_EQ(one.matmul(bw).shape(), (Shape{3, 4, 2}));
  expect_near(one.matmul(bw).to_vector(), loop_matmul(one.to_vector(), bw.to_vector(), 3, 4, 5, 2, false, true));
  EXPECT_EQ(a.matmul(v).shape(), (Shape{3, 4}));
  expect_near(a.matmul(v).to_vector(), loop_matmul(a.to_vector(), v.to_vector(), 3, 4, 5, 1, true, false));
  EXPECT_EQ(v.matmul(w).shape(), (Shape{2}));
  expect_near(v.matmul(w).to_vector(), loop_matmul(v.to_vector(), w.to_vector(), 1, 1, 5, 2, false, false));
  EXPECT_EQ(v.matmul(v).shape(), (Shape{}));
  expect_near(v.matmul(v).to_vector(), loop_matmul(v.to_vector(), v.to_vector(), 1, 1, 5, 1, false, false));
  EXPECT_THROW(a.matmul(Tensor::randn({2, 5, 2}, 7)), Error);
  EXPECT_THROW(a.matmul(Tensor::randn({4, 2}, 8)), Error);
  EXPECT_THROW(Tensor::scalar(1.0).matmul(v), Error);
  // Empty axes: a zero-size contraction gives zeros, a zero batch broadcasts as zero.
  EXPECT_EQ(Tensor::zeros({2, 3, 0}).matmul(Tensor::zeros({0, 5})).shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(Tensor::zeros({0, 3, 4}).matmul(Tensor::zeros({1, 4, 5})).shape(), (Shape{0, 3, 5}));
  // Gradients reach both operands through the broadcast.
  Tensor x = Tensor::randn({4, 5}, 9).requires_grad(), y = Tensor::randn({3, 5, 2}, 10).requires_grad();
  x.matmul(y).sum().backward();
  EXPECT_EQ(x.grad().shape(), (Shape{4, 5}));
  EXPECT_EQ(y.grad().shape(), (Shape{3, 5, 2}));
  // d/dx sum(x @ y) = sum over batches and columns of y: row k gets sum_b sum_n y[b][k][n].
  std::vector<float> yv = y.to_vector(), gx = x.grad().to_vector();
  for (int64_t k = 0; k < 5; ++k) {
    double s = 0;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t n = 0; n < 2; ++n) s += yv[size_t(b * 10 + k * 2 + n)];
    for (int64_t m = 0; m < 4; ++m) EXPECT_NEAR(gx[size_t(m * 5 + k)], s, 1e-4);
  }
}

TEST(BorrowedBuffer, ServesAsALeafWithoutACopy) {
  float* mem = static_cast<float*>(std::aligned_alloc(64, 64));
  for (int i = 0; i < 16; ++i) mem[i] = float(i);
  bool freed = false;
  {
    HostTensor h;
    h.shape = {16};
    h.buffer = std::make_shared<Buffer>(mem, 64, std::shared_ptr<void>(mem, [&](void* p) {
      freed = true;
      std::free(p);
    }));
    EXPECT_TRUE(h.buffer->borrowed());
    Tensor t = Tensor::from(h);
    EXPECT_EQ(t.value().buffer->data(), mem);
    EXPECT_EQ((t * 2.0).sum().item(), 240.0);
    EXPECT_FALSE(freed);
  }
  EXPECT_TRUE(freed);  // the owner goes with the last buffer
  alignas(64) static float misaligned[32];
  EXPECT_THROW(Buffer(misaligned + 1, 64, std::make_shared<int>(0)), Error);
  EXPECT_THROW(Buffer(misaligned, 60, std::make_shared<int>(0)), Error);
  EXPECT_THROW(Buffer(misaligned, 64, nullptr), Error);
}

}  // namespace
}  // namespace synoros
