// The fixed-polynomial float32 exp, sigmoid and tanh against float64 over their whole range.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ir/scalar_ops.hpp"
#include "synoros/config.hpp"

namespace synoros::fn {
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
}  // namespace synoros::fn

// The hand-vectorised lines (vec_math.hpp) against the scalar definitions, lane by lane: every
// 4099th float bit pattern (all exponents, signs, denormals, infinities, NaNs) in lines of an
// odd length, so the masked edge runs too. SYNOROS_EXHAUSTIVE=1 checks all 2^32 inputs. NaN
// outputs compare as NaN (their sign and payload are not part of the contract).
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/line_fn.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels {
namespace {

template <class F>
int64_t mismatches(LineFn line, uint64_t step) {
  const int64_t n = 4093;
  std::vector<float> x(n), y(n);
  int64_t bad = 0;
  const void* in[1] = {x.data()};
  const int64_t s[1] = {1};
  for (uint64_t u = 0; u < (uint64_t(1) << 32);) {
    int64_t m = 0;
    for (; m < n && u < (uint64_t(1) << 32); ++m, u += step) x[size_t(m)] = std::bit_cast<float>(uint32_t(u));
    line(y.data(), in, s, m);
    for (int64_t i = 0; i < m; ++i) {
      float want = F::f(x[size_t(i)]), got = y[size_t(i)];
      bool same = std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(got);
      if (!same && ++bad <= 3)
        ADD_FAILURE() << std::hexfloat << "x = " << x[size_t(i)] << ": scalar " << want << ", vector " << got;
    }
  }
  return bad;
}

TEST(VectorMath, VectorisedLinesGiveTheScalarBitsOnEveryInput) {
  if (best_isa() == Isa::Scalar) GTEST_SKIP() << "this CPU has no AVX2+FMA: only the scalar lines run";
  uint64_t step = synoros::config::flag("SYNOROS_EXHAUSTIVE") ? 1 : 4099;
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (int(isa) > int(best_isa())) continue;
    auto pick = [&](Op op) { return isa == Isa::Avx512 ? avx512::pick_line(op, DType::F32) : avx2::pick_line(op, DType::F32); };
    SCOPED_TRACE(isa_name(isa));
    // Every unary map of the op list, vectorised or not.
#define SYNOROS_MAP(Enum, ident, arity, ...) SYNOROS_CHECK_##arity(Enum)
#define SYNOROS_CHECK_1(Enum) EXPECT_EQ(mismatches<fn::Enum>(pick(Op::Enum), step), 0) << #Enum;
#define SYNOROS_CHECK_2(Enum)
#define SYNOROS_CHECK_3(Enum)
#include "synoros/ops.def"
  }
}

// A softmax row's exps and their sum in the canonical order (lane t % 8, the lanes combined
// pairwise, segments of 4096), over rows full of what masking writes (-inf, a large negative
// fill) next to values at and around exp's clamp, whose exps are denormal, zero by a hair or
// ordinary: every build gives the scalar bits (exp skips computing the lanes below its clamp).
// A NaN score makes its row's sum NaN.
TEST(VectorMath, SoftmaxExpSumsGiveTheScalarBitsOverMaskedRows) {
  if (best_isa() == Isa::Scalar) GTEST_SKIP() << "this CPU has no AVX2+FMA: only the scalar sums run";
  const float kinds[] = {-INFINITY, -1e30f, std::nextafter(-104.0f, -INFINITY), -104.5f, -104.0f,
                         std::nextafter(-104.0f, 0.0f), -103.9f, -100.0f, -87.5f, -3.25f, 0.0f, 1.5f};
  auto reference = [](const std::vector<float>& x, float m, std::vector<float>& y) {
    float total = 0;
    for (size_t seg = 0; seg < x.size(); seg += 4096) {
      float l[8] = {};
      for (size_t k = seg; k < std::min(x.size(), seg + 4096); ++k) l[(k - seg) % 8] += y[k] = fn::Exp::f(x[k] - m);
      total += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
    return total;
  };
  auto same = [](float a, float b) {
    return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
  };
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (int(isa) > int(best_isa())) continue;
    SCOPED_TRACE(isa_name(isa));
    set_isa(isa);
    for (int64_t n : {1, 7, 8, 15, 16, 17, 64, 70, 4099}) {
      std::vector<float> x[4], want[4], got[4];
      float m[4], sums[4];
      for (int j = 0; j < 4; ++j) {
        x[j].resize(size_t(n)), want[j].resize(size_t(n)), got[j].resize(size_t(n));
        // Rows 0-2: the kinds cycling with a stride that moves with the row, minus m = 0, 1, -0.5
        // (the sums are finite and compared bit for bit). Row 3: -inf but for its first lane, and
        // a NaN in its middle lane.
        for (int64_t k = 0; k < n; ++k)
          x[j][size_t(k)] = j < 3 ? kinds[size_t(k * (j + 1) + j) % std::size(kinds)] : k == 0 ? 0.5f : -INFINITY;
        if (j == 3 && n > 1) x[j][size_t(n / 2)] = NAN;
        m[j] = j == 1 ? 1.0f : j == 2 ? -0.5f : 0.0f;
      }
      for (int j = 0; j < 4; ++j) {
        const float ref = reference(x[j], m[j], want[j]);
        EXPECT_EQ(std::isnan(ref), j == 3 && n > 1) << "n = " << n << ", row " << j;
        std::vector<float> one(static_cast<size_t>(n));
        EXPECT_TRUE(same(ref, softmax_exp_sum_vec(x[j].data(), one.data(), n, m[j]))) << "n = " << n << ", row " << j;
        EXPECT_TRUE(same(ref, softmax_exp_sum_vec(x[j].data(), nullptr, n, m[j]))) << "n = " << n << ", row " << j;
        for (int64_t k = 0; k < n; ++k) EXPECT_TRUE(same(want[j][size_t(k)], one[size_t(k)])) << "n = " << n << ", k = " << k;
      }
      const float* xs[4] = {x[0].data(), x[1].data(), x[2].data(), x[3].data()};
      float* ys[4] = {got[0].data(), got[1].data(), got[2].data(), got[3].data()};
      softmax_exp_sum4_vec(xs, ys, n, m, sums);
      for (int j = 0; j < 4; ++j) {
        EXPECT_TRUE(same(reference(x[j], m[j], want[j]), sums[j])) << "n = " << n << ", row " << j;
        for (int64_t k = 0; k < n; ++k) EXPECT_TRUE(same(want[j][size_t(k)], got[j][size_t(k)])) << "n = " << n << ", k = " << k;
      }
    }
  }
  set_isa(best_isa());
}

}  // namespace
}  // namespace synoros::kernels
