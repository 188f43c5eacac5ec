// The PyTorch-like front end: lazy recording, realization, backward, compile and the plan cache.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

TEST(TensorApi, OpsAreLazyUntilRead) {
  Tensor a = Tensor::from({1, 2, 3, 4}, {2, 2});
  Tensor b = (a * 2.0 + 1.0).relu();
  EXPECT_FALSE(b.realized());
  EXPECT_EQ(b.to_vector(), (std::vector<float>{3, 5, 7, 9}));
  EXPECT_TRUE(b.realized());
}

TEST(TensorApi, MatmulAndReductionsMatchHandComputation) {
  Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(a.matmul(b).to_vector(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(a.sum({1}).to_vector(), (std::vector<float>{6, 15}));
  EXPECT_FLOAT_EQ(float(a.mean().item()), 3.5f);
  EXPECT_EQ(a.max({0}).to_vector(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(a.transpose().shape(), (Shape{3, 2}));
}

TEST(TensorApi, BackwardGivesAnalyticGradients) {
  Tensor w = Tensor::from({1, -2, 3}, {3});
  w.requires_grad();
  Tensor x = Tensor::from({2, 2, 2}, {3});
  Tensor loss = (w * w * x).sum();  // d/dw = 2 w x
  loss.backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{4, -8, 12}));
  // Gradients accumulate across backward calls, as in PyTorch.
  (w * x).sum().backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<float>{6, -6, 14}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(TensorApi, CompiledStepMatchesEagerStepBitForBit) {
  testing::StrictKernels strict;
  TinyTask task(3);
  TinyMLP eager(11), compiled(11);
  CompiledStep step = compile_tiny_mlp_sgd(compiled, 0.05);
  for (int it = 0; it < 5; ++it) {
    Tensor loss = mse_loss(eager.forward(Tensor::from(task.x)), Tensor::from(task.target));
    loss.backward();
    SGD opt(eager.params(), 0.05);
    opt.step();
    opt.zero_grad();
    double eager_loss = loss.item();
    double step_loss = step({task.x, task.target})[0].get(0);
    EXPECT_EQ(eager_loss, step_loss) << "step " << it;
  }
  auto pe = eager.params(), pc = compiled.params();
  for (size_t i = 0; i < pe.size(); ++i) {
    HostTensor a = pe[i].value(), b = pc[i].value();
    EXPECT_EQ(0, std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes())) << "param " << i;
  }
}

TEST(TensorApi, TracingLeavesEagerGradientsUntouched) {
  TinyMLP m(5);
  compile_tiny_mlp_grad(m);
  for (const Tensor& p : m.params()) EXPECT_FALSE(p.grad().defined());
}

TEST(TensorApi, EagerLoopReusesCachedPlans) {
  TinyTask task(4);
  TinyMLP m(6);
  SGD opt(m.params(), 0.01);
  auto step = [&] {
    mse_loss(m.forward(Tensor::from(task.x)), Tensor::from(task.target)).backward();
    opt.step();
    opt.zero_grad();
  };
  step();
  size_t after_first = plan_cache_size();
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(plan_cache_size(), after_first);
}

TEST(TensorApi, ReadingInsideCompileIsAnError) {
  TinyMLP m(1);
  EXPECT_THROW(compile([&](const std::vector<Tensor>& a) {
                 m.forward(a[0]).item();
                 return std::vector<Tensor>{};
               }, {{DType::F32, {8, 16}}}),
               Error);
}

}  // namespace
}  // namespace synoros
