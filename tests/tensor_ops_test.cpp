// The front end's PyTorch-named conveniences: clamp, squeeze/unsqueeze, clone, amin, var/std,
// ones/full/arange, scalar-first arithmetic, where, cat and stack -- values against float64
// computed here, gradients against their closed forms.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "synoros/synoros.hpp"

namespace synoros {
namespace {

std::vector<float> vals(const Tensor& t) { return t.to_vector(); }

// d(sum(f(x) * w))/dx for a leaf x.
std::vector<float> grad_of(Tensor x, const std::function<Tensor(const Tensor&)>& f, const Tensor& w) {
  x.requires_grad();
  (f(x) * w).sum().backward();
  return x.grad().to_vector();
}

TEST(TensorOps, ClampFollowsPyTorch) {
  Tensor x = Tensor::from({-2.0f, -1.0f, 0.0f, 0.5f, 1.0f, 3.0f, NAN}, {7});
  std::vector<float> y = vals(x.clamp(-1.0, 1.0));
  std::vector<float> want = {-1, -1, 0, 0.5f, 1, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(y[i], want[i]) << i;
  EXPECT_TRUE(std::isnan(y[6]));
  EXPECT_EQ(vals(x.clamp(2.0, 1.0))[0], 1.0f);  // lo > hi: hi everywhere
  EXPECT_EQ(vals(x.clamp_min(0.0))[1], 0.0f);
  EXPECT_EQ(vals(x.clamp_max(0.0))[5], 0.0f);
  // The gradient passes inside [lo, hi], bounds included.
  Tensor xs = Tensor::from({-2.0f, -1.0f, 0.0f, 1.0f, 3.0f}, {5});
  std::vector<float> g = grad_of(xs, [](const Tensor& t) { return t.clamp(-1.0, 1.0); }, Tensor::full({5}, 2.0));
  std::vector<float> gw = {0, 2, 2, 2, 0};
  for (size_t i = 0; i < gw.size(); ++i) EXPECT_EQ(g[i], gw[i]) << i;
}

TEST(TensorOps, SqueezeUnsqueezeAndClone) {
  Tensor x = Tensor::arange(6).reshape({2, 1, 3});
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{2, 1, 3}));  // not size 1: unchanged
  EXPECT_EQ(x.squeeze(-2).shape(), (Shape{2, 3}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(3).shape(), (Shape{2, 1, 3, 1}));
  EXPECT_THROW(x.unsqueeze(5), Error);
  EXPECT_THROW(x.squeeze(3), Error);
  // A clone keeps the values it was taken with when the original's storage is overwritten.
  Tensor w = Tensor::from({1.0f, -0.0f, 3.0f}, {3});
  Tensor c = w.clone();
  w.assign(Tensor::full({3}, 7.0));
  std::vector<float> cv = vals(c);
  EXPECT_EQ(cv[0], 1.0f);
  EXPECT_TRUE(std::signbit(cv[1]));
  EXPECT_EQ(vals(w)[0], 7.0f);
  Tensor xi = Tensor::arange(4, DType::I64);
  EXPECT_EQ(xi.clone().dtype(), DType::I64);
  std::vector<float> g = grad_of(Tensor::from({1.0f, 2.0f}, {2}), [](const Tensor& t) { return t.clone(); },
                                 Tensor::from({3.0f, 4.0f}, {2}));
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], 4.0f);
}

TEST(TensorOps, AminVarStdMatchFloat64) {
  std::vector<float> data = {0.5f, -1.25f, 2.0f, 3.5f, -0.75f, 1.0f};
  Tensor x = Tensor::from(data, {2, 3});
  std::vector<float> mn = vals(x.min({1}));
  EXPECT_EQ(mn[0], -1.25f);
  EXPECT_EQ(mn[1], -0.75f);
  EXPECT_EQ(x.min().item(), -1.25);
  for (int64_t corr : {0, 1}) {
    std::vector<float> v = vals(x.var({1}, corr)), s = vals(x.std({1}, corr));
    for (int r = 0; r < 2; ++r) {
      double m = 0, ss = 0;
      for (int j = 0; j < 3; ++j) m += data[size_t(r * 3 + j)] / 3.0;
      for (int j = 0; j < 3; ++j) ss += (data[size_t(r * 3 + j)] - m) * (data[size_t(r * 3 + j)] - m);
      double want = ss / double(3 - corr);
      EXPECT_NEAR(v[size_t(r)], want, 1e-6 * want) << "correction " << corr;
      EXPECT_NEAR(s[size_t(r)], std::sqrt(want), 1e-6 * std::sqrt(want));
    }
  }
  EXPECT_EQ(x.var({0, 1}, 1, true).shape(), (Shape{1, 1}));
  EXPECT_TRUE(std::isnan(Tensor::from({2.0f}, {1}).var().item()));  // one element, correction 1
  // d var / dx = 2 (x - mean) / (n - 1).
  std::vector<float> g = grad_of(Tensor::from({1.0f, 2.0f, 6.0f}, {3}), [](const Tensor& t) { return t.var(); },
                                 Tensor::scalar(1.0));
  std::vector<double> gw = {2 * (1 - 3.0) / 2, 2 * (2 - 3.0) / 2, 2 * (6 - 3.0) / 2};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(g[i], gw[i], 1e-6) << i;
}

// PyTorch's gelu(approximate="tanh") and its backward in float64 (torch 1.13, printed once).
TEST(TensorOps, GeluTanhMatchesPyTorch) {
  const std::vector<double> x = {-3, -1, -0.5, 0, 0.5, 1, 3};
  const std::vector<double> y = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                 0.34571400982514394, 0.8411919906082768, 2.996362607918227};
  const std::vector<double> dy = {-0.011584166630969648, -0.08296408384578252, 0.13263009646535764, 0.5,
                                  0.8673699035346424, 1.0829640838457826, 1.0115841666309695};
  std::vector<float> xf(x.begin(), x.end());
  Tensor t = Tensor::from(xf, {7});
  std::vector<float> got = vals(t.gelu_tanh());
  std::vector<float> g = grad_of(Tensor::from(xf, {7}), [](const Tensor& u) { return u.gelu_tanh(); }, Tensor::scalar(1.0));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(got[i], y[i], 2e-7 + 2e-5 * std::fabs(y[i])) << "x = " << x[i];
    EXPECT_NEAR(g[i], dy[i], 2e-7 + 2e-5 * std::fabs(dy[i])) << "x = " << x[i];
  }
}

TEST(TensorOps, FactoriesAndScalarFirstArithmetic) {
  EXPECT_EQ(vals(Tensor::ones({2, 2})), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(vals(Tensor::full({3}, -2.5)), (std::vector<float>{-2.5f, -2.5f, -2.5f}));
  EXPECT_EQ(vals(Tensor::arange(4)), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(Tensor::arange(0).numel(), 0);
  EXPECT_THROW(Tensor::arange(-1), Error);
  Tensor x = Tensor::from({1.0f, 4.0f}, {2});
  EXPECT_EQ(vals(2.0 - x), (std::vector<float>{1, -2}));
  EXPECT_EQ(vals(1.0 / x), (std::vector<float>{1, 0.25f}));
  EXPECT_EQ(vals(3.0 * x + 1.0), (std::vector<float>{4, 13}));
  // Methods generated from the op list's rows.
  Tensor s = Tensor::from({-4.0f, 0.25f}, {2});
  EXPECT_EQ(vals(s.abs()), (std::vector<float>{4, 0.25f}));
  EXPECT_EQ(vals(s.neg()), (std::vector<float>{4, -0.25f}));
  EXPECT_EQ(vals(s.abs().rsqrt()), (std::vector<float>{0.5f, 2}));
}

TEST(TensorOps, WhereCatAndStack) {
  Tensor c = Tensor::from({1.0f, 0.0f, 1.0f}, {3});
  Tensor a = Tensor::from({1.0f, 2.0f, 3.0f}, {3});
  EXPECT_EQ(vals(where(c, a, Tensor::scalar(-1.0))), (std::vector<float>{1, -1, 3}));

  Tensor p = Tensor::from({1.0f, -0.0f, 3.0f, 4.0f}, {2, 2});
  Tensor q = Tensor::from({5.0f, 6.0f}, {1, 2});
  Tensor r = Tensor::from({7.0f, -0.0f}, {2, 1});
  Tensor c0 = cat({p, q}, 0);
  EXPECT_EQ(c0.shape(), (Shape{3, 2}));
  std::vector<float> v0 = vals(c0);
  EXPECT_EQ(v0, (std::vector<float>{1, 0, 3, 4, 5, 6}));
  EXPECT_TRUE(std::signbit(v0[1]));  // -0 keeps its sign
  std::vector<float> v1 = vals(cat({p, r}, -1));
  EXPECT_EQ(v1, (std::vector<float>{1, 0, 7, 3, 4, 0}));
  EXPECT_TRUE(std::signbit(v1[5]));
  EXPECT_THROW(cat({p, r}, 0), Error);
  EXPECT_THROW(cat({}, 0), Error);
  EXPECT_THROW(cat({p, Tensor::arange(2, DType::I64).reshape({1, 2})}, 0), Error);
  EXPECT_EQ(vals(cat({Tensor::arange(2, DType::I64), Tensor::arange(2, DType::I64)}, 0).cast(DType::F32)),
            (std::vector<float>{0, 1, 0, 1}));

  Tensor s = stack({a, a * 2.0}, 1);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(vals(s), (std::vector<float>{1, 2, 2, 4, 3, 6}));
  EXPECT_EQ(stack({a, a}, -1).shape(), (Shape{3, 2}));
  EXPECT_EQ(stack({a, a}).shape(), (Shape{2, 3}));
  std::vector<Tensor> five;  // joined as a tree: every piece lands in its place
  for (int k = 0; k < 5; ++k) five.push_back(Tensor::full({1, k + 1}, double(k)));
  std::vector<float> v5 = vals(cat(five, 1));
  ASSERT_EQ(v5.size(), 15u);
  for (int k = 0, i = 0; k < 5; ++k)
    for (int j = 0; j <= k; ++j, ++i) EXPECT_EQ(v5[size_t(i)], float(k)) << i;

  // The gradient of each piece is its slice of the upstream gradient.
  Tensor pa = Tensor::from({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  Tensor qa = Tensor::from({5.0f, 6.0f}, {2, 1});
  pa.requires_grad();
  qa.requires_grad();
  Tensor w = Tensor::from({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  (cat({pa, qa}, 1) * w).sum().backward();
  EXPECT_EQ(vals(pa.grad()), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(vals(qa.grad()), (std::vector<float>{3, 6}));
}

}  // namespace
}  // namespace synoros
