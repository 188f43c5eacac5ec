// The scalar definition of each elementwise op as the fast path computes it (float or double).
// The same source is compiled for every ISA with -ffp-contract=off, so all give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace synoros::kernels::fn {

template <class T>
constexpr T kHalf = T(0.5);

struct Neg { template <class T> static T f(T x) { return -x; } };
struct Exp { template <class T> static T f(T x) { return std::exp(x); } };
struct Log { template <class T> static T f(T x) { return std::log(x); } };
struct Sqrt { template <class T> static T f(T x) { return std::sqrt(x); } };
struct Rsqrt { template <class T> static T f(T x) { return T(1) / std::sqrt(x); } };
struct Abs { template <class T> static T f(T x) { return std::fabs(x); } };
struct Relu { template <class T> static T f(T x) { return x > T(0) ? x : T(0); } };
struct Gelu {
  template <class T>
  static T f(T x) { return kHalf<T> * x * (T(1) + std::erf(x * T(0.70710678118654752440))); }
};
struct Sigmoid { template <class T> static T f(T x) { return T(1) / (T(1) + std::exp(-x)); } };
struct Tanh { template <class T> static T f(T x) { return std::tanh(x); } };

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
  template <class T>
  static T f(T g, T x) {
    T cdf = kHalf<T> * (T(1) + std::erf(x * T(0.70710678118654752440)));
    T pdf = std::exp(-kHalf<T> * x * x) * T(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};
struct Where { template <class T> static T f(T c, T a, T b) { return c != T(0) ? a : b; } };

}  // namespace synoros::kernels::fn
