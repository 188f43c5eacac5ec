// Cheap members of a fused group (a float mul, add or sub with a scalar, a relu) folded into the
// operand their reader loads (fused.cpp's fold_stages): the bits must be the unfused plan's on
// every instruction set, for special values, both operand orders, scalars fed at run time,
// broadcast rows and strided reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernel_api.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

HostTensor special_tensor(const Shape& s, uint64_t seed) { return testing::special_tensor(s, seed, 5); }

void expect_same_bits(const Graph& g, ValueId y, const std::vector<std::pair<ValueId, HostTensor>>& feeds,
                      const std::string& what) {
  CompileOptions plain;
  plain.fuse = false;
  Plan fast(g, {y}), ref(g, {y}, plain);
  for (Plan* p : {&fast, &ref}) {
    for (const auto& [v, h] : feeds) p->set_input(v, h);
    p->run();
  }
  HostTensor a = fast.read(y), e = ref.read(y);
  ASSERT_EQ(a.bytes(), e.bytes());
  const float* pa = static_cast<const float*>(a.buffer->data());
  const float* pe = static_cast<const float*>(e.buffer->data());
  for (int64_t i = 0; i < numel(a.shape); ++i) {
    uint32_t ba, be;
    std::memcpy(&ba, pa + i, 4);
    std::memcpy(&be, pe + i, 4);
    ASSERT_EQ(ba, be) << what << " element " << i << ": fused " << pa[i] << ", unfused " << pe[i];
  }
}

class StageFold : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(StageFold, ChainsOfScalarOpsGiveTheUnfusedBits) {
  kernels::Isa isa = GetParam();
  if (int(isa) > int(kernels::best_isa())) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(isa);
  synoros::testing::IsaScope at_isa(isa);
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 100, 257, 1000}) {
    std::string at = std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n);
    // The chain, constants on the right: tanh((sigmoid(relu(1.5x + 0.5) x) - 0.25) 2).
    {
      Graph g;
      ValueId x = g.input(DType::F32, {n}, "x");
      ValueId t = g.binary(Op::Add, g.binary(Op::Mul, x, g.scalar(1.5)), g.scalar(0.5));
      t = g.binary(Op::Mul, g.unary(Op::Relu, t), x);
      t = g.binary(Op::Mul, g.binary(Op::Sub, g.unary(Op::Sigmoid, t), g.scalar(0.25)), g.scalar(2.0));
      expect_same_bits(g, g.unary(Op::Tanh, t), {{x, special_tensor({n}, 1)}}, at + " chain");
    }
    // Constants on the left, a scalar fed at run time (read when the plan runs, not when it is
    // built), and exp and gelu readers.
    {
      Graph g;
      ValueId x = g.input(DType::F32, {n}, "x"), s = g.input(DType::F32, {}, "s");
      ValueId t = g.binary(Op::Sub, g.scalar(0.75), g.binary(Op::Mul, s, x));
      ValueId u = g.unary(Op::Exp, g.binary(Op::Add, s, g.unary(Op::Relu, t)));
      ValueId y = g.binary(Op::Add, u, g.unary(Op::Gelu, g.binary(Op::Sub, s, x)));
      for (float sv : {0.5f, -2.0f, std::numeric_limits<float>::quiet_NaN()}) {
        HostTensor hs(DType::F32, {});
        hs.set(0, sv);
        expect_same_bits(g, y, {{x, special_tensor({n}, 2)}, {s, hs}}, at + " s=" + std::to_string(sv));
      }
    }
  }
  // A broadcast bias row (the tiled path), and a transposed read (strided: element by element).
  for (int64_t cols : {3, 32, 70}) {
    Graph g;
    ValueId x = g.input(DType::F32, {9, cols}, "x"), b = g.input(DType::F32, {cols}, "b");
    ValueId r = g.unary(Op::Relu, g.binary(Op::Mul, g.binary(Op::Add, x, b), g.scalar(3.0)));
    ValueId y = g.unary(Op::Sigmoid, g.binary(Op::Sub, g.binary(Op::Mul, r, b), g.scalar(1.0)));
    expect_same_bits(g, y, {{x, special_tensor({9, cols}, 3)}, {b, special_tensor({cols}, 4)}},
                     "bias cols=" + std::to_string(cols));
    Graph h;
    ValueId xt = h.input(DType::F32, {cols, 9}, "x");
    ValueId p = h.permute(xt, {1, 0});
    ValueId z = h.unary(Op::Tanh, h.binary(Op::Add, h.binary(Op::Mul, p, h.scalar(-1.25)), h.scalar(0.5)));
    expect_same_bits(h, z, {{xt, special_tensor({cols, 9}, 5)}}, "transposed cols=" + std::to_string(cols));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, StageFold,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         [](const auto& p) { return std::string(kernels::isa_name(p.param)); });

}  // namespace
}  // namespace synoros
