// What the C++ renderers share: an op's vector form, argument substitution, C types.
#pragma once

#include <ostream>
#include <string>

#include "kernels/jit/loop_ir.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels::jit {

// The vector form of an op, where the engine has one: the same IEEE operation (+, -, *, /,
// relu's max(0, x)), a selection or sign operation, or vec_math.hpp's polynomial, which gives
// fn::Enum::f's bits in every lane.
inline const char* vector_form(Op op) {
  switch (op) {
    case Op::Add: return "VecF::add(%0, %1)";
    case Op::Sub: return "VecF::sub(%0, %1)";
    case Op::Mul: return "VecF::mul(%0, %1)";
    case Op::Div: return "VecF::div(%0, %1)";
    case Op::Relu: return "VecF::max(VecF::set(0.0f), %0)";
    case Op::Exp: return "vmath::exp<VecF>(%0)";
    case Op::Sigmoid: return "vmath::sigmoid<VecF>(%0)";
    case Op::Tanh: return "vmath::tanh<VecF>(%0)";
    case Op::Gelu: return "vmath::gelu<VecF>(%0)";
    case Op::GeluTanh: return "vmath::gelu_tanh<VecF>(%0)";
    case Op::GeluTanhGrad: return "vmath::gelu_tanh_grad<VecF>(%0, %1)";
    // Selections, exact like their scalar definitions (scalar_ops.hpp), NaN cases included.
    case Op::Neg: return "VecF::flip_sign(%0)";
    case Op::Abs: return "VecF::clear_sign(%0)";
    case Op::Max: return "VecF::select(VecF::either(VecF::lt(%0, %1), VecF::unord(%1, %1)), %1, %0)";
    case Op::Min: return "VecF::select(VecF::either(VecF::lt(%1, %0), VecF::unord(%1, %1)), %1, %0)";
    case Op::CmpLt: return "VecF::select(VecF::lt(%0, %1), VecF::set(1.0f), VecF::set(0.0f))";
    case Op::CmpEq: return "VecF::select(VecF::eq(%0, %1), VecF::set(1.0f), VecF::set(0.0f))";
    case Op::ReluGrad: return "VecF::select(VecF::le(%1, VecF::set(0.0f)), VecF::set(0.0f), %0)";
    case Op::Where: return "VecF::select(VecF::ne(%0, VecF::set(0.0f)), %1, %2)";
    default: return nullptr;
  }
}

template <class Name>
std::string substitute(const char* form, const LoopStmt& s, const Name& name) {
  std::string out;
  for (const char* p = form; *p; ++p) {
    if (*p == '%' && p[1] >= '0' && p[1] <= '2') {
      out += name(s.arg[p[1] - '0']);
      ++p;
    } else {
      out += *p;
    }
  }
  return out;
}

// Statement s of vector type V (its `kLanes` lanes) for an op without a vector form: lane by lane
// through the scalar definition fn::Enum::f, value v, arguments named by name(arg).
template <class Name>
void lane_by_lane(std::ostream& o, const LoopStmt& s, const std::string& V, const std::string& v,
                  const std::string& ind, const Name& name) {
  const std::string L = V + "::kLanes";
  o << ind << V << "::R " << v << ";\n" << ind << "{\n" << ind << "  alignas(64) float a[3][" << L << "], t[" << L << "];\n";
  for (int j = 0; j < s.nargs; ++j) o << ind << "  " << V << "::store(a[" << j << "], " << name(s.arg[j]) << ");\n";
  o << ind << "  for (int64_t l = 0; l < " << L << "; ++l) t[l] = fn::" << fn_name(s.op) << "::f(";
  for (int j = 0; j < s.nargs; ++j) o << (j ? ", " : "") << "a[" << j << "][l]";
  o << ");\n" << ind << "  " << v << " = " << V << "::load(t);\n" << ind << "}\n";
}

inline const char* ctype(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
  }
  return "float";
}

// render_cpp for a row kernel (render_rows.cpp); split: the scalar build of the CUDA form (a
// kernel with column steps in its two passes, one after the other), for tests on the CPU.
std::string render_rows_cpp(const LoopKernel& k, Isa isa, const std::string& symbol, bool split = false);
// A row kernel's steps as `template <int R> void rows(const float* const* in, float* out, float*
// const* col)` over R rows, col[j] column step j's sums (vec: with AVX2 vectors, VecF; wide: sums'
// and stores' bodies with AVX-512's, VecW; neither: scalar code a CUDA thread can run too), in an
// anonymous namespace; it uses fn::, SYNOROS_KEEP, memcpy, std::max, std::isnan, INFINITY and
// NAN. split (a kernel with column steps, for threads that each take a row): rows
// writes its rows' S scalars to `float* keep` in their place of the column sums, and a second
// pass `columns_at(ext, out, keep, col, n, k)` sums column k over the n rows from them.
std::string rows_source(const LoopKernel& k, bool vec, bool wide, bool split = false);
// Statements setting in[j] to each memory input j at row `row` (from ext[j], the first row).
std::string rows_pointers(const LoopKernel& k, const std::string& row, const std::string& ind);

}  // namespace synoros::kernels::jit
