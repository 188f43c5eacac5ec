// Search: MCTS determinism, checkpoint and resume, random and beam baselines.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "synoros/synth.hpp"

namespace synoros::synth {
namespace {

Options opts() {
  Options o;
  o.max_depth = 6;
  return o;
}

// FLOPs of a 3×3 convolution at binding 0 (the proxy's reference).
double conv_flops(const Spec& sp) {
  return 2.0 * 2 * 32 * 32 * 28 * 28 * 9 * double(sp.bindings[0][0]) / 2;
}

std::vector<std::string> forms(const SearchResult& r) {
  std::vector<std::string> out;
  for (auto& [score, op] : r.best) out.push_back(std::to_string(score) + " " + op.canonical);
  return out;
}

TEST(SynthSearch, MctsIsDeterministicUnderASeedAndFindsGoodOperators) {
  Synthesizer s1(conv2d_spec(), opts()), s2(conv2d_spec(), opts());
  MctsOptions mo;
  mo.seed = 42;
  Mcts a(s1, flops_proxy_reward(s1, conv_flops(s1.spec()), 0.05, 0.5), mo);
  Mcts b(s2, flops_proxy_reward(s2, conv_flops(s2.spec()), 0.05, 0.5), mo);
  SearchResult ra = a.run(300), rb = b.run(300);
  EXPECT_EQ(ra.iterations, 300u);
  EXPECT_EQ(forms(ra), forms(rb));
  EXPECT_EQ(ra.evaluations, rb.evaluations);
  ASSERT_FALSE(ra.best.empty());
  EXPECT_GT(ra.evaluations, 20u);
  EXPECT_GT(a.nodes(), 50u);
  // Rewards are sorted and the best operator lies inside the FLOPs window.
  for (size_t i = 1; i < ra.best.size(); ++i) EXPECT_GE(ra.best[i - 1].first, ra.best[i].first);
  EXPECT_DOUBLE_EQ(ra.best[0].first, 1.0);
  double f = stats(s1.spec(), ra.best[0].second, binding(s1.spec(), 0)).flops / conv_flops(s1.spec());
  EXPECT_GE(f, 0.05);
  EXPECT_LE(f, 0.5);
}

TEST(SynthSearch, KilledSearchResumesWhereItStopped) {
  std::string ck = ::testing::TempDir() + "synth_mcts_" + std::to_string(::getpid()) + ".ckpt";
  MctsOptions mo;
  mo.seed = 7;
  Synthesizer s0(conv2d_spec(), opts());
  Mcts whole(s0, flops_proxy_reward(s0, conv_flops(s0.spec())), mo);
  SearchResult straight = whole.run(240);

  mo.checkpoint = ck;
  mo.checkpoint_every = 40;
  {
    Synthesizer s1(conv2d_spec(), opts());
    Mcts first(s1, flops_proxy_reward(s1, conv_flops(s1.spec())), mo);
    first.run(120);  // "killed" here: the object and its synthesizer are gone
  }
  Synthesizer s2(conv2d_spec(), opts());
  Mcts resumed(s2, flops_proxy_reward(s2, conv_flops(s2.spec())), mo);
  resumed.load(ck);
  EXPECT_EQ(resumed.iterations(), 120u);
  SearchResult rest = resumed.run(240);
  EXPECT_EQ(rest.iterations, 240u);
  EXPECT_EQ(forms(rest), forms(straight));
  EXPECT_EQ(rest.evaluations, straight.evaluations);
  EXPECT_EQ(resumed.nodes(), whole.nodes());

  // A checkpoint for another spec, or a damaged one, is refused with a clear error.
  Options other = opts();
  other.max_depth = 5;
  Synthesizer s3(conv2d_spec(), other);
  Mcts wrong(s3, flops_proxy_reward(s3, 1e9), mo);
  EXPECT_THROW(wrong.load(ck), Error);
  {
    std::ifstream in(ck);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(ck);
    out << text.substr(0, text.size() / 2);
  }
  Synthesizer s4(conv2d_spec(), opts());
  Mcts damaged(s4, flops_proxy_reward(s4, 1e9), mo);
  EXPECT_THROW(damaged.load(ck), Error);
  std::remove(ck.c_str());
}

TEST(SynthSearch, RandomAndBeamBaselines) {
  Synthesizer s1(conv2d_spec(), opts()), s2(conv2d_spec(), opts());
  auto reward = flops_proxy_reward(s1, conv_flops(s1.spec()), 0.05, 0.5);
  SearchResult r1 = random_search(s1, reward, 200, 3), r2 = random_search(s2, reward, 200, 3);
  EXPECT_EQ(forms(r1), forms(r2));
  ASSERT_FALSE(r1.best.empty());
  EXPECT_GT(r1.evaluations, 20u);
  for (auto& [score, op] : r1.best) {
    EXPECT_GE(score, 0.0);
    EXPECT_LE(score, 1.0);
    EXPECT_EQ(build_from_actions(s1, op.path).canonical, op.canonical);
  }
  SearchResult b = beam_search(s1, reward, 4, 5);
  ASSERT_FALSE(b.best.empty());
  EXPECT_GT(b.evaluations, 5u);
  for (auto& [score, op] : b.best) EXPECT_EQ(build_from_actions(s1, op.path).canonical, op.canonical);
}

}  // namespace
}  // namespace synoros::synth
