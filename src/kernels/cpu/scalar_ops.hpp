// The scalar definition of each elementwise op as the fast path computes it (float or double).
// The same source is compiled for every ISA with -ffp-contract=off, so all give the same bits.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace synoros::kernels::fn {

// float32 exp with a fixed polynomial (Cephes' expf coefficients): only IEEE +, -, *, /, integer
// shifts and conversions, branch-free, so it vectorises and gives the same bits on every ISA.
// Accurate to about 2 ulp; NaN propagates, overflow gives inf, underflow is gradual down to 0.
inline float exp_f32(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * (r * r) + r + 1.0f;
  // Scale by 2^n in two halves so every intermediate stays a normal float.
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  return (e * s1) * s2;  // a NaN input stays NaN through e
}

// 1/d for d in [1, 2] without a divide (the slowest vector instruction): the classic linear
// first guess 24/17 - 8/17 d (error <= 1/17), then three Newton steps y <- y (2 - d y), which
// square the error each time. Plain IEEE operations, so every ISA gets the same bits.
inline float recip_1_2(float d) {
  float y = 1.41176470588f - 0.470588235294f * d;
  y = y * (2.0f - d * y);
  y = y * (2.0f - d * y);
  y = y * (2.0f - d * y);
  return y;
}

// sigmoid through e = exp(-|x|) in (0, 1]: 1 / (1 + e) for x >= 0, e / (1 + e) below.
inline float sigmoid_f32(float x) {
  float a = x < 0.0f ? -x : x;
  float e = exp_f32(-a);
  float r = recip_1_2(1.0f + e);
  return x < 0.0f ? e * r : r;
}

// tanh: a 13/6 odd rational minimax approximation on [-7.9, 7.9] (beyond it tanh rounds to
// +-1 in float), one divide, no exp.
inline float tanh_f32(float x) {
  const float lim = 7.90531110763549805f;
  float c = x > lim ? lim : x;
  c = c < -lim ? -lim : c;
  float z = c * c;
  float p = -2.76076847742355e-16f;
  p = p * z + 2.00018790482477e-13f;
  p = p * z + -8.60467152213735e-11f;
  p = p * z + 5.12229709037114e-08f;
  p = p * z + 1.48572235717979e-05f;
  p = p * z + 6.37261928875436e-04f;
  p = p * z + 4.89352455891786e-03f;
  p = p * c;
  float q = 1.19825839466702e-06f;
  q = q * z + 1.18534705686654e-04f;
  q = q * z + 2.26843463243900e-03f;
  q = q * z + 4.89352518554385e-03f;
  float a = x < 0.0f ? -x : x;
  float y = p / q;
  y = a < 0.0004f ? x : y;
  return x != x ? x : y;
}

// float32 log (Cephes' logf polynomial): mantissa in [sqrt(1/2), sqrt(2)) times 2^e, then
// log(1 + f) by a degree-9 polynomial. Denormals are scaled into the normal range first.
// log(0) = -inf, log(inf) = inf, negative or NaN give NaN. Branch-free.
inline float log_f32(float x) {
  bool tiny = x < 1.17549435e-38f;
  float xs = tiny ? x * 8388608.0f : x;  // 2^23
  int32_t bits = std::bit_cast<int32_t>(xs);
  int32_t e = ((bits >> 23) & 0xff) - 126;
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  bool lo = m < 0.707106781186547524f;
  float f = lo ? (m + m) - 1.0f : m - 1.0f;
  float ef = float(lo ? e - 1 : e) - (tiny ? 23.0f : 0.0f);
  float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z;
  y = y + ef * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = (f + y) + ef * 0.693359375f;
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? x : r;
  return x < 0.0f || x != x ? NAN : r;
}

// float32 erf: a 13/8 odd rational minimax approximation on [-4, 4] (beyond it erf rounds to
// +-1 in float), one divide.
inline float erf_f32(float x) {
  float c = x > 4.0f ? 4.0f : x;
  c = c < -4.0f ? -4.0f : c;
  float z = c * c;
  float p = -2.72614225801306e-10f;
  p = p * z + 2.77068142495902e-08f;
  p = p * z + -2.10102402082508e-06f;
  p = p * z + -5.69250639462346e-05f;
  p = p * z + -7.34990630326855e-04f;
  p = p * z + -2.95459980854025e-03f;
  p = p * z + -1.60960333262415e-02f;
  p = p * c;
  float q = -1.45660718464996e-05f;
  q = q * z + -2.13374055278905e-04f;
  q = q * z + -1.68282697438203e-03f;
  q = q * z + -7.37332916720468e-03f;
  q = q * z + -1.42647390514189e-02f;
  float y = p / q;
  return x != x ? x : y;
}

template <class T>
constexpr T kHalf = T(0.5);

struct Neg { template <class T> static T f(T x) { return -x; } };
struct Exp {
  static float f(float x) { return exp_f32(x); }
  static double f(double x) { return std::exp(x); }
};
struct Log {
  static float f(float x) { return log_f32(x); }
  static double f(double x) { return std::log(x); }
};
struct Sqrt { template <class T> static T f(T x) { return std::sqrt(x); } };
struct Rsqrt { template <class T> static T f(T x) { return T(1) / std::sqrt(x); } };
struct Abs { template <class T> static T f(T x) { return std::fabs(x); } };
struct Relu { template <class T> static T f(T x) { return x > T(0) ? x : T(0); } };
struct Gelu {
  static float f(float x) { return 0.5f * x * (1.0f + erf_f32(x * 0.70710678118654752440f)); }
  static double f(double x) { return 0.5 * x * (1.0 + std::erf(x * 0.70710678118654752440)); }
};
struct Sigmoid {
  static float f(float x) { return sigmoid_f32(x); }
  static double f(double x) { return 1.0 / (1.0 + std::exp(-x)); }
};
struct Tanh {
  static float f(float x) { return tanh_f32(x); }
  static double f(double x) { return std::tanh(x); }
};

struct Add { template <class T> static T f(T a, T b) { return a + b; } };
struct Sub { template <class T> static T f(T a, T b) { return a - b; } };
struct Mul { template <class T> static T f(T a, T b) { return a * b; } };
struct Div { template <class T> static T f(T a, T b) { return a / b; } };
struct Pow { template <class T> static T f(T a, T b) { return std::pow(a, b); } };
struct Max { template <class T> static T f(T a, T b) { return a >= b ? a : b; } };
struct Min { template <class T> static T f(T a, T b) { return a <= b ? a : b; } };
struct CmpLt { template <class T> static T f(T a, T b) { return a < b ? T(1) : T(0); } };
struct CmpEq { template <class T> static T f(T a, T b) { return a == b ? T(1) : T(0); } };
struct ReluGrad { template <class T> static T f(T g, T x) { return x > T(0) ? g : T(0); } };
struct GeluGrad {
  static float f(float g, float x) {
    float cdf = 0.5f * (1.0f + erf_f32(x * 0.70710678118654752440f));
    float pdf = exp_f32(-0.5f * x * x) * 0.39894228040143267794f;
    return g * (cdf + x * pdf);
  }
  static double f(double g, double x) {
    double cdf = 0.5 * (1.0 + std::erf(x * 0.70710678118654752440));
    double pdf = std::exp(-0.5 * x * x) * 0.39894228040143267794;
    return g * (cdf + x * pdf);
  }
};
struct Where { template <class T> static T f(T c, T a, T b) { return c != T(0) ? a : b; } };

}  // namespace synoros::kernels::fn
