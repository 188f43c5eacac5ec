// The graphs autodiff builds: what a gradient costs in nodes, with its values checked.
#include <gtest/gtest.h>

#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

int count_op(const Graph& g, ValueId from, Op op) {
  int n = 0;
  for (size_t i = size_t(from); i < g.size(); ++i) n += g.node(ValueId(i)).op == op;
  return n;
}

// The gradient of sum(layernorm(x) * y) for the layernorm's output is y times the broadcast seed
// 1: y itself, so the layernorm's backward reads y and no product is made. A seed other than 1
// keeps its product.
TEST(AutodiffGraph, TimesOneIsNoProduct) {
  for (double seed_value : {1.0, 2.0}) {
    Graph g;
    ValueId x = g.input(DType::F32, {3, 5}, "x"), y = g.input(DType::F32, {3, 5}, "y");
    ValueId w = g.input(DType::F32, {5}, "w"), b = g.input(DType::F32, {5}, "b");
    ValueId ln = g.add(Op::LayerNorm, {x, w, b}, attr::Eps{1e-5});
    ValueId loss = g.sum(g.binary(Op::Mul, ln, y), {0, 1}, false);
    const ValueId before = ValueId(g.size());
    grad(g, loss, {x, w, b}, g.scalar(seed_value));
    int backwards = 0;
    for (size_t i = size_t(before); i < g.size(); ++i) {
      const Node& n = g.node(ValueId(i));
      if (n.op != Op::LayerNormBackward) continue;
      ++backwards;
      EXPECT_EQ(n.in[1] == y, seed_value == 1.0) << "seed " << seed_value;
    }
    EXPECT_EQ(backwards, 1);
    EXPECT_EQ(count_op(g, before, Op::Mul) > 0, seed_value != 1.0);
  }
}

// A 1 that would broadcast the other operand is still multiplied: the gradient of sum(x * w) for
// x (w of one element) is the seed's expand times w, a product.
TEST(AutodiffGraph, AOneThatBroadcastsIsStillAProduct) {
  Graph g;
  ValueId x = g.input(DType::F32, {4}, "x");
  ValueId w = g.input(DType::F32, {1}, "w");
  ValueId loss = g.sum(g.binary(Op::Mul, x, w), {0}, false);
  const ValueId before = ValueId(g.size());
  std::vector<ValueId> gr = grad(g, loss, {x});
  EXPECT_EQ(count_op(g, before, Op::Mul), 1);
  Plan p(g, {gr[0]});
  const HostTensor wv = testing::random_tensor({DType::F32, {1}}, 4);
  p.set_input(x, testing::random_tensor({DType::F32, {4}}, 3));
  p.set_input(w, wv);
  p.run();
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(p.read(gr[0]).get(i), wv.get(0)) << i;
}

// A gradient equal to a forward value is a value of its own: for sum(a * b), a's gradient has b's
// values but is not b (an optimizer writing b must not write a's gradient).
TEST(AutodiffGraph, AGradientIsNeverTheForwardValueItEquals) {
  Graph g;
  ValueId a = g.input(DType::F32, {3}, "a"), b = g.input(DType::F32, {3}, "b");
  std::vector<ValueId> gr = grad(g, g.sum(g.binary(Op::Mul, a, b), {0}, false), {a, b});
  EXPECT_NE(gr[0], b);
  EXPECT_NE(gr[1], a);

  Tensor ta = Tensor::randn({3}, 1), tb = Tensor::randn({3}, 2);
  ta.requires_grad();
  tb.requires_grad();
  (ta * tb).sum().backward();
  EXPECT_NE(ta.grad().impl(), tb.impl());
  EXPECT_NE(tb.grad().impl(), ta.impl());
  const HostTensor ga = ta.grad().value(), bv = tb.value();
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(ga.get(i), bv.get(i)) << i;
}

}  // namespace
}  // namespace synoros
