// A compiled step's updates written straight into their parameters: the same bits as the same
// plan computing them aside (and the step copying them after the run), gradients that die at
// their update when no clipping waits for them all, and the steps that must keep the copy.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "test_util.hpp"

namespace synoros {
namespace {

constexpr int64_t kBatch = 2;

HostTensor tokens(const nn::GptConfig& c, uint64_t seed) {
  return testing::random_tensor({DType::I64, {kBatch, c.context}, 0, double(c.vocab)}, seed);
}

bool same_bits(const void* a, const void* b, size_t bytes) { return std::memcmp(a, b, bytes) == 0; }

struct StepMemory {
  size_t written_in_place = 0, aside = 0;
};

// Three steps of a small GPT under `opt`, each checked against a plan of the same graph without
// write-back run first on the same parameters. Returns the two plans' arenas.
// `every_one`: each update must be written in place (else at least one; SGD's momentum update of a
// weight matrix runs as the epilogue of the gradient's product, which writes its output first).
StepMemory check_steps(nn::Gpt& m, optim::Optimizer& opt, bool every_one) {
  const nn::GptConfig& c = m.cfg;
  CompiledStep step = train::compile_lm_train(m, opt, kBatch, c.context);
  const Plan& p = step.plan();
  StepMemory mem;
  EXPECT_FALSE(p.write_back().empty());
  size_t in_place = 0;
  for (const auto& [out, leaf] : p.write_back()) {
    EXPECT_TRUE(p.written_into(out) == leaf || p.written_into(out) == kNoValue);
    if (every_one) {
      EXPECT_EQ(p.written_into(out), leaf) << "update %" << out << " was not written into its parameter";
    }
    in_place += p.written_into(out) == leaf;
  }
  EXPECT_GT(in_place, 0u);
  Plan aside(p.graph(), p.outputs());
  for (const auto& [out, leaf] : p.write_back()) EXPECT_EQ(aside.written_into(out), kNoValue);
  for (uint64_t s = 0; s < 3; ++s) {
    HostTensor x = tokens(c, 10 + s), y = tokens(c, 20 + s);
    aside.set_input("arg0", x);
    aside.set_input("arg1", y);
    aside.run();
    HostTensor loss = aside.read(p.outputs()[0]);
    std::vector<HostTensor> expect;
    for (const auto& [out, leaf] : p.write_back()) expect.push_back(aside.read(out));
    std::vector<HostTensor> got = step({x, y});
    EXPECT_TRUE(same_bits(got[0].buffer->data(), loss.buffer->data(), loss.bytes())) << "step " << s;
    for (size_t i = 0; i < expect.size(); ++i) {
      const HostTensor& leaf = *p.graph().node(p.write_back()[i].second).data;
      EXPECT_TRUE(same_bits(leaf.buffer->data(), expect[i].buffer->data(), leaf.bytes()))
          << "step " << s << ", parameter %" << p.write_back()[i].second;
    }
  }
  mem.written_in_place = p.arena_bytes();
  mem.aside = aside.arena_bytes();
  return mem;
}

TEST(WriteBack, UpdatesWrittenIntoTheParametersGiveTheBitsComputedAside) {
  const nn::GptConfig c{32, 8, 16, 2, 2};
  for (double clip : {0.0, 1.0}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    nn::Gpt adam_model(c, 3);
    optim::AdamW adam(adam_model.parameters(), 1e-2, 0.9, 0.95, 1e-8, 0.1);
    adam.set_clip_norm(clip);
    StepMemory a = check_steps(adam_model, adam, true);
    nn::Gpt sgd_model(c, 4);
    optim::SGD sgd(sgd_model.parameters(), 0.1, 0.9, 1e-4);
    sgd.set_clip_norm(clip);
    StepMemory s = check_steps(sgd_model, sgd, false);
    for (const StepMemory& mem : {a, s}) EXPECT_LE(mem.written_in_place, mem.aside);
    if (clip == 0) {
      EXPECT_LT(a.written_in_place, a.aside);
    }
  }
}

// A model whose gradients outweigh its activations: with clipping (the global norm needs them all)
// every gradient is alive at once; without, each dies at its update, and the step needs a fraction.
// (The arena also depends on the kernels chosen, which a fresh tuning cache may time differently:
// 208-223 KB without clipping against 867 KB of parameters, so the bound leaves room.)
TEST(WriteBack, WithoutClippingGradientsDieAtTheirUpdates) {
  const nn::GptConfig c{256, 4, 64, 2, 4};
  size_t param_bytes = 0;
  std::vector<size_t> arena;
  for (double clip : {1.0, 0.0}) {
    nn::Gpt m(c, 5);
    optim::AdamW opt(m.parameters(), 1e-3);
    opt.set_clip_norm(clip);
    param_bytes = 0;
    for (const Tensor& t : m.parameters()) param_bytes += size_t(t.numel()) * 4;
    arena.push_back(train::compile_lm_train(m, opt, 1, c.context).plan().arena_bytes());
  }
  EXPECT_GE(arena[0], param_bytes);
  EXPECT_LT(arena[1], param_bytes / 3);
}

// Running a step's plan directly applies the updates written in place and moves the parameters'
// versions on (caches of their layouts follow); profiling it puts their values back.
TEST(WriteBack, ARunMovesTheVersionOnAndProfilingChangesNothing) {
  Tensor w = Tensor::from({1.0f, 2.0f}, {2}).requires_grad();
  optim::SGD opt({w}, 0.5);
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor loss = (a[0] * w * w).sum();
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      },
      {{DType::F32, {2}}});
  Plan& p = step.plan();
  ASSERT_EQ(p.write_back().size(), 1u);
  ASSERT_EQ(p.written_into(p.write_back()[0].first), p.write_back()[0].second);
  p.set_input("arg0", Tensor::from({1.0f, 1.0f}, {2}).value());
  const uint64_t v0 = w.value().buffer->version();
  p.run();
  EXPECT_EQ(w.to_vector(), (std::vector<float>{0.0f, 0.0f}));  // w - 0.5 * 2w
  EXPECT_GT(w.value().buffer->version(), v0);
  w.assign(Tensor::from({3.0f, 4.0f}, {2}));
  const uint64_t v1 = w.value().buffer->version();
  profile(p, 3, MachinePeak{});
  EXPECT_EQ(w.to_vector(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_GT(w.value().buffer->version(), v1);
}

// A step that reads a parameter after computing its update (in tape order) keeps the new value
// aside and copies it after the run: the later read sees the old value.
TEST(WriteBack, AParameterReadAfterItsUpdateKeepsTheCopy) {
  Tensor w = Tensor::from({1.0f, 2.0f, 3.0f}, {3});
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        w.assign(w * a[0]);
        return std::vector<Tensor>{((w + 1.0) * a[0]).sum()};
      },
      {{DType::F32, {3}}});
  ASSERT_EQ(step.plan().write_back().size(), 1u);
  EXPECT_EQ(step.plan().written_into(step.plan().write_back()[0].first), kNoValue);
  std::vector<HostTensor> out = step({Tensor::from({2.0f, 2.0f, 2.0f}, {3}).value()});
  EXPECT_EQ(out[0].get(0), 18.0);  // (1 + 1 + 2 + 1 + 3 + 1) * 2, from the old w
  EXPECT_EQ(w.to_vector(), (std::vector<float>{2.0f, 4.0f, 6.0f}));
}

// An update that reads its parameter at other positions than it writes (a transpose) must not
// overwrite what it still reads; a parameter the step returns is not written during the run.
TEST(WriteBack, UpdatesReadingOtherPositionsOrObservedParametersStayCorrect) {
  Tensor w = Tensor::from({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  CompiledStep turn = compile(
      [&](const std::vector<Tensor>& a) {
        w.assign(w.transpose() + a[0]);
        return std::vector<Tensor>{a[0].sum()};
      },
      {{DType::F32, {2, 2}}});
  turn({Tensor::zeros({2, 2}).value()});
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1.0f, 3.0f, 2.0f, 4.0f}));
  turn({Tensor::zeros({2, 2}).value()});
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));

  Tensor v = Tensor::from({1.0f, 2.0f}, {2});
  CompiledStep both = compile(
      [&](const std::vector<Tensor>& a) {
        v.assign(v + a[0]);
        return std::vector<Tensor>{v * 1.0, v.reshape({2, 1})};
      },
      {{DType::F32, {2}}});
  ASSERT_EQ(both.plan().write_back().size(), 1u);
  EXPECT_EQ(both.plan().written_into(both.plan().write_back()[0].first), kNoValue);
  std::vector<HostTensor> out = both({Tensor::from({10.0f, 20.0f}, {2}).value()});
  EXPECT_EQ(out[0].get(1), 2.0);   // computed from the old value
  EXPECT_EQ(out[1].get(0), 11.0);  // a view of the parameter: read after the step, as in PyTorch
  EXPECT_EQ(out[1].get(1), 22.0);
  EXPECT_EQ(v.to_vector(), (std::vector<float>{11.0f, 22.0f}));
}

}  // namespace
}  // namespace synoros
