// torch.einsum's notation in the front end: implicit outputs, "...", broadcasting of size-1
// axes, diagonals and three or more operands, against loops written here; gradients through a
// diagonal and a three-operand chain against closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "synoros/synoros.hpp"

namespace synoros {
namespace {

std::vector<float> seq(int64_t n, float scale = 1.0f) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float((i * 7) % 11) * scale - 3.0f);
  return v;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << i;
}

TEST(EinsumNotation, ImplicitOutputAndSpaces) {
  Tensor a = Tensor::from(seq(6), {2, 3}), b = Tensor::from(seq(12, 0.5f), {3, 4});
  Tensor c = einsum("ij, jk", {a, b});  // implicit: "ik"
  EXPECT_EQ(c.shape(), (Shape{2, 4}));
  std::vector<float> av = seq(6), bv = seq(12, 0.5f), cv = c.to_vector();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      float s = 0;
      for (int j = 0; j < 3; ++j) s += av[size_t(i * 3 + j)] * bv[size_t(j * 4 + k)];
      EXPECT_FLOAT_EQ(cv[size_t(i * 4 + k)], s);
    }
  EXPECT_EQ(einsum("ba", {a}).shape(),
            (Shape{3, 2}));  // implicit output is alphabetical: a transpose
  EXPECT_EQ(einsum("ij->", {a}).item(), [&] {
    float s = 0;
    for (float x : av) s += x;
    return s;
  }());
}

TEST(EinsumNotation, EllipsisBroadcastsBatchAxes) {
  Tensor a = Tensor::from(seq(2 * 3 * 4), {2, 1, 3, 4}),
         b = Tensor::from(seq(5 * 4 * 2), {5, 4, 2});
  Tensor c = einsum("...ij,...jk->...ik", {a, b});
  ASSERT_EQ(c.shape(), (Shape{2, 5, 3, 2}));
  Tensor want = a.matmul(b);
  expect_near(c.to_vector(), want.to_vector());
  EXPECT_EQ(einsum("...i->...", {a}).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(einsum("i...->...i", {b}).shape(), (Shape{4, 2, 5}));
}

TEST(EinsumNotation, DiagonalsAndTraces) {
  std::vector<float> v = seq(9);
  Tensor m = Tensor::from(v, {3, 3});
  EXPECT_EQ(einsum("ii->i", {m}).to_vector(), (std::vector<float>{v[0], v[4], v[8]}));
  EXPECT_EQ(einsum("ii", {m}).item(), v[0] + v[4] + v[8]);  // the trace
  Tensor t = Tensor::from(seq(2 * 3 * 3), {3, 2, 3});
  std::vector<float> tv = seq(18), d = einsum("ibi->bi", {t}).to_vector();
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(d[size_t(b * 3 + i)], tv[size_t(i * 6 + b * 3 + i)]);
  // The trace's gradient is the identity.
  Tensor leaf = Tensor::from(v, {3, 3});
  leaf.requires_grad();
  einsum("ii->", {leaf}).backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_THROW(einsum("ii->i", {Tensor::zeros({2, 3})}), Error);
}

TEST(EinsumNotation, ThreeOperandsLeftToRight) {
  Tensor a = Tensor::from(seq(6), {2, 3}), b = Tensor::from(seq(12), {3, 4}),
         c = Tensor::from(seq(20), {4, 5});
  Tensor r = einsum("ij,jk,kl->il", {a, b, c});
  expect_near(r.to_vector(), a.matmul(b).matmul(c).to_vector());
  // A label shared by the first and last operand survives the middle step.
  Tensor x = Tensor::from(seq(3), {3}), y = Tensor::from(seq(12), {3, 4}),
         z = Tensor::from(seq(3, 2.0f), {3});
  std::vector<float> xv = seq(3), yv = seq(12), zv = seq(3, 2.0f),
                     got = einsum("i,ij,i->j", {x, y, z}).to_vector();
  for (int j = 0; j < 4; ++j) {
    float s = 0;
    for (int i = 0; i < 3; ++i) s += xv[size_t(i)] * yv[size_t(i * 4 + j)] * zv[size_t(i)];
    EXPECT_FLOAT_EQ(got[size_t(j)], s);
  }
  // d/dy of sum(x_i y_ij z_i) = x_i z_i.
  Tensor yl = Tensor::from(seq(12), {3, 4});
  yl.requires_grad();
  einsum("i,ij,i->", {x, yl, z}).backward();
  std::vector<float> g = yl.grad().to_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      EXPECT_FLOAT_EQ(g[size_t(i * 4 + j)], xv[size_t(i)] * zv[size_t(i)]);
  EXPECT_THROW(einsum("ij,jk", {a}), Error);
  EXPECT_THROW(einsum("ij,jk->ik", {a, Tensor::zeros({4, 4})}), Error);
}

}  // namespace
}  // namespace synoros
