// Line kernels for elementwise maps, compiled once per ISA: the including file defines
// SYNOROS_ISA_NS and sets the target. A line is one run of output along the innermost dimension,
// with inputs at element strides (0 = broadcast).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/line_fn.hpp"
#include "ir/scalar_ops.hpp"
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
// The line of a vector form, or none where the row names none (nullptr): a specialisation,
// since comparing function addresses is not a constant expression under -fsanitize=undefined.
template <class F, auto Vf>
struct VecLine {
  static LineFn get() { return vline1<F, Vf>; }
};
template <class F>
struct VecLine<F, nullptr> {
  static LineFn get() { return nullptr; }
};
LineFn pick_vec_math(Op op) {
  switch (op) {
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) \
  case Op::Enum: return arity == 1 ? VecLine<fn::Enum, vec>::get() : nullptr;
#include "synoros/ops.def"
    default: return nullptr;
  }
}

// ---- staged lines (line_fn.hpp): operands pass through their stages in registers.
inline float stage_scalar(float v, const Stage* st, int n) {
  for (int k = 0; k < n; ++k) {
    float c = st[k].c ? *st[k].c : 0.0f;
    switch (st[k].kind) {
      case StageKind::MulC: v = v * c; break;
      case StageKind::CMul: v = c * v; break;
      case StageKind::AddC: v = v + c; break;
      case StageKind::CAdd: v = c + v; break;
      case StageKind::SubC: v = v - c; break;
      case StageKind::CSub: v = c - v; break;
      case StageKind::Relu: v = fn::Relu::f(v); break;
    }
  }
  return v;
}
// B vectors through the stages, one dispatch per stage for all B (per vector, the switch cost
// more than the pass it saves). maxps(0, v) = 0 > v ? 0 : v, fn::Relu's definition (a NaN or -0
// v comes back as itself).
template <int B>
[[gnu::always_inline]] inline void stage_vec(VecF::R* v, const Stage* st, int n) {
  for (int k = 0; k < n; ++k) {
    VecF::R c = VecF::set(st[k].c ? *st[k].c : 0.0f);
    switch (st[k].kind) {
#define SYNOROS_STAGE(K, E) \
  case StageKind::K:        \
    _Pragma("GCC unroll 8") for (int j = 0; j < B; ++j) v[j] = E; break;
      SYNOROS_STAGE(MulC, VecF::mul(v[j], c))
      SYNOROS_STAGE(CMul, VecF::mul(c, v[j]))
      SYNOROS_STAGE(AddC, VecF::add(v[j], c))
      SYNOROS_STAGE(CAdd, VecF::add(c, v[j]))
      SYNOROS_STAGE(SubC, VecF::sub(v[j], c))
      SYNOROS_STAGE(CSub, VecF::sub(c, v[j]))
      SYNOROS_STAGE(Relu, VecF::max(VecF::set(0.0f), v[j]))
#undef SYNOROS_STAGE
    }
  }
}
constexpr int kStageBlock = 4;  // vectors staged together
inline VecF::R vrelu(VecF::R v) { return VecF::max(VecF::set(0.0f), v); }
inline VecF::R vadd(VecF::R a, VecF::R b) { return VecF::add(a, b); }
inline VecF::R vsub(VecF::R a, VecF::R b) { return VecF::sub(a, b); }
inline VecF::R vmul(VecF::R a, VecF::R b) { return VecF::mul(a, b); }

// Unary F over a staged operand: vectors where the input is contiguous, else element by element
// (the same operations in scalar form).
template <class F, VecF::R (*Vf)(VecF::R)>
void sline1(void* out, const void* const* in, const int64_t* s, int64_t n, const Stages& st) {
  float* o = static_cast<float*>(out);
  const float* a = static_cast<const float*>(in[0]);
  const Stage* s0 = st.s[0];
  int n0 = st.n[0];
  if (s[0] != 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = F::f(stage_scalar(a[i * s[0]], s0, n0));
    return;
  }
  constexpr int B = kStageBlock;
  constexpr int64_t L = VecF::kLanes;
  int64_t i = 0;
  for (; i + B * L <= n; i += B * L) {
    VecF::R v[B];
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) v[j] = VecF::load(a + i + j * L);
    stage_vec<B>(v, s0, n0);
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) VecF::store(o + i + j * L, Vf(v[j]));
  }
  for (; i < n; i += L) {  // the last vectors, the final one masked
    int64_t m = std::min<int64_t>(L, n - i);
    VecF::R v = m == L ? VecF::load(a + i) : VecF::load_n(a + i, m);
    stage_vec<1>(&v, s0, n0);
    if (m == L) VecF::store(o + i, Vf(v));
    else VecF::store_n(o + i, Vf(v), m);
  }
}

// Binary F over staged operands, each contiguous or a broadcast scalar (stride 0).
template <class F, VecF::R (*Vf)(VecF::R, VecF::R)>
void sline2(void* out, const void* const* in, const int64_t* s, int64_t n, const Stages& st) {
  float* o = static_cast<float*>(out);
  const float* a = static_cast<const float*>(in[0]);
  const float* b = static_cast<const float*>(in[1]);
  if ((s[0] != 0 && s[0] != 1) || (s[1] != 0 && s[1] != 1)) {
    for (int64_t i = 0; i < n; ++i)
      o[i] = F::f(stage_scalar(a[i * s[0]], st.s[0], st.n[0]), stage_scalar(b[i * s[1]], st.s[1], st.n[1]));
    return;
  }
  // A broadcast operand is staged once; a masked load of a contiguous one never reads past n.
  VecF::R ab = VecF::set(s[0] == 0 ? stage_scalar(a[0], st.s[0], st.n[0]) : 0.0f);
  VecF::R bb = VecF::set(s[1] == 0 ? stage_scalar(b[0], st.s[1], st.n[1]) : 0.0f);
  constexpr int B = kStageBlock;
  constexpr int64_t L = VecF::kLanes;
  int64_t i = 0;
  for (; i + B * L <= n; i += B * L) {
    VecF::R x[B], y[B];
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) {
      x[j] = s[0] ? VecF::load(a + i + j * L) : ab;
      y[j] = s[1] ? VecF::load(b + i + j * L) : bb;
    }
    if (s[0]) stage_vec<B>(x, st.s[0], st.n[0]);
    if (s[1]) stage_vec<B>(y, st.s[1], st.n[1]);
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) VecF::store(o + i + j * L, Vf(x[j], y[j]));
  }
  for (; i < n; i += L) {  // the last vectors, the final one masked
    int64_t m = std::min<int64_t>(L, n - i);
    VecF::R x = !s[0] ? ab : m == L ? VecF::load(a + i) : VecF::load_n(a + i, m);
    VecF::R y = !s[1] ? bb : m == L ? VecF::load(b + i) : VecF::load_n(b + i, m);
    if (s[0]) stage_vec<1>(&x, st.s[0], st.n[0]);
    if (s[1]) stage_vec<1>(&y, st.s[1], st.n[1]);
    if (m == L) VecF::store(o + i, Vf(x, y));
    else VecF::store_n(o + i, Vf(x, y), m);
  }
}

template <class F, int Arity, auto Vf>
struct StagedLine {
  static StagedLineFn get() {
    if constexpr (Arity == 1) return sline1<F, Vf>;
    else return sline2<F, Vf>;
  }
};
template <class F, int Arity>
struct StagedLine<F, Arity, nullptr> {
  static StagedLineFn get() { return nullptr; }
};
StagedLineFn pick_staged(Op op, DType t) {
  if (t != DType::F32) return nullptr;
  switch (op) {
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) \
  case Op::Enum: return StagedLine<fn::Enum, arity, staged>::get();
#include "synoros/ops.def"
    default: return nullptr;
  }
}
#else
LineFn pick_vec_math(Op) { return nullptr; }
StagedLineFn pick_staged(Op, DType) { return nullptr; }
#endif

// The scalar line of map F over T: integer tensors only where the op allows them (kIntegers).
template <class T, class F, int Arity, unsigned Props>
LineFn typed_line() {
  if constexpr (std::is_integral_v<T> && (Props & kIntegers) == 0) return nullptr;
  else if constexpr (Arity == 1) return line1<F, T>;
  else if constexpr (Arity == 2) return line2<F, T>;
  else return line3<F, T>;
}
template <class T>
LineFn pick_typed(Op op) {
  if constexpr (std::is_same_v<T, float>)
    if (LineFn f = pick_vec_math(op)) return f;
  switch (op) {
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) \
  case Op::Enum: return typed_line<T, fn::Enum, arity, unsigned(props)>();
#include "synoros/ops.def"
    default: return nullptr;
  }
}

LineFn pick_line(Op op, DType t) {
  switch (t) {
    case DType::F32: return pick_typed<float>(op);
    case DType::F64: return pick_typed<double>(op);
    case DType::I32: return pick_typed<int32_t>(op);
    case DType::I64: return pick_typed<int64_t>(op);
  }
  return nullptr;
}

}  // namespace synoros::kernels::SYNOROS_ISA_NS
