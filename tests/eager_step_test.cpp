// The eager loop's step cache: a backward() whose forward graph was seen before replays the plan
// recorded for it, with the bits of the full path (differentiate, lower, plan, run).
#include <gtest/gtest.h>

#include <cstring>

#include "api/tensor_impl.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

struct LoopResult {
  std::vector<double> losses;
  std::vector<HostTensor> params, grads;
  size_t replays = 0;
};

// Steps of a small model trained eagerly: new data each step (its values differ, its shapes do
// not), optionally accumulating gradients over two backward() calls, optionally reading the loss
// before backward(). With `fresh`, the step cache is emptied before every backward(): the full path.
LoopResult train(bool fresh, bool accumulate, bool read_loss_first, bool adam) {
  nn::Sequential model;
  model.add(std::make_shared<nn::Linear>(6, 12, true, 3));
  model.add(std::make_shared<nn::ReLU>());
  model.add(std::make_shared<nn::Linear>(12, 4, true, 4));
  std::unique_ptr<optim::Optimizer> opt;
  if (adam) opt = std::make_unique<optim::AdamW>(model.parameters(), 1e-2);
  else opt = std::make_unique<optim::SGD>(model.parameters(), 5e-2, 0.9);
  LoopResult r;
  const size_t before = backward_replays();
  for (int step = 0; step < 6; ++step) {
    opt->zero_grad();
    for (int micro = 0; micro < (accumulate ? 2 : 1); ++micro) {
      Tensor x = Tensor::randn({5, 6}, uint64_t(100 + 10 * step + micro));
      Tensor t = Tensor::randn({5, 4}, uint64_t(200 + 10 * step + micro));
      Tensor loss = mse_loss(model(x), t);
      if (read_loss_first) r.losses.push_back(loss.item());
      if (fresh) clear_backward_cache();
      loss.backward();
      if (!read_loss_first) r.losses.push_back(loss.item());
    }
    for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad().value());
    opt->step();
  }
  for (const Tensor& p : model.parameters()) r.params.push_back(p.value());
  r.replays = backward_replays() - before;
  return r;
}

void expect_same(const LoopResult& a, const LoopResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "loss " << i;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    testing::expect_same_bits(a.grads[i], b.grads[i], "gradient " + std::to_string(i));
  for (size_t i = 0; i < a.params.size(); ++i)
    testing::expect_same_bits(a.params[i], b.params[i], "parameter " + std::to_string(i));
}

TEST(EagerStep, ReplayedBackwardGivesTheBitsOfTheFullPath) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adamw" : "sgd with momentum");
    LoopResult full = train(true, false, false, adam), cached = train(false, false, false, adam);
    EXPECT_EQ(full.replays, 0u);
    EXPECT_EQ(cached.replays, 5u);  // every step after the first
    expect_same(full, cached);
  }
}

TEST(EagerStep, AccumulatedGradientsReplayWithTheOldGradientAsAnInput) {
  LoopResult full = train(true, true, false, false), cached = train(false, true, false, false);
  // Per step: the first micro-batch finds no gradient, the second one; both are recorded at step 0.
  EXPECT_EQ(cached.replays, 10u);
  expect_same(full, cached);
}

TEST(EagerStep, ALossReadBeforeBackwardTakesTheFullPath) {
  LoopResult full = train(true, false, true, false), cached = train(false, false, true, false);
  EXPECT_EQ(cached.replays, 0u);
  expect_same(full, cached);
}

TEST(EagerStep, AnotherGraphIsNotReplayed) {
  nn::Linear lin(3, 2, true, 7);
  const size_t before = backward_replays();
  std::vector<double> first;
  for (int64_t rows : {4, 4, 5, 4}) {  // the batch of 5 is another graph
    lin.weight.zero_grad(), lin.bias.zero_grad();
    Tensor loss = lin(Tensor::randn({rows, 3}, uint64_t(rows))).pow(2.0).mean();
    loss.backward();
    first.push_back(lin.weight.grad().to_vector()[0]);
  }
  EXPECT_EQ(backward_replays() - before, 2u);  // the second and the fourth
  EXPECT_EQ(first[0], first[1]);                 // the same data
  EXPECT_EQ(first[0], first[3]);
  EXPECT_NE(first[0], first[2]);
}

TEST(EagerStep, FreezingOtherParametersIsAnotherStep) {
  // Two layers of one shape, both trained once (so both are state read in place): freezing one
  // and then the other leaves the forward graph as it was, but not what is differentiated.
  nn::Linear a(3, 3, true, 1), b(3, 3, true, 2);
  optim::SGD opt({a.weight, a.bias, b.weight, b.bias}, 0.1);
  Tensor x = Tensor::randn({2, 3}, 5);
  auto loss = [&] { return b(a(x).relu()).pow(2.0).mean(); };
  loss().backward();
  opt.step();
  auto grads_with = [&](bool freeze_a) {
    for (Tensor* p : {&a.weight, &a.bias, &b.weight, &b.bias}) p->zero_grad();
    a.weight.requires_grad(!freeze_a), a.bias.requires_grad(!freeze_a);
    b.weight.requires_grad(freeze_a), b.bias.requires_grad(freeze_a);
    loss().backward();
    return (freeze_a ? b.weight : a.weight).grad().value();
  };
  grads_with(false);
  HostTensor replayed_or_not = grads_with(true);
  clear_backward_cache();
  HostTensor full = grads_with(true);
  testing::expect_same_bits(replayed_or_not, full, "b's weight gradient");
}

TEST(EagerStep, AConstantOldGradientIsNotBakedIntoTheStep) {
  // d(p + x)/dp is the seed itself, a constant: accumulating it must count every call.
  Tensor p = Tensor::zeros({});
  p.requires_grad();
  for (int k = 0; k < 4; ++k) (p + Tensor::randn({}, uint64_t(k))).backward();
  EXPECT_EQ(p.grad().item(), 4.0);
}

TEST(EagerStep, ReplayNeedsTheSameInputsConstantsAndParameters) {
  // Each variant has the recorded step's shapes and ops; only what it reads differs, and must
  // keep it from replaying the recorded plan.
  nn::Linear a(3, 2, true, 1), b(3, 2, true, 2);
  Tensor x = Tensor::randn({4, 3}, 1), z = Tensor::randn({4, 2}, 2);
  auto grad_of = [&](int variant, bool fresh) {
    for (Tensor* p : {&a.weight, &a.bias, &b.weight, &b.bias}) p->zero_grad();
    if (fresh) clear_backward_cache();
    Tensor y = variant == 3 ? b(x) : a(x);
    Tensor d = variant == 2 ? z - y : y - z;  // the inputs swapped
    Tensor loss = (d * (variant == 1 ? 3.0 : 2.0)).relu().sum();
    loss.backward();
    return (variant == 3 ? b.weight : a.weight).grad().value();
  };
  for (int variant : {1, 2, 3}) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    grad_of(0, true);  // recorded
    size_t before = backward_replays();
    HostTensor replayed_or_not = grad_of(variant, false);
    EXPECT_EQ(backward_replays(), before);
    HostTensor full = grad_of(variant, true);
    testing::expect_same_bits(replayed_or_not, full, "the weight's gradient");
  }
  grad_of(0, true);
  size_t before = backward_replays();
  grad_of(0, false);
  EXPECT_EQ(backward_replays(), before + 1);  // the recorded step itself does replay
}

TEST(EagerStep, AValueReadBeforeItsParameterChangedIsRefusedOnReplayToo) {
  nn::Linear lin(3, 2, true, 5);
  Tensor x = Tensor::randn({4, 3}, 3);
  for (int k = 0; k < 3; ++k) {
    lin.weight.zero_grad(), lin.bias.zero_grad();
    Tensor y = lin(x);
    y.value();  // read: realized, its graph kept for the gradient
    if (k == 2) lin.weight.assign(Tensor::zeros({2, 3}));
    Tensor loss = y.pow(2.0).mean();
    const size_t before = backward_replays();
    if (k < 2) {
      loss.backward();  // recorded, then replayed: the step itself is replayable
      EXPECT_EQ(backward_replays() - before, size_t(k));
      continue;
    }
    try {
      loss.backward();
      ADD_FAILURE() << "backward() used a value computed from a parameter changed since";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
    }
  }
}

// The eager optimizer step: the update compiled on the first step and replayed on the next gives
// the bits of the recording path (forced here by an outer AssignBatch), through learning-rate
// changes, a gradient left out, clipping switched on, and lazy gradients (which are recorded).
struct OptimRun {
  std::vector<HostTensor> params;
  std::vector<std::vector<HostTensor>> state;
  int64_t replayed = 0;
};

OptimRun optimize(const std::string& kind, bool record) {
  std::vector<Tensor> params{Tensor::randn({4, 3}, 1), Tensor::randn({3}, 2), Tensor::randn({2, 5}, 3)};
  for (Tensor& p : params) p.requires_grad();
  std::unique_ptr<optim::Optimizer> opt;
  if (kind == "adamw") opt = std::make_unique<optim::AdamW>(params, 1e-2, 0.9, 0.99, 1e-8, 0.05);
  else if (kind == "nesterov") opt = std::make_unique<optim::SGD>(params, 5e-2, 0.9, 1e-3, true);
  else opt = std::make_unique<optim::SGD>(params, 5e-2, 0.8, 0.0, false, 0.25);
  OptimRun r;
  for (int step = 0; step < 9; ++step) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < params.size(); ++i) grads.push_back(Tensor::randn(params[i].shape(), uint64_t(50 + 7 * step + i)));
    if (step == 3 || step == 4) grads[1] = Tensor();          // a parameter without a gradient
    if (step == 6) grads[0] = grads[0] * 2.0;                  // a lazy gradient: recorded
    if (step == 7) opt->set_clip_norm(1.5);                    // clipping from here on
    opt->set_lr(0.05 / (1 + step));
    if (record) {
      AssignBatch outer;
      opt->step(grads);
      outer.close();
    } else {
      opt->step(grads);
    }
    std::vector<HostTensor> st;
    for (const auto& [name, t] : opt->state()) {  // a copy: the state is rewritten in place
      HostTensor v = t.value(), c(v.dtype, v.shape);
      std::memcpy(c.buffer->data(), v.buffer->data(), v.bytes());
      st.push_back(c);
    }
    r.state.push_back(st);
  }
  for (const Tensor& p : params) r.params.push_back(p.value());
  r.replayed = opt->replayed_steps();
  return r;
}

TEST(EagerStep, ReplayedUpdateGivesTheBitsOfTheRecordedOne) {
  for (const std::string kind : {"sgd", "nesterov", "adamw"}) {
    SCOPED_TRACE(kind);
    OptimRun recorded = optimize(kind, true), replayed = optimize(kind, false);
    EXPECT_EQ(recorded.replayed, 0);
    // Compiled at steps 0, 3 (a gradient left out), 5 (the other one back) and 7 (clipping);
    // step 6's lazy gradient is recorded: replayed at 1, 2, 4 and 8.
    EXPECT_EQ(replayed.replayed, 4);
    ASSERT_EQ(recorded.state.size(), replayed.state.size());
    for (size_t s = 0; s < recorded.state.size(); ++s)
      for (size_t i = 0; i < recorded.state[s].size(); ++i)
        testing::expect_same_bits(recorded.state[s][i], replayed.state[s][i],
                                  "state " + std::to_string(i) + " after step " + std::to_string(s));
    for (size_t i = 0; i < recorded.params.size(); ++i)
      testing::expect_same_bits(recorded.params[i], replayed.params[i], "parameter " + std::to_string(i));
  }
}

TEST(EagerStep, AnUpdateIsCompiledAfreshUnderAnotherInstructionSet) {
  if (kernels::best_isa() == kernels::Isa::Scalar) GTEST_SKIP() << "one instruction set only";
  Tensor p = Tensor::zeros({5});
  p.requires_grad();
  optim::SGD opt({p}, 0.5, 0.9);
  for (int k = 0; k < 2; ++k) opt.step({Tensor::full({5}, 1.0)});
  EXPECT_EQ(opt.replayed_steps(), 1);
  {
    testing::IsaScope scalar(kernels::Isa::Scalar);
    for (int k = 0; k < 2; ++k) opt.step({Tensor::full({5}, 1.0)});
  }
  EXPECT_EQ(opt.replayed_steps(), 2);  // compiled for the scalar kernels, then replayed once
}

TEST(EagerStep, AGradientReadWithItsGraphIsRecordedNotReplayed) {
  // g keeps its graph (it was read while p requires a gradient): a later use recomputes it, and
  // refuses once p has changed in place, as any other use of such a value does.
  Tensor p = Tensor::full({3}, 1.0);
  p.requires_grad();
  optim::SGD opt({p}, 0.5);
  Tensor g = p * 2.0;
  g.value();
  opt.step({g});
  EXPECT_EQ(p.to_vector(), (std::vector<float>{0, 0, 0}));
  try {
    opt.step({g});
    ADD_FAILURE() << "step() used a gradient computed from a parameter changed since";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
  EXPECT_EQ(opt.replayed_steps(), 0);
}

TEST(EagerStep, AnOptimizerThatIsNotReplayableRecordsEveryStep) {
  // A user's optimizer whose update reads a value each step: never compiled into a replay.
  struct Halving : optim::Optimizer {
    explicit Halving(std::vector<Tensor> ps) : Optimizer(std::move(ps), 1.0) {}
    std::vector<std::pair<std::string, Tensor>> state() const override { return {}; }
    void update(size_t, Tensor p, const Tensor& g) override {
      const double scale = 1.0 / double(1 << steps());  // read on the host every step
      p.assign(p - g * scale);
    }
  };
  Tensor p = Tensor::zeros({2});
  p.requires_grad();
  Halving opt({p});
  for (int k = 0; k < 3; ++k) opt.step({Tensor::full({2}, 8.0)});
  EXPECT_EQ(p.to_vector(), (std::vector<float>{-7, -7}));  // 4 + 2 + 1
  EXPECT_EQ(opt.replayed_steps(), 0);
}

TEST(EagerStep, ReplayedUpdateFollowsTheParametersWrittenBetweenSteps) {
  // The compiled update reads each parameter's storage in place: a value copied in between two
  // steps (a checkpoint loaded) is what the next step updates.
  Tensor p = Tensor::zeros({3});
  p.requires_grad();
  optim::SGD opt({p}, 0.5);
  for (int k = 0; k < 2; ++k) opt.step({Tensor::full({3}, 1.0)});
  EXPECT_EQ(p.to_vector(), (std::vector<float>{-1, -1, -1}));
  p.assign(Tensor::full({3}, 4.0));
  opt.step({Tensor::full({3}, 1.0)});
  EXPECT_EQ(p.to_vector(), (std::vector<float>{3.5, 3.5, 3.5}));
  EXPECT_EQ(opt.replayed_steps(), 2);
}

}  // namespace
}  // namespace synoros
