// Line kernels for elementwise maps, compiled once per ISA: the including file defines
// SYNOROS_ISA_NS and sets the target. A line is one run of output along the innermost dimension,
// with inputs at element strides (0 = broadcast).
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/line_fn.hpp"
#include "kernels/cpu/scalar_ops.hpp"
#include "synoros/ir.hpp"
#ifdef SYNOROS_VEC_MATH
#include "kernels/cpu/vec_math.hpp"
#endif

namespace synoros::kernels::SYNOROS_ISA_NS {

template <class F, class T>
void line1(void* out, const void* const* in, const int64_t* s, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(in[0]);
  if (s[0] == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i * s[0]]);
  }
}

template <class F, class T>
void line2(void* out, const void* const* in, const int64_t* s, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  if (s[0] == 1 && s[1] == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i], b[i]);
  } else if (s[0] == 1 && s[1] == 0) {
    const T bb = b[0];
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i], bb);
  } else if (s[0] == 0 && s[1] == 1) {
    const T aa = a[0];
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(aa, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i * s[0]], b[i * s[1]]);
  }
}

template <class F, class T>
void line3(void* out, const void* const* in, const int64_t* s, int64_t n) {
  T* o = static_cast<T*>(out);
  const T* a = static_cast<const T*>(in[0]);
  const T* b = static_cast<const T*>(in[1]);
  const T* c = static_cast<const T*>(in[2]);
  if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i], b[i], c[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(a[i * s[0]], b[i * s[1]], c[i * s[2]]);
  }
}

#ifdef SYNOROS_VEC_MATH
// A float transcendental over contiguous input, written with the ISA's vector traits (VecF,
// defined by the including file); bit for bit the scalar definition F (vec_math.hpp).
template <class F, typename VecF::R (*Vf)(typename VecF::R)>
void vline1(void* out, const void* const* in, const int64_t* s, int64_t n) {
  if (s[0] != 1) return line1<F, float>(out, in, s, n);
  float* o = static_cast<float*>(out);
  const float* a = static_cast<const float*>(in[0]);
  int64_t i = 0;
  for (; i + VecF::kLanes <= n; i += VecF::kLanes) VecF::store(o + i, Vf(VecF::load(a + i)));
  if (i < n) VecF::store_n(o + i, Vf(VecF::load_n(a + i, n - i)), n - i);
}
LineFn pick_vec_math(Op op) {
  switch (op) {
    case Op::Exp: return vline1<fn::Exp, vmath::exp<VecF>>;
    case Op::Sigmoid: return vline1<fn::Sigmoid, vmath::sigmoid<VecF>>;
    case Op::Tanh: return vline1<fn::Tanh, vmath::tanh<VecF>>;
    case Op::Gelu: return vline1<fn::Gelu, vmath::gelu<VecF>>;
    default: return nullptr;
  }
}
#else
LineFn pick_vec_math(Op) { return nullptr; }
#endif

template <class T>
LineFn pick_typed(Op op) {
  if constexpr (std::is_same_v<T, float>)
    if (LineFn f = pick_vec_math(op)) return f;
  switch (op) {
    case Op::Neg: return line1<fn::Neg, T>;
    case Op::Exp: return line1<fn::Exp, T>;
    case Op::Log: return line1<fn::Log, T>;
    case Op::Sqrt: return line1<fn::Sqrt, T>;
    case Op::Rsqrt: return line1<fn::Rsqrt, T>;
    case Op::Abs: return line1<fn::Abs, T>;
    case Op::Relu: return line1<fn::Relu, T>;
    case Op::Gelu: return line1<fn::Gelu, T>;
    case Op::Sigmoid: return line1<fn::Sigmoid, T>;
    case Op::Tanh: return line1<fn::Tanh, T>;
    case Op::Add: return line2<fn::Add, T>;
    case Op::Sub: return line2<fn::Sub, T>;
    case Op::Mul: return line2<fn::Mul, T>;
    case Op::Div: return line2<fn::Div, T>;
    case Op::Pow: return line2<fn::Pow, T>;
    case Op::Max: return line2<fn::Max, T>;
    case Op::Min: return line2<fn::Min, T>;
    case Op::CmpLt: return line2<fn::CmpLt, T>;
    case Op::CmpEq: return line2<fn::CmpEq, T>;
    case Op::ReluGrad: return line2<fn::ReluGrad, T>;
    case Op::GeluGrad: return line2<fn::GeluGrad, T>;
    case Op::Where: return line3<fn::Where, T>;
    default: return nullptr;
  }
}

LineFn pick_line(Op op, DType t) {
  switch (t) {
    case DType::F32: return pick_typed<float>(op);
    case DType::F64: return pick_typed<double>(op);
    case DType::I32:
      if (op == Op::CmpLt) return line2<fn::CmpLt, int32_t>;
      if (op == Op::CmpEq) return line2<fn::CmpEq, int32_t>;
      if (op == Op::Where) return line3<fn::Where, int32_t>;
      return nullptr;
    case DType::I64:
      if (op == Op::CmpLt) return line2<fn::CmpLt, int64_t>;
      if (op == Op::CmpEq) return line2<fn::CmpEq, int64_t>;
      if (op == Op::Where) return line3<fn::Where, int64_t>;
      return nullptr;
  }
  return nullptr;
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
