// Operator search pieces: evaluation records, replayable action paths, the reward, networks with
// synthesized layers, and one real (tiny) proxy evaluation on Fashion-MNIST.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "synoros/data.hpp"
#include "synoros/search.hpp"

namespace synoros::search {
namespace {

// The first few canonical operators with weights for ResNetMini's layer spec.
std::vector<synth::Operator> some_operators(synth::Synthesizer& syn) {
  synth::EnumResult en = synth::enumerate(syn, true, 400);
  std::vector<synth::Operator> out;
  for (auto& op : en.operators)
    if (!op.weights.empty()) out.push_back(op);
  return out;
}

synth::Options depth(int d) {
  synth::Options o;
  o.max_depth = d;
  return o;
}

TEST(Search, EvaluationRecordsRoundTripThroughJson) {
  Evaluation e;
  e.key = "op \"quoted\"\nline";
  e.formula = "y[n,c,h,w] = sum_k x[n,k,h,w] * w0[c,k]";
  e.actions = "R1;S2";
  e.failed = true;
  e.error = "bad \\ thing";
  e.class_mask = 5;
  e.accuracy = 0.8125, e.loss = 0.53, e.trained_epochs = 2;
  e.latency = {1.5, 40.25, 1.25, 22.5};
  e.flops = 1.5e9, e.params = 123456, e.train_seconds = 3.5, e.reward = 0.75, e.order = 7;
  Evaluation r = evaluation_from_json(to_json(e));
  EXPECT_EQ(r.key, e.key);
  EXPECT_EQ(r.formula, e.formula);
  EXPECT_EQ(r.actions, e.actions);
  EXPECT_EQ(r.failed, e.failed);
  EXPECT_EQ(r.error, e.error);
  EXPECT_EQ(r.class_mask, e.class_mask);
  EXPECT_DOUBLE_EQ(r.accuracy, e.accuracy);
  EXPECT_EQ(r.trained_epochs, e.trained_epochs);
  EXPECT_DOUBLE_EQ(r.latency.b64_t1, e.latency.b64_t1);
  EXPECT_DOUBLE_EQ(r.latency.b1_t2, e.latency.b1_t2);
  EXPECT_DOUBLE_EQ(r.params, e.params);
  EXPECT_THROW(evaluation_from_json("{not json"), std::exception);
}

TEST(Search, ActionPathsRebuildTheSameOperator) {
  synth::Synthesizer syn(resnet_conv_spec(), depth(5));
  auto ops = some_operators(syn);
  ASSERT_GE(ops.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::string text = serialize_actions(ops[i].path);
    synth::Operator back = synth::build_from_actions(syn, parse_actions(text));
    EXPECT_EQ(back.canonical, ops[i].canonical) << text;
  }
  EXPECT_THROW(parse_actions("this is not an action path"), Error);
}

TEST(Search, RewardPenalisesOnlyLatencyAboveTheTarget) {
  SearchConfig cfg;  // target 1/1.5, weight 0.1
  Evaluation base, e;
  base.latency.b64_t1 = 10;
  e.accuracy = 0.8;
  e.latency.b64_t1 = 5;  // ratio 0.5: under the target, no penalty
  EXPECT_DOUBLE_EQ(reward(e, base, cfg), 0.8);
  e.latency.b64_t1 = 10;  // ratio 1 = 1.5x the target: penalty 0.1 * 0.5
  EXPECT_NEAR(reward(e, base, cfg), 0.75, 1e-12);
  e.failed = true;
  EXPECT_EQ(reward(e, base, cfg), -1);
}

TEST(Search, NetworksReplaceOnlyTheMaskedLayerClasses) {
  synth::Spec spec = resnet_conv_spec();
  synth::Synthesizer syn(spec, depth(5));
  auto ops = some_operators(syn);
  ASSERT_FALSE(ops.empty());
  auto base = make_network(spec, nullptr, 0, 1);
  auto none = make_network(spec, &ops[0], 0, 1);  // mask 0: every layer stays a convolution
  auto first = make_network(spec, &ops[0], 1, 1);
  auto all = make_network(spec, &ops[0], 7, 1);
  EXPECT_EQ(none->parameter_count(), base->parameter_count());
  EXPECT_NE(first->parameter_count(), base->parameter_count());
  EXPECT_NE(all->parameter_count(), first->parameter_count());
  all->train(false);
  Tensor y = all->forward(Tensor::randn({2, 1, 28, 28}, 3));
  HostTensor h = y.value();
  ASSERT_EQ(h.shape, (Shape{2, 10}));
  for (int64_t i = 0; i < 20; ++i) EXPECT_TRUE(std::isfinite(h.get(i)));
}

TEST(Search, EvaluateTrainsAndTimesATinyProxy) {
  if (!std::filesystem::exists(data::default_fashion_mnist_dir()))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  ProxyConfig cfg;
  cfg.train_images = 128, cfg.test_images = 64, cfg.batch = 32;
  Evaluation e = evaluate(resnet_conv_spec(), nullptr, 0, cfg);
  ASSERT_FALSE(e.failed) << e.error;
  EXPECT_EQ(e.key, "baseline");
  EXPECT_GE(e.accuracy, 0.0);
  EXPECT_LE(e.accuracy, 1.0);
  EXPECT_TRUE(std::isfinite(e.loss));
  EXPECT_GT(e.latency.b64_t1, 0);
  EXPECT_GT(e.latency.b1_t1, 0);
  EXPECT_GT(e.params, 0);
  EXPECT_GT(e.flops, 0);
  // A broken operator is a failed evaluation, never an exception.
  synth::Operator broken;
  broken.canonical = "broken";
  Evaluation b = evaluate(resnet_conv_spec(), &broken, 1, cfg);
  EXPECT_TRUE(b.failed);
  EXPECT_NE(b.error.find("output dims"), std::string::npos) << b.error;
}

}  // namespace
}  // namespace synoros::search
