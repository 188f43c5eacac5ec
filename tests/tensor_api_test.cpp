// The PyTorch-like front end: lazy recording, realization, backward, compile and the plan cache.
#include <gtest/gtest.h>

#include <cstring>

#include "synoros/tiny_mlp.hpp"
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
  nn::TinyTask task(3);
  nn::TinyMLP eager(11), compiled(11);
  CompiledStep step = nn::compile_tiny_mlp_sgd(compiled, 0.05);
  for (int it = 0; it < 5; ++it) {
    Tensor loss = mse_loss(eager.forward(Tensor::from(task.x)), Tensor::from(task.target));
    loss.backward();
    optim::SGD opt(eager.params(), 0.05);
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
  nn::TinyMLP m(5);
  nn::compile_tiny_mlp_grad(m);
  for (const Tensor& p : m.params()) EXPECT_FALSE(p.grad().defined());
}

TEST(TensorApi, EagerLoopReusesCachedPlans) {
  nn::TinyTask task(4);
  nn::TinyMLP m(6);
  optim::SGD opt(m.params(), 0.01);
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

// Many distinct large plans (an operator search compiles thousands): the cache keeps within its
// byte budget by dropping the oldest, and a dropped plan's CompiledStep still runs.
TEST(TensorApi, PlanCacheStaysWithinItsByteBudget) {
  size_t saved = size_t(1) << 30;
  set_plan_cache_limit(size_t(4) << 20);
  std::vector<CompiledStep> steps;
  for (int64_t n = 1; n <= 12; ++n)
    steps.push_back(compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{(a[0] * 2.0).exp() + 1.0}; },
                            {{DType::F32, {n, 128, 256}}}));  // n x 128 KiB per value
  EXPECT_LE(plan_cache_bytes(), size_t(4) << 20);
  EXPECT_GE(plan_cache_size(), 1u);
  HostTensor x(DType::F32, {1, 128, 256});
  EXPECT_DOUBLE_EQ(steps[0]({x})[0].get(0), 2.0);  // evicted from the cache, still usable
  set_plan_cache_limit(saved);
}

TEST(TensorApi, ReadingInsideCompileIsAnError) {
  nn::TinyMLP m(1);
  EXPECT_THROW(compile([&](const std::vector<Tensor>& a) {
                 m.forward(a[0]).item();
                 return std::vector<Tensor>{};
               }, {{DType::F32, {8, 16}}}),
               Error);
}

}  // namespace
}  // namespace synoros
