// The oracle's one-element contraction (oracle/contraction.hpp) against sums written out by hand,
// and its verdict on computed elements.
#include <gtest/gtest.h>

#include <cmath>

#include "oracle/contraction.hpp"

namespace synoros {
namespace {

TEST(OraclePoint, MatrixProductOverStridedOperands) {
  // A [2, 3] stored transposed (a_rs 1, a_cs 2), B [3, 2] row-major: C = A B.
  const float A[] = {1, 4, 2, 5, 3, 6};  // A = [[1, 2, 3], [4, 5, 6]]
  const float B[] = {1, -1, 2, 0.5f, -3, 4};
  const oracle::Operand ops[] = {{A, nullptr, {oracle::axis(3, 0, 1), oracle::axis(3, 2, 2)}},
                                 {B, nullptr, {oracle::axis(3, 2, 2), oracle::axis(3, 1, 1)}}};
  const int64_t K[] = {3};
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t n = 0; n < 2; ++n) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < 3; ++k) {
        double t = double(A[k * 2 + m]) * double(B[k * 2 + n]);
        want += t, mag += std::fabs(t);
      }
      const int64_t at[] = {m, n};
      oracle::PointSum s = oracle::contraction_point(ops, at, K);
      EXPECT_EQ(s.value, want) << m << "," << n;
      EXPECT_EQ(s.magnitude, mag) << m << "," << n;
    }
}

TEST(OraclePoint, PaddingAndStridedTransposedReads) {
  // The data gradient of a 1-D convolution with stride 2, dilation 1, padding 1, window 3:
  // dx[h] = sum over (i, oh) with oh * 2 + i - 1 = h of dy[oh] w[i]. As the oracle reads it:
  // labels h | i, dy at (h + 1 - i) / 2 where that divides and lies in [0, OH).
  const int64_t H = 7, OH = 4, KW = 3;
  const float dy[] = {1.5f, -2, 0.25f, 3};
  const float w[] = {0.5f, -1, 2};
  const oracle::Operand ops[] = {{dy, nullptr, {oracle::affine(2, {{0, 1}, {1, -1}}, 1, 2, OH, 1)}},
                                 {w, nullptr, {oracle::axis(2, 1, 1)}}};
  const int64_t summed[] = {KW};
  for (int64_t h = 0; h < H; ++h) {
    double want = 0;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t i = 0; i < KW; ++i)
        if (oh * 2 + i - 1 == h) want += double(dy[oh]) * double(w[i]);
    const int64_t at[] = {h};
    EXPECT_EQ(oracle::contraction_point(ops, at, summed).value, want) << h;
  }
}

TEST(OraclePoint, NoSummedLabelsIsOneProductAndAnEmptySumIsZero) {
  const float a[] = {3}, b[] = {-2};
  const oracle::Operand ops[] = {{a, nullptr, {}}, {b, nullptr, {}}};
  EXPECT_EQ(oracle::contraction_point(ops, {}, {}).value, -6.0);
  const int64_t none[] = {0};
  const oracle::Operand one[] = {{a, nullptr, {oracle::axis(1, 0, 1)}}};
  EXPECT_EQ(oracle::contraction_point(one, {}, none).value, 0.0);
}

TEST(OraclePoint, VerdictKeepsTheWorstShareAndTheFirstElementOutside) {
  oracle::PointVerdict v;
  const oracle::PointSum ref{1.0, 1.0};
  v.check(1.0, ref, 4, "k", "C[0,0]");
  EXPECT_TRUE(v.why.empty());
  EXPECT_EQ(v.worst, 0.0);
  v.check(1.01, ref, 4, "k", "C[0,1]");
  v.check(std::nan(""), ref, 4, "k", "C[1,1]");
  EXPECT_NE(v.why.find("k: C[0,1] = 1.01, float64 says 1"), std::string::npos) << v.why;
  EXPECT_TRUE(std::isinf(v.worst));
}

}  // namespace
}  // namespace synoros
