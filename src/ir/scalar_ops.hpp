// The scalar definition of each elementwise op (a SYNOROS_MAP row of ops.def): fn::Enum::f over
// float is what the fast path computes, over double what the float64 oracle computes. The same
// source is compiled for every ISA with -ffp-contract=off and explicit FMAs, so all give the same
// bits. What each op gives for NaN, infinities and signed zeros is tabulated with
// the op list (include/synoros/ops.def); comments here note where a definition's form carries a rule.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace synoros::fn {

// Every polynomial step below is an explicit fused multiply-add (std::fma): one rounding, the
// same on every instruction set (the AVX2 and AVX-512 builds emit vfmadd; the scalar fallback
// calls the correctly rounded fmaf), so all ISAs still give the same bits. -ffp-contract=off
// keeps the compiler from fusing anything else.
inline float fmaf_(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// Horner's scheme in z, highest coefficient first: one fused step per coefficient (vec_math.hpp's
// poly is the same steps over vectors).
template <class... C>
inline float horner(float z, float c0, C... cs) {
  float p = c0;
  ((p = fmaf_(p, z, cs)), ...);
  return p;
}
// x clamped to [-lim, lim]; NaN passes (the comparisons are false).
inline float clamp_abs(float x, float lim) {
  float c = x > lim ? lim : x;
  return c < -lim ? -lim : c;
}

// float32 exp with a fixed polynomial (Cephes' expf coefficients): only IEEE +, -, *, fma,
// integer shifts and conversions, branch-free, so it vectorises and gives the same bits on every
// ISA. Accurate to about 1 ulp; NaN propagates, overflow gives inf, underflow is gradual down to 0.
inline float exp_f32(float x) {
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  float n = fmaf_(xc, 1.44269504088896341f, 12582912.0f) - 12582912.0f;  // round to nearest
  float r = fmaf_(n, -0.693359375f, xc);
  r = fmaf_(n, 2.12194440e-4f, r);
  float p = horner(r, 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                   1.6666665459e-1f, 5.0000001201e-1f);
  float e = fmaf_(p, r * r, r) + 1.0f;
  // Scale by 2^n in two halves so every intermediate stays a normal float.
  int32_t ni = static_cast<int32_t>(n);
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = std::bit_cast<float>((n1 + 127) << 23), s2 = std::bit_cast<float>((n2 + 127) << 23);
  return (e * s1) * s2;  // a NaN input stays NaN through e
}

// sigmoid(x) = 1 / (1 + e^-x), with e^-x from exp_f32's reduction and polynomial, written in
// s = -r (so -x is never formed), the polynomial in Estrin's form (a shorter dependency chain:
// the line kernel is bound by latency times the scheduler's size, not by issue width) and one
// scaling instead of two. Every op counts here (the zmm ops share two ports with the divider's):
// the input is clamped at 87, where the result is exactly 1 (e^-87 vanishes against 1), and 2^m
// is built straight from the bits of the rounding sum m + 1.5 * 2^23 (its low bits hold m in two's
// complement; shifted by 23 they give m << 23 modulo 2^32), with no float-to-int conversion and
// no clamp of m. The scaling is a multiply, not an add to e's bits, so a NaN input with any
// payload stays NaN. Below -88, 2^m leaves the float range and the result is replaced by 0 (the
// true value is < 6e-39). The division is IEEE;
// 1 + e >= 1 and the quotient keep small results relatively accurate (~2 ulp).
inline float sigmoid_f32(float x) {
  float xc = x > 87.0f ? 87.0f : x;
  float mb = fmaf_(xc, -1.44269504088896341f, 12582912.0f);
  float m = mb - 12582912.0f;  // round(-x / ln 2)
  float s = fmaf_(m, 0.693359375f, xc);
  s = fmaf_(m, -2.12194440e-4f, s);  // s = x + m ln 2 = -r, |s| <= ln2 / 2 inside the range
  float s2 = s * s;
  // Cephes' coefficients with the odd ones negated, paired for Estrin's scheme.
  float a = fmaf_(-1.6666665459e-1f, s, 5.0000001201e-1f);
  float b = fmaf_(-8.3334519073e-3f, s, 4.1665795894e-2f);
  float c = fmaf_(-1.9875691500e-4f, s, 1.3981999507e-3f);
  float p = fmaf_(fmaf_(c, s2, b), s2, a);
  float e = fmaf_(p, s2, -s) + 1.0f;  // e^-s in [0.7, 1.42)
  float scale = std::bit_cast<float>((std::bit_cast<uint32_t>(mb) << 23) + 0x3F800000u);  // 2^m
  float ex = e * scale;  // e^-x, exact scaling
  float y = 1.0f / (1.0f + ex);
  return x < -88.0f ? 0.0f : y;  // NaN stays NaN (the comparisons are false)
}

// tanh: a 13/6 odd rational minimax approximation (beyond |x| = 9 tanh rounds to +-1 in float),
// one divide, no exp. The input is clamped at 8.7, where these fused steps give exactly +-1 (at
// 7.9, the fit's own end, they give 1 - 3 ulp). Near 0 it is x (p/q = x (1 - 1.3e-7)); NaN
// passes the clamps (the comparisons are false) and stays NaN.
inline float tanh_f32(float x) {
  float c = clamp_abs(x, 8.7f);
  float z = c * c;
  float p = horner(z, -2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                   5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                   4.89352455891786e-03f) * c;
  float q = horner(z, 1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                   4.89352518554385e-03f);
  return p / q;
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
  float p = horner(f, 7.0376836292e-2f, -1.1514610310e-1f, 1.1676998740e-1f, -1.2420140846e-1f,
                   1.4249322787e-1f, -1.6668057665e-1f, 2.0000714765e-1f, -2.4999993993e-1f,
                   3.3333331174e-1f);
  float y = p * f * z;
  y = fmaf_(ef, -2.12194440e-4f, y);
  y = fmaf_(-0.5f, z, y);
  float r = fmaf_(ef, 0.693359375f, f + y);
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? x : r;
  return x < 0.0f || x != x ? NAN : r;
}

// float32 erf: a 13/8 odd rational minimax approximation, one divide. The input is clamped at
// kErfLimit = 3.6730485: below it the quotient stays within [-1, 1], at it the quotient is exactly
// 1, so beyond it the result is +-1, at most 2.1e-7 from erf (which rounds to +-1 in float beyond
// 3.92). Clamped at the fit's end, 4, the quotient overshot +-1 by up to 4.4e-7 on [3.67, 4]:
// 1 + erf went negative there and gelu(x) = x/2 (1 + erf(x / sqrt 2)) positive on [-5.66, -5.2].
// NaN stays NaN.
constexpr float kErfLimit = 0x1.d62674p+1f;
inline float erf_f32(float x) {
  float c = clamp_abs(x, kErfLimit);
  float z = c * c;
  float p = horner(z, -2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                   -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                   -1.60960333262415e-02f) * c;
  float q = horner(z, -1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                   -7.37332916720468e-03f, -1.42647390514189e-02f);
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
// relu: x < 0 ? +0 : x, so NaN stays NaN and -0 stays -0 (PyTorch's clamp_min(x, 0)). The vector
// forms are maxps(0, x), which returns its second operand when the first is not greater.
struct Relu { template <class T> static T f(T x) { return x < T(0) ? T(0) : x; } };
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
// GPT-2's gelu, PyTorch's gelu(approximate="tanh"): x/2 (1 + tanh(b (x + k x^3))), b = sqrt(2/pi),
// k = 0.044715, in PyTorch's order; its gradient g (d/dx), written as PyTorch's backward.
template <class T>
constexpr T kGeluBeta = T(0.79788456080286535588);
template <class T>
constexpr T kGeluKappa = T(0.044715);
struct GeluTanh {
  template <class T> static T f(T x) {
    T inner = kGeluBeta<T> * (x + kGeluKappa<T> * (x * x * x));
    return (T(0.5) * x) * (T(1) + Tanh::f(inner));
  }
};

struct Add { template <class T> static T f(T a, T b) { return a + b; } };
struct Sub { template <class T> static T f(T a, T b) { return a - b; } };
struct Mul { template <class T> static T f(T a, T b) { return a * b; } };
struct Div { template <class T> static T f(T a, T b) { return a / b; } };
struct Pow { template <class T> static T f(T a, T b) { return std::pow(a, b); } };
// max and min: NaN when either operand is NaN (torch.maximum, torch.minimum); equal operands
// (+0 and -0) give the first. Branch-free selections, so the line loops vectorise.
struct Max { template <class T> static T f(T a, T b) { return (a < b) | (b != b) ? b : a; } };
struct Min { template <class T> static T f(T a, T b) { return (b < a) | (b != b) ? b : a; } };
struct CmpLt { template <class T> static T f(T a, T b) { return a < b ? T(1) : T(0); } };
struct CmpEq { template <class T> static T f(T a, T b) { return a == b ? T(1) : T(0); } };
// relu_grad(g, y): +0 where y <= 0, else g -- a NaN y passes g (PyTorch's threshold_backward).
// A selection, not a product: a NaN or infinite g where y <= 0 still gives 0.
struct ReluGrad { template <class T> static T f(T g, T x) { return x <= T(0) ? T(0) : g; } };
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
struct GeluTanhGrad {
  template <class T> static T f(T g, T x) {
    T x_sq = x * x;
    T t = Tanh::f(kGeluBeta<T> * (x + kGeluKappa<T> * (x_sq * x)));
    T left = T(0.5) * x, right = T(1) + t;
    T inner_d = kGeluBeta<T> * (T(1) + T(3) * kGeluKappa<T> * x_sq);
    T d_right = left * (T(1) - t * t) * inner_d;
    return g * (T(0.5) * right + d_right);
  }
};
struct Where { template <class T> static T f(T c, T a, T b) { return c != T(0) ? a : b; } };

}  // namespace synoros::fn

namespace synoros::kernels {
namespace fn = ::synoros::fn;
}  // namespace synoros::kernels
