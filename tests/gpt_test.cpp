// The GPT-style transformer end to end at a tiny size: the compiled training step matches the
// float64 oracle, fused+planned equals unfused+unplanned bit for bit, and training learns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

GptConfig tiny() { return {16, 6, 8, 2, 2, 2}; }

HostTensor tokens(const GptConfig& c, uint64_t seed) {
  return testing::random_tensor({DType::I64, {c.batch, c.context}, 0, double(c.vocab)}, seed);
}

TEST(Gpt, InitialLossIsNearUniform) {
  GptConfig c = tiny();
  Gpt m(c, 1);
  double loss = m.loss(Tensor::from(tokens(c, 2)), Tensor::from(tokens(c, 3))).item();
  EXPECT_NEAR(loss, std::log(double(c.vocab)), 0.3);
}

TEST(Gpt, TrainingStepMatchesOracleAndUnfusedBits) {
  testing::StrictKernels strict;
  GptConfig c = tiny();
  Gpt m(c, 1);
  CompiledStep step = compile_gpt_grad(m);
  const Plan& p = step.plan();
  HostTensor x = tokens(c, 2), y = tokens(c, 3);
  auto outs = step({x, y});
  // Against the oracle, every intermediate included.
  CompileOptions keep;
  keep.keep_intermediates = true;
  Plan checked(p.graph(), p.outputs(), keep);
  checked.set_input("arg0", x);
  checked.set_input("arg1", y);
  checked.run();
  VerifyResult r = verify(checked, true);
  EXPECT_TRUE(r.ok) << r.report;
  // Fusion and memory planning change no bit.
  for (size_t i = 0; i < outs.size(); ++i) {
    HostTensor ref = checked.read(p.outputs()[i]);
    EXPECT_EQ(0, std::memcmp(ref.buffer->data(), outs[i].buffer->data(), ref.bytes())) << "output " << i;
  }
  EXPECT_LT(p.arena_bytes(), p.unplanned_bytes());
}

TEST(Gpt, LearnsAFixedBatch) {
  GptConfig c = tiny();
  Gpt m(c, 1);
  HostTensor x = tokens(c, 2), y = tokens(c, 3);
  SGD opt(m.params(), 0.5);
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    Tensor loss = m.loss(Tensor::from(x), Tensor::from(y));
    loss.backward();
    opt.step();
    opt.zero_grad();
    (i == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.7 * first);
}

}  // namespace
}  // namespace synoros
