// Short training runs on small Fashion-MNIST subsets: learning happens, and a run resumed from a
// checkpoint continues bit for bit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

std::vector<std::vector<uint8_t>> state_bytes(train::ClassifierTrainer& t) {
  std::vector<std::vector<uint8_t>> out;
  auto add = [&](const Tensor& x) {
    HostTensor h = x.value();
    auto* b = static_cast<const uint8_t*>(h.buffer->data());
    out.emplace_back(b, b + h.bytes());
  };
  for (auto& [n, x] : t.model().state_dict()) add(x);
  for (auto& [n, x] : t.optimizer().state()) add(x);
  return out;
}

train::ClassifierConfig small(const std::string& model, const std::string& opt) {
  train::ClassifierConfig c;
  c.model = model;
  c.optimizer = opt;
  c.lr = opt == "sgd" ? 0.05 : 2e-3;
  c.batch = 32;
  c.epochs = 2;
  c.train_limit = 256;  // 8 steps per epoch
  c.test_limit = 300;
  c.augment = true;
  return c;
}

TEST(Train, MlpLearnsFashionMnist) {
  train::ClassifierConfig c = small("mlp", "sgd");
  c.train_limit = 2048;
  c.epochs = 1;
  train::ClassifierTrainer t(c);
  auto [loss0, acc0] = t.evaluate();
  std::vector<double> losses;
  t.train_steps(t.total_steps(), [&](int64_t, double l) { losses.push_back(l); });
  auto [loss1, acc1] = t.evaluate();
  EXPECT_EQ(t.step(), 64);
  EXPECT_LT(loss1, loss0 * 0.6);
  EXPECT_GT(acc1, 0.65);  // chance is 0.10
  EXPECT_GT(acc1, acc0 + 0.4);
  double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[61] + losses[62] + losses[63]) / 3;
  EXPECT_LT(last, first * 0.6);
}

// 2N steps straight equal N steps + save + load into a fresh trainer + N steps, byte for byte.
void check_resume(const std::string& model, const std::string& opt) {
  std::string path = (std::filesystem::temp_directory_path() / ("synoros-resume-" + model + ".safetensors")).string();
  train::ClassifierTrainer straight(small(model, opt));
  straight.train_steps(12);
  train::ClassifierTrainer first(small(model, opt));
  first.train_steps(6);
  first.save(path);
  train::ClassifierTrainer resumed(small(model, opt));
  resumed.load(path);
  EXPECT_EQ(resumed.step(), 6);
  resumed.train_steps(6);
  EXPECT_EQ(state_bytes(straight), state_bytes(resumed)) << model << " / " << opt;
  std::remove(path.c_str());
}

TEST(Train, ResumeIsBitIdenticalMlpAdamW) { check_resume("mlp", "adamw"); }
TEST(Train, ResumeIsBitIdenticalResNetSgd) { check_resume("resnet-mini", "sgd"); }

TEST(Train, CheckpointOfAnotherModelIsRejected) {
  std::string path = (std::filesystem::temp_directory_path() / "synoros-wrong-model.safetensors").string();
  train::ClassifierTrainer a(small("mlp", "sgd"));
  a.save(path);
  train::ClassifierTrainer b(small("lenet", "sgd"));
  EXPECT_THROW(b.load(path), Error);
  std::remove(path.c_str());
}

// An evaluation-only trainer evaluates as a training one does, from the same checkpoint, and
// refuses to train or save (its loader would draw test images).
TEST(Train, AnEvaluationOnlyTrainerEvaluatesAndRefusesToTrain) {
  std::string path = (std::filesystem::temp_directory_path() / "synoros-eval-only.safetensors").string();
  train::ClassifierTrainer trained(small("mlp", "sgd"));
  trained.train_steps(3);
  trained.save(path);
  train::ClassifierConfig c = small("mlp", "sgd");
  c.evaluate_only = true;
  c.test_limit = 20;  // fewer images than the batch: clamped
  c.train_limit = 0;
  train::ClassifierTrainer eval(c);
  eval.load(path, false);
  train::ClassifierConfig same = small("mlp", "sgd");
  same.test_limit = 20;
  train::ClassifierTrainer reference(same);
  reference.load(path);
  EXPECT_EQ(eval.evaluate(), reference.evaluate());
  synoros::testing::expect_error([&] { eval.train_steps(1); }, {"evaluates only"});
  synoros::testing::expect_error([&] { eval.save(path + ".2"); }, {"evaluates only"});
  EXPECT_FALSE(std::filesystem::exists(path + ".2"));
  std::remove(path.c_str());
}

TEST(Train, BadConfigurationsRaiseErrors) {
  train::ClassifierConfig c = small("mlp", "sgd");
  c.model = "transformer-xl";
  EXPECT_THROW(train::ClassifierTrainer{c}, Error);
  c = small("mlp", "rmsprop");
  EXPECT_THROW(train::ClassifierTrainer{c}, Error);
  c = small("mlp", "sgd");
  c.batch = 100000;
  EXPECT_THROW(train::ClassifierTrainer{c}, Error);
  c = small("mlp", "sgd");
  c.data_dir = "/nonexistent";
  EXPECT_THROW(train::ClassifierTrainer{c}, Error);
}

}  // namespace
