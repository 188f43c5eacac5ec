// The fixed-polynomial float32 exp, sigmoid and tanh against float64 over their whole range.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/scalar_ops.hpp"

namespace synoros::kernels::fn {
namespace {

// Largest error over a sweep, in units of float epsilon relative to max(|ref|, floor).
template <class F, class R>
double worst_error(F f, R ref, double lo, double hi, double floor) {
  double worst = 0;
  const int n = 200001;
  for (int i = 0; i < n; ++i) {
    float x = float(lo + (hi - lo) * i / (n - 1));
    double r = ref(double(x));
    double e = std::fabs(double(f(x)) - r) / std::max(std::fabs(r), floor);
    worst = std::max(worst, e / double(std::numeric_limits<float>::epsilon()));
  }
  return worst;
}

TEST(VectorMath, ExpIsAccurateAcrossTheNormalRange) {
  EXPECT_LT(worst_error(exp_f32, [](double x) { return std::exp(x); }, -87, 88.7, 0), 3.0);
}

TEST(VectorMath, ExpEdgeCases) {
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_TRUE(std::isinf(exp_f32(89.0f)));
  EXPECT_TRUE(std::isinf(exp_f32(std::numeric_limits<float>::infinity())));
  EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_f32(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(exp_f32(std::nanf(""))));
  // Gradual underflow: e^-100 is a float denormal, not zero.
  EXPECT_NEAR(exp_f32(-100.0f), std::exp(-100.0), 2e-45);
}

TEST(VectorMath, SigmoidAndTanhAreAccurate) {
  EXPECT_LT(worst_error(sigmoid_f32, [](double x) { return 1 / (1 + std::exp(-x)); }, -88, 88, 0), 4.0);
  // Beyond the exponent add's range the result saturates: 1 above, 0 below (true value < 6e-39).
  EXPECT_EQ(sigmoid_f32(87.5f), 1.0f);
  EXPECT_EQ(sigmoid_f32(1e30f), 1.0f);
  EXPECT_EQ(sigmoid_f32(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(sigmoid_f32(-88.5f), 0.0f);
  EXPECT_EQ(sigmoid_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(sigmoid_f32(0.0f), 0.5f);
  EXPECT_TRUE(std::isnan(sigmoid_f32(std::nanf(""))));
  // NaNs with payload bits in the low mantissa (which a bit-level exponent add would turn into a
  // finite number) stay NaN, of either sign.
  for (uint32_t bits : {0x7FC00001u, 0x7FC001FFu, 0x7FBFFFFFu, 0xFFC12345u})
    EXPECT_TRUE(std::isnan(sigmoid_f32(std::bit_cast<float>(bits)))) << std::hex << bits;
  EXPECT_LT(worst_error(tanh_f32, [](double x) { return std::tanh(x); }, -20, 20, 0), 4.0);
  EXPECT_EQ(tanh_f32(30.0f), 1.0f);
  EXPECT_EQ(tanh_f32(-30.0f), -1.0f);
  EXPECT_EQ(tanh_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(tanh_f32(std::nanf(""))));
}

TEST(VectorMath, LogIsAccurateFromDenormalsToHuge) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    float x = std::pow(10.0f, -44.0f + 82.0f * float(i) / 200000.0f);
    double r = std::log(double(x));
    // Near x = 1 log is tiny: measure relative to max(|log x|, 1) there, as the oracle does.
    worst = std::max(worst, std::fabs(double(log_f32(x)) - r) / std::max(std::fabs(r), 1e-3));
  }
  EXPECT_LT(worst / std::numeric_limits<float>::epsilon(), 3.0);
  for (float x : {0.5f, 0.999f, 1.0f, 1.001f, 2.0f, 3.14159f})
    EXPECT_NEAR(log_f32(x), std::log(double(x)), 3e-7 * std::max(1.0, std::fabs(std::log(double(x)))));
  EXPECT_EQ(log_f32(1.0f), 0.0f);
  EXPECT_EQ(log_f32(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(log_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(log_f32(std::nanf(""))));
}

TEST(VectorMath, ErfIsAccurate) {
  EXPECT_LT(worst_error(erf_f32, [](double x) { return std::erf(x); }, -6, 6, 0), 4.0);
  EXPECT_EQ(erf_f32(0.0f), 0.0f);
  EXPECT_EQ(erf_f32(10.0f), 1.0f);
  EXPECT_EQ(erf_f32(-10.0f), -1.0f);
  EXPECT_TRUE(std::isnan(erf_f32(std::nanf(""))));
}

}  // namespace
}  // namespace synoros::kernels::fn
