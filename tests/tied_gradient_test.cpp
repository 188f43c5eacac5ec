// A tied table's gradient: the embedding's rows added to the head's contribution where it lies
// give the bits of the two summed (signed zeros included), in place, and the GPT's tied table
// needs no buffer for the embedding's rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

// V rows in chunks of 64 (the last one partial), 70 columns (a block of 64 and a remainder).
void check_rows_added(DType dt, int64_t V) {
  constexpr int64_t D = 70, P = 7;
  Graph g;
  ValueId dy = g.input(dt, {P, D}, "dy"), idx = g.input(DType::I64, {P}, "idx");
  ValueId x = g.input(dt, {V, D}, "x");
  ValueId base = g.unary(Op::Neg, x);  // computed, so the planner may hand its bytes on
  ValueId rows = g.add(Op::EmbeddingGrad, {dy, idx}, attr::Rows{V});
  ValueId sum = g.binary(Op::Add, base, rows);
  ValueId into = g.add(Op::EmbeddingGrad, {dy, idx, base}, attr::Rows{V});
  HostTensor dyv = testing::random_tensor({dt, {P, D}, -2.0, 2.0}, 1);
  HostTensor xv = testing::random_tensor({dt, {V, D}, -2.0, 2.0}, 2);
  HostTensor iv(DType::I64, {P});
  const int64_t picks[P] = {3, 0, 3, V - 1, 3, 0, V - 1};  // repeats; row 2 untouched
  for (int64_t p = 0; p < P; ++p) iv.data<int64_t>()[p] = picks[p];
  xv.set(2 * D + 5, 0.0);  // -x is -0: an untouched row's sum gives +0
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
  EXPECT_FALSE(std::signbit(got[0].get(2 * D + 5)));
  bool in_place = false;
  for (const BufferInfo& b : buffers) in_place = in_place || (b.value == into && b.inplace_of == base);
  EXPECT_TRUE(in_place) << "the rows were not added where the other contribution lies";
}

TEST(TiedGradient, RowsAddedWhereTheOtherContributionLiesGiveTheBitsOfTheSum) {
  check_rows_added(DType::F32, 5);
  check_rows_added(DType::F32, 200);  // four chunks of rows, run by the pool
  check_rows_added(DType::F64, 200);
}

// Where the gradient added to is also the rows' own upstream gradient, running in place would
// overwrite rows it still reads: the planner gives it a buffer of its own.
TEST(TiedGradient, AGradientThatIsAlsoTheRowsSourceIsNotOverwritten) {
  constexpr int64_t V = 6, D = 3;
  Graph g;
  ValueId x = g.input(DType::F32, {V, D}, "x"), idx = g.input(DType::I64, {V}, "idx");
  ValueId t = g.unary(Op::Neg, x);
  ValueId rows = g.add(Op::EmbeddingGrad, {t, idx}, attr::Rows{V});
  ValueId sum = g.binary(Op::Add, t, rows);
  ValueId into = g.add(Op::EmbeddingGrad, {t, idx, t}, attr::Rows{V});
  HostTensor xv = testing::random_tensor({DType::F32, {V, D}, -2.0, 2.0}, 3);
  HostTensor iv(DType::I64, {V});
  const int64_t picks[V] = {5, 4, 3, 2, 1, 0};  // each row reads another's source
  for (int64_t p = 0; p < V; ++p) iv.data<int64_t>()[p] = picks[p];
  std::vector<HostTensor> out;
  for (ValueId o : {sum, into}) {
    Plan plan(g, {o});
    plan.set_input("x", xv);
    plan.set_input("idx", iv);
    plan.run();
    out.push_back(plan.read(o));
    for (const BufferInfo& b : plan.buffers()) EXPECT_FALSE(b.value == into && b.inplace_of == t);
  }
  EXPECT_EQ(std::memcmp(out[0].buffer->data(), out[1].buffer->data(), out[0].bytes()), 0);
}

TEST(TiedGradient, TheGptTableNeedsNoBufferForTheEmbeddingsRows) {
  const nn::GptConfig c{64, 8, 16, 2, 2};
  nn::Gpt m(c, 1);
  CompiledStep step = compile_gpt_grad(m, 2);
  const Graph& g = step.plan().graph();
  int launched_plain = 0, launched_into = 0;
  ValueId added = kNoValue;
  for (const Launch& l : step.plan().launches()) {
    const Node& n = g.node(l.node);
    if (n.op != Op::EmbeddingGrad) continue;
    (n.in.size() == 3 ? launched_into : launched_plain) += 1;
    if (n.in.size() == 3) added = l.node;
  }
  EXPECT_EQ(launched_plain, 0);
  ASSERT_EQ(launched_into, 1);
  bool in_place = false;
  for (const BufferInfo& b : step.plan().buffers())
    in_place = in_place || (b.value == added && b.inplace_of == g.node(added).in[2]);
  EXPECT_TRUE(in_place) << "the head's contribution was not taken over";
}

}  // namespace
}  // namespace synoros
