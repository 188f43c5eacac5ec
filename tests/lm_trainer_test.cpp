// The language-model trainer's gradient accumulation: micro-batches (the micro-shards of a
// data-parallel step) give the gradient of one batch of the same windows (within float32
// rounding), and runs with it rerun and resume bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "test_util.hpp"

namespace synoros {
namespace {

std::vector<float> flat(const nn::Named& params) {
  std::vector<float> out;
  for (auto& [n, p] : params) {
    std::vector<float> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(GradientAccumulation, TwoHalvesGiveTheGradientOfTheWholeBatch) {
  nn::GptConfig c{40, 8, 16, 2, 2};
  HostTensor x = testing::random_tensor({DType::I64, {4, 8}, 0, 40.0}, 2);
  HostTensor y = testing::random_tensor({DType::I64, {4, 8}, 0, 40.0}, 3);
  auto rows = [](const HostTensor& t, int64_t first) {
    HostTensor h(DType::I64, {2, 8});
    for (int64_t i = 0; i < 16; ++i) h.set(i, t.get(first * 8 + i));
    return h;
  };
  // SGD with lr 1: each parameter moves by exactly its gradient.
  nn::Gpt whole(c, 1), split(c, 1);
  optim::SGD opt_whole(whole.parameters(), 1.0), opt_split(split.parameters(), 1.0);
  CompiledStep one = train::compile_lm_train(whole, opt_whole, 4, 8);
  split.train();
  // Small buckets: the last micro-batch's gradients are folded while its backward pass runs.
  dist::DataParallelStep halves([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{train::lm_loss(split, a[0], a[1])}; },
                                {{DType::I64, {2, 8}}, {DType::I64, {2, 8}}}, opt_split, {}, 2, nullptr, 256);
  std::vector<float> before = flat(whole.named_parameters());
  opt_whole.tick();
  double loss_whole = one({x, y})[0].get(0);
  opt_split.tick();
  std::vector<double> losses = halves.run([&](int64_t i) { return std::vector<HostTensor>{rows(x, 2 * i), rows(y, 2 * i)}; },
                                          [](int64_t, const std::vector<HostTensor>& out) {
                                            return std::vector<double>{out[0].get(0)};
                                          },
                                          1);
  ASSERT_EQ(losses.size(), 2u);
  double loss_a = losses[0], loss_b = losses[1];
  EXPECT_NEAR(loss_whole, (loss_a + loss_b) / 2, 1e-6 * std::fabs(loss_whole));
  std::vector<float> a = flat(whole.named_parameters()), b = flat(split.named_parameters());
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, moved = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, double(std::fabs(a[i] - b[i])));
    moved = std::max(moved, double(std::fabs(a[i] - before[i])));
  }
  EXPECT_GT(moved, 1e-3);       // the step did move the parameters
  EXPECT_LT(worst, 1e-5 * moved + 1e-7);  // by the same gradient, to float32 rounding
}

TEST(GradientAccumulation, TrainerRerunsAndResumesBitForBit) {
  testing::TempDir dir("lm_accum");
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 300; ++i) text << "line " << i % 13 << " of some text to learn\n";
  }
  train::LmConfig cfg;
  cfg.model = {256, 16, 16, 2, 1};
  cfg.text_file = dir.file("text.txt");
  cfg.batch = 2, cfg.accum = 3, cfg.steps = 4, cfg.warmup_steps = 1, cfg.lr = 3e-3;
  train::LmTrainer straight(cfg);
  std::vector<double> losses;
  straight.train_steps(4, [&](int64_t, double l) { losses.push_back(l); });
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(straight.run_metadata().at("accum"), "3");

  train::LmTrainer again(cfg);
  std::vector<double> again_losses;
  again.train_steps(4, [&](int64_t, double l) { again_losses.push_back(l); });
  EXPECT_EQ(again_losses, losses);
  EXPECT_EQ(flat(again.model().named_parameters()), flat(straight.model().named_parameters()));

  train::LmTrainer first(cfg);
  first.train_steps(2);
  first.save(dir.file("ck.safetensors"));
  train::LmTrainer resumed(cfg);
  resumed.load(dir.file("ck.safetensors"));
  resumed.train_steps(2);
  EXPECT_EQ(flat(resumed.model().named_parameters()), flat(straight.model().named_parameters()));

  // A step of accum x batch windows in one batch sees the same windows: the same first loss.
  train::LmConfig one = cfg;
  one.batch = 6, one.accum = 1;
  train::LmTrainer whole(one);
  double whole_loss = 0;
  whole.train_steps(1, [&](int64_t, double l) { whole_loss = l; });
  EXPECT_NEAR(whole_loss, losses[0], 1e-5 * std::fabs(whole_loss));
  train::LmConfig other = cfg;
  other.accum = 2;
  train::LmTrainer changed(other);
  testing::expect_error([&] { changed.load(dir.file("ck.safetensors")); }, {"accum"});
}

}  // namespace
}  // namespace synoros
