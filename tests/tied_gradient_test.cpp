// A tied table's gradient: the embedding's rows added to the head's contribution where it lies
// give the bits of the two summed (signed zeros included), in place, and the GPT's tied table
// needs no buffer for the embedding's rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

TEST(TiedGradient, RowsAddedWhereTheOtherContributionLiesGiveTheBitsOfTheSum) {
  constexpr int64_t V = 5, D = 70, P = 7;  // 70 columns: one block of 64 and a remainder
  Graph g;
  ValueId dy = g.input(DType::F32, {P, D}, "dy"), idx = g.input(DType::I64, {P}, "idx");
  ValueId x = g.input(DType::F32, {V, D}, "x");
  ValueId base = g.unary(Op::Neg, x);  // computed, so the planner may hand its bytes on
  ValueId rows = g.add(Op::EmbeddingGrad, {dy, idx}, attr::Rows{V});
  ValueId sum = g.binary(Op::Add, base, rows);
  ValueId into = g.add(Op::EmbeddingGrad, {dy, idx, base}, attr::Rows{V});
  HostTensor dyv = testing::random_tensor({DType::F32, {P, D}, -2.0, 2.0}, 1);
  HostTensor xv = testing::random_tensor({DType::F32, {V, D}, -2.0, 2.0}, 2);
  HostTensor iv(DType::I64, {P});
  const int64_t picks[P] = {3, 0, 3, 1, 3, 0, 1};  // repeats, and rows 2 and 4 untouched
  for (int64_t p = 0; p < P; ++p) iv.data<int64_t>()[p] = picks[p];
  xv.data<float>()[2 * D + 5] = 0.0f;  // -x is -0: an untouched row's sum gives +0
  auto run = [&](const std::vector<ValueId>& outs) {
    Plan plan(g, outs);
    plan.set_input("dy", dyv);
    plan.set_input("idx", iv);
    plan.set_input("x", xv);
    plan.run();
    std::vector<HostTensor> r;
    for (ValueId o : outs) r.push_back(plan.read(o));
    return std::pair{std::move(r), plan.buffers()};
  };
  auto [expect, unused] = run({sum});
  auto [got, buffers] = run({into});
  ASSERT_EQ(std::memcmp(expect[0].buffer->data(), got[0].buffer->data(), expect[0].bytes()), 0);
  EXPECT_FALSE(std::signbit(got[0].data<float>()[2 * D + 5]));
  bool in_place = false;
  for (const BufferInfo& b : buffers) in_place = in_place || (b.value == into && b.inplace_of == base);
  EXPECT_TRUE(in_place) << "the rows were not added where the other contribution lies";
}

TEST(TiedGradient, TheGptTableNeedsNoBufferForTheEmbeddingsRows) {
  const nn::GptConfig c{64, 8, 16, 2, 2};
  nn::Gpt m(c, 1);
  CompiledStep step = compile_gpt_grad(m, 2);
  const Graph& g = step.plan().graph();
  int launched_plain = 0, launched_into = 0;
  for (const Launch& l : step.plan().launches()) {
    const Node& n = g.node(l.node);
    if (n.op == Op::EmbeddingGrad) (n.in.size() == 3 ? launched_into : launched_plain) += 1;
  }
  EXPECT_EQ(launched_plain, 0);
  EXPECT_EQ(launched_into, 1);
}

}  // namespace
}  // namespace synoros
