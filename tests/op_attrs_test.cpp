// Typed op attributes: each op takes its own struct, and equality, hashing and printing see every
// field of it.
#include <gtest/gtest.h>

#include "synoros/ir.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// One graph of a slice (axis 1, [start, end)) of a [4, 6] input.
Graph sliced(Attrs at) {
  Graph g;
  ValueId x = g.input(DType::F32, {4, 6}, "x");
  g.add(Op::Slice, {x}, std::move(at));
  return g;
}

TEST(OpAttrs, EveryFieldCountsForEqualityAndTheHash) {
  const Graph a = sliced(attr::Slice{1, 0, 2}), same = sliced(attr::Slice{1, 0, 2});
  EXPECT_TRUE(a.structurally_equal(same));
  EXPECT_EQ(a.structural_hash(), same.structural_hash());
  for (const attr::Slice& other : {attr::Slice{0, 0, 2}, attr::Slice{1, 1, 2}, attr::Slice{1, 0, 3}}) {
    const Graph b = sliced(other);
    EXPECT_FALSE(a.structurally_equal(b)) << b.to_string();
    EXPECT_NE(a.structural_hash(), b.structural_hash()) << b.to_string();
  }
  // Fields of other kinds: a bool, a double, an optional.
  auto attention = [](attr::Attention at) {
    Graph g;
    ValueId q = g.input(DType::F32, {3, 4}, "q");
    g.add(Op::Attention, {q, q, q}, at);
    return g;
  };
  EXPECT_NE(attention({false, 0.5}).structural_hash(), attention({true, 0.5}).structural_hash());
  EXPECT_NE(attention({false, 0.5}).structural_hash(), attention({false, 0.25}).structural_hash());
  auto xent = [](attr::CrossEntropy at) {
    Graph g;
    g.add(Op::CrossEntropy, {g.input(DType::F32, {3, 4}, "x"), g.input(DType::I64, {3}, "t")}, at);
    return g;
  };
  EXPECT_NE(xent({}).structural_hash(), xent({0}).structural_hash());
  EXPECT_FALSE(xent({}).structurally_equal(xent({0})));
  EXPECT_NE(xent({0}).structural_hash(), xent({1}).structural_hash());
}

TEST(OpAttrs, PrintedWithTheirStruct) {
  const std::string s = sliced(attr::Slice{1, 0, 2}).to_string();
  EXPECT_NE(s.find("slice{1, 0, 2}"), std::string::npos) << s;
  Graph g;
  ValueId x = g.input(DType::F32, {2, 3}, "x");
  g.sum(x, {1}, true);
  g.einsum("ab->ba", {x});
  const std::string t = g.to_string();
  EXPECT_NE(t.find("reduce{[1], 1}"), std::string::npos) << t;
  EXPECT_NE(t.find("einsum{\"ab->ba\"}"), std::string::npos) << t;
}

TEST(OpAttrs, AnOpRefusesAnotherOpsAttributes) {
  Graph g;
  ValueId x = g.input(DType::F32, {4, 6}, "x");
  testing::expect_error([&] { g.add(Op::Slice, {x}, attr::Pad{1, 0, 2}); }, {"slice", "attr::slice", "attr::pad"});
  testing::expect_error([&] { g.add(Op::Relu, {x}, attr::Axis{0}); }, {"relu", "attr::none", "attr::axis"});
  testing::expect_error([&] { g.add(Op::Slice, {x}); }, {"slice", "attr::slice", "none"});
  // Reading a node's attributes as another struct names both.
  const Node& n = g.node(g.add(Op::Slice, {x}, attr::Slice{1, 0, 2}));
  EXPECT_EQ(n.attr<attr::Slice>().end, 2);
  testing::expect_error([&] { (void)n.attr<attr::Pad>(); }, {"slice", "attr::pad", "attr::slice"});
}

TEST(OpAttrs, ReductionsAndCrossEntropyGivenNoneTakeTheirDefaults) {
  Graph g;
  ValueId x = g.input(DType::F32, {2, 3, 5}, "x");
  ValueId all = g.add(Op::Sum, {x});  // every axis
  EXPECT_TRUE(g.shape(all).empty());
  EXPECT_EQ(g.node(all).attrs, Attrs(attr::Reduce{}));
  ValueId ce = g.add(Op::CrossEntropy, {g.input(DType::F32, {3, 4}, "l"), g.input(DType::I64, {3}, "t")});
  EXPECT_FALSE(g.node(ce).attr<attr::CrossEntropy>().ignore_index.has_value());
}

TEST(OpAttrs, UnfoldTakesNoLength) {
  Graph g;
  ValueId x = g.input(DType::F32, {2, 7}, "x");
  testing::expect_error([&] { g.add(Op::Unfold, {x}, attr::Window{1, 3, 1, 1, 7}); }, {"unfold", "length"});
  EXPECT_EQ(g.shape(g.add(Op::Unfold, {x}, attr::Window{1, 3, 1, 2})), (Shape{2, 4, 3}));
}

}  // namespace
}  // namespace synoros
