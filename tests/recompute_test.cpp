// Activation checkpointing: a checkpointed segment's values are computed again for the backward
// pass instead of being kept; the gradients are the same bits and the plan keeps less.
#include <gtest/gtest.h>

#include <cstring>

#include "synoros/autodiff.hpp"
#include "synoros/gpt.hpp"
#include "synoros/nn.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// x -> segment { h = tanh(x W1); y = h * sigmoid(h) } -> loss = sum(y W2): the tape-level rule.
TEST(Recompute, TheBackwardReadsNoForwardCopyOfASegmentsValues) {
  Graph g;
  ValueId x = g.input(DType::F32, {16, 32}, "x");
  ValueId w1 = g.param(std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {32, 24}}, 1)), "w1");
  ValueId w2 = g.param(std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {24, 8}}, 2)), "w2");
  size_t first = g.size();
  ValueId h = g.unary(Op::Tanh, g.matmul(x, w1));
  ValueId y = g.binary(Op::Mul, h, g.unary(Op::Sigmoid, h));
  size_t last = g.size();
  ValueId loss = g.sum(g.matmul(y, w2), {0, 1});
  Graph plain = g;
  std::vector<int32_t> segment(g.size(), -1);
  for (size_t i = first; i < last; ++i) segment[i] = 0;
  std::vector<ValueId> grads = grad(g, loss, {w1, w2}, kNoValue, segment);
  std::vector<ValueId> plain_grads = grad(plain, loss, {w1, w2});
  // Only y (read by the product after the segment) is read in the backward part of the tape.
  for (size_t i = size_t(loss) + 1; i < g.size(); ++i)
    for (ValueId in : g.node(ValueId(i)).in) {
      if (size_t(in) >= first && size_t(in) < last) {
        EXPECT_EQ(in, y) << "%" << i << " reads the forward copy %" << in;
      }
    }
  EXPECT_GT(g.size(), plain.size());  // the recomputed values
  HostTensor xv = testing::random_tensor({DType::F32, {16, 32}}, 3);
  Plan p(g, grads), q(plain, plain_grads);
  p.set_input(x, xv);
  q.set_input(x, xv);
  p.run();
  q.run();
  for (size_t k = 0; k < grads.size(); ++k)
    testing::expect_same_bits(p.read(grads[k]), q.read(plain_grads[k]), "gradient " + std::to_string(k));
}

// Eagerly, with several inputs and outputs, an output used twice and a nested segment.
TEST(Recompute, EagerGradientsAreTheSameBits) {
  auto run = [](bool checkpointed) {
    Tensor a = Tensor::from(testing::random_tensor({DType::F32, {8, 12}}, 4)).requires_grad();
    Tensor b = Tensor::from(testing::random_tensor({DType::F32, {12, 12}}, 5)).requires_grad();
    auto inner = [](const Tensor& t) { return (t * t).tanh(); };
    auto body = [&](const std::vector<Tensor>& in) {
      Tensor u = in[0].matmul(in[1]).sigmoid();
      Tensor v = checkpointed ? nn::checkpoint(inner, u) : inner(u);
      return std::vector<Tensor>{u + v, v.exp()};
    };
    std::vector<Tensor> out = checkpointed ? nn::checkpoint(body, {a, b}) : body({a, b});
    Tensor loss = (out[0] * out[1]).sum() + out[0].mean();
    loss.backward();
    return std::vector<HostTensor>{loss.value(), a.grad().value(), b.grad().value()};
  };
  std::vector<HostTensor> with = run(true), without = run(false);
  for (size_t k = 0; k < with.size(); ++k) testing::expect_same_bits(with[k], without[k], "value " + std::to_string(k));
}

TEST(Recompute, AGptStepKeepsLessAndGivesTheSameBits) {
  nn::GptConfig c = nn::GptConfig::preset("gpt-tiny");
  const int64_t batch = 16;
  HostTensor x(DType::I64, {batch, c.context}), y(DType::I64, {batch, c.context});
  for (int64_t i = 0; i < x.numel(); ++i) x.set(i, double((i * 5) % c.vocab)), y.set(i, double((i * 11 + 3) % c.vocab));
  auto step = [&](bool checkpointed, size_t& arena) {
    nn::Gpt m(c, 1);
    m.checkpoint_blocks = checkpointed;
    CompiledStep s = compile_gpt_grad(m, batch);
    arena = s.plan().arena_bytes();
    return s({x, y});
  };
  size_t arena_with = 0, arena_without = 0;
  std::vector<HostTensor> with = step(true, arena_with), without = step(false, arena_without);
  ASSERT_EQ(with.size(), without.size());
  for (size_t k = 0; k < with.size(); ++k) testing::expect_same_bits(with[k], without[k], "output " + std::to_string(k));
  // Here the activations outweigh the parameters' gradients: 13.4 MB against 22.2 MB when measured.
  EXPECT_LT(double(arena_with), 0.75 * double(arena_without));
}

}  // namespace
}  // namespace synoros
