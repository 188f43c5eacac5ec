// Bad input raises synoros::Error naming the op, the shapes and the cause; nothing crashes.
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace synoros {
namespace {
using testing::expect_error;

TEST(BadInput, ShapeMismatchWhileBuilding) {
  Graph g;
  ValueId a = g.input(DType::F32, {3, 4}, "a"), b = g.input(DType::F32, {5, 4}, "b");
  expect_error([&] { g.binary(Op::Add, a, b); }, {"add", "[3,4]", "[5,4]", "do not broadcast"});
  expect_error([&] { g.matmul(a, b); }, {"einsum", "[3,4]", "[5,4]", "size"});
}

TEST(BadInput, BatchNormStatisticsOfTheWrongShape) {
  Graph g;
  ValueId x = g.input(DType::F32, {8, 3, 4, 4}, "x"), c3 = g.input(DType::F32, {3}, "c3"),
          c4 = g.input(DType::F32, {4}, "c4"), v = g.input(DType::F32, {8}, "v");
  attr::BatchNorm at{1e-5, false};
  expect_error([&] { g.add(Op::BatchNorm, {x, c3, c4, c3, c3}, at); }, {"batchnorm", "var", "[3]", "[8,3,4,4]", "[4]"});
  expect_error([&] { g.add(Op::BatchNorm, {v, v, v, v, v}, at); }, {"batchnorm", "rank 2", "[8]"});
  at.eps = 0;
  expect_error([&] { g.add(Op::BatchNorm, {x, c3, c3, c3, c3}, at); }, {"batchnorm", "eps"});
  // Attributes of another op's kind, or none where the op needs its own, are refused by name.
  expect_error([&] { g.add(Op::BatchNorm, {x, c3, c3, c3, c3}, attr::Eps{1e-5}); },
               {"batchnorm", "attr::batchnorm", "attr::eps"});
  expect_error([&] { g.add(Op::Softmax, {x}); }, {"softmax", "attr::axis", "none"});
}

TEST(BadInput, DtypeMismatchWhileBuilding) {
  Graph g;
  ValueId a = g.input(DType::F32, {3}, "a"), b = g.input(DType::F64, {3}, "b");
  expect_error([&] { g.binary(Op::Mul, a, b); }, {"mul", "f32[3]", "f64[3]", "dtype mismatch"});
}

TEST(BadInput, AxisOutOfRange) {
  Graph g;
  ValueId a = g.input(DType::F32, {3, 4}, "a");
  expect_error([&] { g.sum(a, {2}); }, {"sum", "[3,4]", "axis 2 is out of range"});
  expect_error([&] { g.add(Op::Softmax, {a}, attr::Axis{-3}); }, {"softmax", "[3,4]", "out of range"});
}

TEST(BadInput, MissingFeedAtRunTime) {
  Graph g;
  ValueId a = g.input(DType::F32, {2}, "a"), b = g.input(DType::F32, {2}, "b");
  Plan p(g, {g.binary(Op::Add, a, b)});
  p.set_input(a, HostTensor(DType::F32, {2}));
  expect_error([&] { p.run(); }, {"no value was fed", "'b'"});
}

TEST(BadInput, UnknownFeedName) {
  Graph g;
  ValueId a = g.input(DType::F32, {2}, "a");
  Plan p(g, {g.unary(Op::Exp, a)});
  expect_error([&] { p.set_input("nope", HostTensor(DType::F32, {2})); }, {"unknown input 'nope'", "a"});
}

TEST(BadInput, FeedOfTheWrongShapeOrDtype) {
  Graph g;
  ValueId a = g.input(DType::F32, {8, 16}, "x");
  Plan p(g, {g.unary(Op::Relu, a)});
  expect_error([&] { p.set_input(a, HostTensor(DType::F32, {4, 16})); }, {"'x'", "f32[8,16]", "f32[4,16]"});
  expect_error([&] { p.set_input(a, HostTensor(DType::F64, {8, 16})); }, {"'x'", "f64[8,16]"});
}

TEST(BadInput, NonFiniteValueWhenCheckingIsOn) {
  Graph g;
  ValueId a = g.input(DType::F32, {3}, "a");
  ValueId y = g.unary(Op::Log, a);
  CompileOptions opts;
  opts.check_finite = true;
  Plan p(g, {g.unary(Op::Exp, y)}, opts);
  HostTensor v(DType::F32, {3});
  v.set(0, 1.0), v.set(1, -1.0), v.set(2, 2.0);
  p.set_input(a, v);
  expect_error([&] { p.run(); }, {"non-finite", "log", "f32[3]", "element 1"});
  // Unchecked plans run through (the default costs nothing per launch).
  Plan q(g, {y});
  q.set_input(a, v);
  EXPECT_NO_THROW(q.run());
}

TEST(BadInput, IndexOutOfRangeInEmbedding) {
  Graph g;
  ValueId w = g.input(DType::F32, {4, 2}, "w"), i = g.input(DType::I64, {3}, "i");
  Plan p(g, {g.add(Op::Embedding, {w, i})});
  p.set_input(w, HostTensor(DType::F32, {4, 2}));
  HostTensor idx(DType::I64, {3});
  idx.set(1, 9);
  p.set_input(i, idx);
  expect_error([&] { p.run(); }, {"embedding", "index 9", "[0, 4)"});
}

TEST(BadInput, FrontEndErrorsNameTheOp) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  expect_error([&] { (void)(a + b); }, {"add", "[2,3]", "[4]"});
  expect_error([&] { Tensor::zeros({2}).backward(); }, {"backward", "scalar"});
  expect_error([&] { a.reshape({5}); }, {"reshape", "6 elements", "[5]"});
}

TEST(BadInput, BadEinsumSpec) {
  Graph g;
  ValueId a = g.input(DType::F32, {3, 4}, "a");
  expect_error([&] { g.einsum("ii->i", {a}); }, {"einsum", "repeats"});
  expect_error([&] { g.einsum("ij->k", {a}); }, {"einsum", "'k'"});
  expect_error([&] { g.einsum("ij", {a}); }, {"einsum", "->"});
}

}  // namespace
}  // namespace synoros
