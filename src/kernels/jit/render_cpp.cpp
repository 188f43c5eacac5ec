// The C++ renderer: a loop kernel as one function over a run, for the system compiler.
#include <sstream>

#include "kernels/jit/render.hpp"

namespace synoros::kernels::jit {

namespace {

// The vector form of an op, where the engine has one: the same IEEE operation (+, -, *, /,
// relu's max(0, x)) or vec_math.hpp's polynomial, which gives fn::Enum::f's bits in every lane.
const char* vector_form(Op op) {
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
    default: return nullptr;
  }
}

constexpr int kUnroll = 4;  // vectors per step of the main loop

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

const char* ctype(DType t) {
  switch (t) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
  }
  return "float";
}


// The body over scalars: plain code the compiler may vectorise (the same IEEE operations).
void scalar_loop(std::ostringstream& o, const LoopKernel& k, const char* T) {
  o << "  for (int64_t i = 0; i < n; ++i) {\n";
  for (size_t j = 0; j < k.inputs.size(); ++j)
    o << "    const " << T << " x" << j << " = in" << j << "[i * " << k.inputs[j].stride << "];\n";
  for (size_t i = 0; i < k.body.size(); ++i) {
    const LoopStmt& s = k.body[i];
    o << "    " << T << " v" << i << " = fn::" << fn_name(s.op) << "::f(";
    for (int j = 0; j < s.nargs; ++j) o << (j ? ", " : "") << value_name(s.arg[j]);
    o << ");\n    SYNOROS_KEEP(v" << i << ");\n";
  }
  o << "    out[i] = v" << k.body.size() - 1 << ";\n  }\n";
}

// U vector steps of the body, at elements i + u * L for u < U, interleaved statement by statement
// so that the latency-bound polynomial chains of the U vectors overlap (as the interpreter's
// staged lines process four vectors per step). `tail`: one last, partial vector of m lanes (loads
// masked, strided inputs read only below m, the store masked).
void vector_step(std::ostringstream& o, const LoopKernel& k, int U, bool tail) {
  const char* ind = "    ";
  auto name = [&](int a, int u) {
    if (a < 0 && k.inputs[size_t(-a - 1)].stride == 0) return value_name(a);  // broadcast: set once
    return value_name(a) + "_" + std::to_string(u);
  };
  auto at = [](int u) { return u ? "i + " + std::to_string(u) + " * L" : std::string("i"); };
  for (size_t j = 0; j < k.inputs.size(); ++j) {
    int64_t s = k.inputs[j].stride;
    if (s == 0) continue;
    for (int u = 0; u < U; ++u) {
      std::string x = name(-int(j) - 1, u);
      if (s == 1) {
        o << ind << "const VecF::R " << x << " = " << (tail ? "VecF::load_n(in" : "VecF::load(in") << j << " + " << at(u)
          << (tail ? ", m" : "") << ");\n";
      } else {
        o << ind << "VecF::R " << x << ";\n" << ind << "{\n" << ind << "  alignas(64) float t[L];\n" << ind
          << "  for (int64_t l = 0; l < L; ++l) t[l] = " << (tail ? "l < m ? " : "") << "in" << j << "[(" << at(u)
          << " + l) * " << s << "]" << (tail ? " : 0.0f" : "") << ";\n"
          << ind << "  " << x << " = VecF::load(t);\n" << ind << "}\n";
      }
    }
  }
  for (size_t i = 0; i < k.body.size(); ++i) {
    const LoopStmt& s = k.body[i];
    for (int u = 0; u < U; ++u) {
      std::string v = "v" + std::to_string(i) + "_" + std::to_string(u);
      auto nm = [&](int a) { return name(a, u); };
      if (const char* form = vector_form(s.op)) {
        o << ind << "VecF::R " << v << " = " << substitute(form, s, nm) << ";\n";
      } else {  // no vector form: lane by lane through the scalar definition
        o << ind << "VecF::R " << v << ";\n" << ind << "{\n" << ind << "  alignas(64) float a[3][L], r[L];\n";
        for (int j = 0; j < s.nargs; ++j) o << ind << "  VecF::store(a[" << j << "], " << nm(s.arg[j]) << ");\n";
        o << ind << "  for (int64_t l = 0; l < L; ++l) r[l] = fn::" << fn_name(s.op) << "::f(";
        for (int j = 0; j < s.nargs; ++j) o << (j ? ", " : "") << "a[" << j << "][l]";
        o << ");\n" << ind << "  " << v << " = VecF::load(r);\n" << ind << "}\n";
      }
      o << ind << "SYNOROS_KEEP(" << v << ");\n";
    }
  }
  for (int u = 0; u < U; ++u) {
    std::string last = "v" + std::to_string(k.body.size() - 1) + "_" + std::to_string(u);
    if (tail) o << ind << "VecF::store_n(out + i, " << last << ", m);\n";
    else o << ind << "VecF::store(out + " << at(u) << ", " << last << ");\n";
  }
}

}  // namespace

std::string render_cpp(const LoopKernel& k, Isa isa, const std::string& symbol) {
  validate(k);
  const char* T = ctype(k.dtype);
  bool vec = isa != Isa::Scalar && k.dtype == DType::F32;
  std::ostringstream o;
  o << "// Generated by Synoros: " << k.text() << "\n";
  o << "#include <cstdint>\n#include \"ir/scalar_ops.hpp\"\n";
  if (vec) {
    o << "#include \"kernels/cpu/vec_math.hpp\"\n";
    o << (isa == Isa::Avx512 ? "#include \"kernels/cpu/vec_avx512.hpp\"\nusing VecF = synoros::kernels::avx512::VecF;\n"
                             : "#include \"kernels/cpu/vec_avx2.hpp\"\nusing VecF = synoros::kernels::avx2::VecF;\n");
    o << "namespace vmath = synoros::kernels::vmath;\n";
  }
  o << "namespace fn = synoros::fn;\n";
  // Each statement's value is opaque to the optimiser: no folding across ops (-a + b into b - a
  // changes a NaN's sign), so every op runs exactly as its line kernel does.
  o << "#define SYNOROS_KEEP(v) __asm__(\"\" : \"+v\"(v))\n\n";
  o << "extern \"C\" void " << symbol << "(const char* const* ext, char* out_, int64_t n) {\n";
  for (size_t j = 0; j < k.inputs.size(); ++j)
    o << "  const " << T << "* in" << j << " = reinterpret_cast<const " << T << "*>(ext[" << j << "]);\n";
  o << "  " << T << "* out = reinterpret_cast<" << T << "*>(out_);\n";
  if (!vec) {
    scalar_loop(o, k, T);
    o << "}\n";
    return o.str();
  }
  o << "  constexpr int64_t L = VecF::kLanes;\n";
  for (size_t j = 0; j < k.inputs.size(); ++j)
    if (k.inputs[j].stride == 0) o << "  const VecF::R x" << j << " = VecF::set(in" << j << "[0]);\n";
  o << "  int64_t i = 0;\n  for (; i + " << kUnroll << " * L <= n; i += " << kUnroll << " * L) {\n";
  vector_step(o, k, kUnroll, false);
  o << "  }\n  for (; i + L <= n; i += L) {\n";
  vector_step(o, k, 1, false);
  o << "  }\n  if (i < n) {\n    const int64_t m = n - i;\n";
  vector_step(o, k, 1, true);
  o << "  }\n}\n";
  return o.str();
}

}  // namespace synoros::kernels::jit
