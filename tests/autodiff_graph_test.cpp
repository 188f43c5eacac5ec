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

// The gradient of sum(x * y) is y times the broadcast seed 1: y itself, no product, the same bits.
// A seed other than 1 keeps its product.
TEST(AutodiffGraph, TimesOneIsNoProduct) {
  for (double seed_value : {1.0, 2.0}) {
    Graph g;
    ValueId x = g.input(DType::F32, {3, 5}, "x"), y = g.input(DType::F32, {3, 5}, "y");
    ValueId loss = g.sum(g.binary(Op::Mul, x, y), {0, 1}, false);
    const ValueId before = ValueId(g.size());
    ValueId seed = g.scalar(seed_value);
    std::vector<ValueId> gr = grad(g, loss, {x}, seed);
    // (Both operands' gradients are built; with a seed of 2 each is a product.)
    EXPECT_EQ(count_op(g, before, Op::Mul), seed_value == 1.0 ? 0 : 2);
    Plan p(g, {gr[0]});
    const HostTensor yv = testing::random_tensor({DType::F32, {3, 5}}, 2);
    p.set_input(x, testing::random_tensor({DType::F32, {3, 5}}, 1));
    p.set_input(y, yv);
    p.run();
    const HostTensor dx = p.read(gr[0]);
    for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_EQ(dx.get(i), seed_value * yv.get(i)) << i;
  }
}

// A 1 that would broadcast the other operand, or change its dtype, is still multiplied.
TEST(AutodiffGraph, AOneThatBroadcastsIsStillAProduct) {
  Graph g;
  ValueId x = g.input(DType::F32, {4}, "x");
  ValueId w = g.input(DType::F32, {1}, "w");
  ValueId loss = g.sum(g.binary(Op::Mul, g.expand(w, {4}), x), {0}, false);
  std::vector<ValueId> gr = grad(g, loss, {w});
  Plan p(g, {gr[0]});
  const HostTensor xv = testing::random_tensor({DType::F32, {4}}, 3);
  p.set_input(x, xv);
  p.set_input(w, testing::random_tensor({DType::F32, {1}}, 4));
  p.run();
  double want = 0;
  for (int64_t i = 0; i < 4; ++i) want += xv.get(i);
  EXPECT_NEAR(p.read(gr[0]).get(0), want, 1e-5);
  EXPECT_EQ(g.shape(gr[0]), (Shape{1}));
}

}  // namespace
}  // namespace synoros
