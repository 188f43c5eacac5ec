// exp, sigmoid, tanh, gelu and gelu_tanh written once over a vector-traits type V, step for step the
// operations of scalar_ops.hpp's definitions, so each lane gives exactly the scalar function's
// bits (tests/vector_math_test.cpp compares every lane against it, over all 2^32 inputs when
// SYNOROS_EXHAUSTIVE=1). Why not let the compiler vectorise the scalar source: it if-converts
// the clamps (x > c ? c : x) into compares, mask logic and blends, and specialises the clamped
// path; here each clamp is one min or max with the operand order that keeps the scalar NaN
// semantics (minps(a, b) = a < b ? a : b, so min(c, x) = x > c ? c : x and a NaN x passes).
//
// V provides: R (a register of floats), set, add, sub, mul, div, fma (one rounding), fms(a, b, c)
// = fma(a, b, -c), min, max (the minps/maxps semantics above), clamp_abs(x, c) = max(-c, min(c, x)) for
// non-NaN x (a NaN may come out as NaN or as +-c: erf restores it with keep_nan),
// keep_nan(x, y) = x != x ? x : y, and three steps each ISA may spell its own way as long as the
// bits stay those of the formula: ldexp(e, n) = e * 2^(n>>1) * 2^(n - (n>>1)) for an integral
// float n in [-150, 128] (two multiplies, so only the second can round); ldexp_small(e, m, mb) =
// e * 2^m for an integral float m in [-126, 127] given mb = m + 1.5 * 2^23 (one multiply); and
// recip_unless_lt(x, c, b) = x < c ? 0 : 1 / b; and ldexp_unless_below(e, n, x, c) = x < c ? +0
// : ldexp(e, n), without computing ldexp where x < c. AVX-512 does the first three in one
// instruction each (vscalefps multiplies by 2^floor(n) with one rounding, which is the formula's
// rounding here; a zero-masked vdivps) and the last as a compare and a zero-masked vscalefps,
// AVX2 with the integer bit tricks.
#pragma once

#include "ir/scalar_ops.hpp"

namespace synoros::kernels::vmath {

// Horner's scheme in z, highest coefficient first: one fma per step, as the scalar source.
template <class V, class... C>
typename V::R poly(typename V::R z, float c0, C... cs) {
  typename V::R p = V::set(c0);
  ((p = V::fma(p, z, V::set(cs))), ...);
  return p;
}

// exp clamps its argument at -104, where the result is +0, and computing that +0 underflows,
// which costs an Intel core a microcode assist per instruction. Masked softmax scores (-inf, or
// a large negative fill) hit it all the time: a causal 64 x 64 block of exps took 14 us against
// 1.2 us unmasked. So lanes below -104 get that +0 from ldexp_unless_below without the scaling
// being computed; every lane keeps the formula's bits (a NaN compares false and is computed).
template <class V>
typename V::R exp(typename V::R x) {
  using R = typename V::R;
  R xc = V::max(V::set(-104.0f), V::min(V::set(89.0f), x));
  R n = V::sub(V::fma(xc, V::set(1.44269504088896341f), V::set(12582912.0f)), V::set(12582912.0f));
  R r = V::fma(n, V::set(-0.693359375f), xc);
  r = V::fma(n, V::set(2.12194440e-4f), r);
  R p = poly<V>(r, 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                 5.0000001201e-1f);
  R e = V::add(V::fma(p, V::mul(r, r), r), V::set(1.0f));
  return V::ldexp_unless_below(e, n, x, -104.0f);
}

template <class V>
typename V::R sigmoid(typename V::R x) {
  using R = typename V::R;
  R xc = V::min(V::set(87.0f), x);
  R mb = V::fma(xc, V::set(-1.44269504088896341f), V::set(12582912.0f));
  R m = V::sub(mb, V::set(12582912.0f));
  R s = V::fma(m, V::set(0.693359375f), xc);
  s = V::fma(m, V::set(-2.12194440e-4f), s);
  R s2 = V::mul(s, s);
  R a = V::fma(V::set(-1.6666665459e-1f), s, V::set(5.0000001201e-1f));
  R b = V::fma(V::set(-8.3334519073e-3f), s, V::set(4.1665795894e-2f));
  R c = V::fma(V::set(-1.9875691500e-4f), s, V::set(1.3981999507e-3f));
  R p = V::fma(V::fma(c, s2, b), s2, a);
  R e = V::add(V::fms(p, s2, s), V::set(1.0f));
  R ex = V::ldexp_small(e, m, mb);
  return V::recip_unless_lt(x, -88.0f, V::add(V::set(1.0f), ex));
}

template <class V>
typename V::R tanh(typename V::R x) {
  using R = typename V::R;
  R c = V::max(V::set(-8.7f), V::min(V::set(8.7f), x));
  R z = V::mul(c, c);
  R p = V::mul(poly<V>(z, -2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                       5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                       4.89352455891786e-03f),
               c);
  R q = poly<V>(z, 1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f, 4.89352518554385e-03f);
  return V::div(p, q);
}

template <class V>
typename V::R erf(typename V::R x) {
  using R = typename V::R;
  R c = V::clamp_abs(x, fn::kErfLimit);
  R z = V::mul(c, c);
  R p = V::mul(poly<V>(z, -2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                       -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                       -1.60960333262415e-02f),
               c);
  R q = poly<V>(z, -1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                -7.37332916720468e-03f, -1.42647390514189e-02f);
  return V::keep_nan(x, V::div(p, q));
}

// 0.5 x (1 + erf(x / sqrt 2)), multiplied in the scalar source's order.
template <class V>
typename V::R gelu(typename V::R x) {
  auto e = erf<V>(V::mul(x, V::set(0.70710678118654752440f)));
  return V::mul(V::mul(V::set(0.5f), x), V::add(V::set(1.0f), e));
}

// fn::GeluTanh: (x/2) (1 + tanh(b (x + k x^3))), in the scalar source's order.
template <class V>
typename V::R gelu_tanh(typename V::R x) {
  auto cube = V::mul(V::mul(x, x), x);
  auto inner = V::mul(V::set(fn::kGeluBeta<float>), V::add(x, V::mul(V::set(fn::kGeluKappa<float>), cube)));
  return V::mul(V::mul(V::set(0.5f), x), V::add(V::set(1.0f), tanh<V>(inner)));
}

// fn::GeluTanhGrad(g, x): g (right / 2 + x/2 (1 - t^2) b (1 + 3k x^2)), t = tanh(b (x + k x^3)),
// in the scalar source's order.
template <class V>
typename V::R gelu_tanh_grad(typename V::R g, typename V::R x) {
  const auto x_sq = V::mul(x, x);
  const auto beta = V::set(fn::kGeluBeta<float>), one = V::set(1.0f), half = V::set(0.5f);
  const auto t = tanh<V>(V::mul(beta, V::add(x, V::mul(V::set(fn::kGeluKappa<float>), V::mul(x_sq, x)))));
  const auto left = V::mul(half, x), right = V::add(one, t);
  const auto inner_d = V::mul(beta, V::add(one, V::mul(V::set(3.0f * fn::kGeluKappa<float>), x_sq)));
  const auto d_right = V::mul(V::mul(left, V::sub(one, V::mul(t, t))), inner_d);
  return V::mul(g, V::add(V::mul(half, right), d_right));
}

}  // namespace synoros::kernels::vmath
