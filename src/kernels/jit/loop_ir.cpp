#include <sstream>

#include "kernels/jit/loop_ir.hpp"

namespace synoros::kernels::jit {

const char* fn_name(Op op) {
  switch (op) {
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) \
  case Op::Enum: return #Enum;
#include "synoros/ops.def"
    default: return nullptr;
  }
}

namespace {
using Src = LoopInput::Src;
using Kind = RowStep::Kind;

bool defines_scalar(Kind k) { return k != Kind::Store; }

// A body's statements, each reading earlier statements or inputs that `readable` allows.
template <class Readable>
void validate_body(const std::vector<LoopStmt>& body, size_t n_inputs, const std::string& where, Readable readable) {
  for (size_t i = 0; i < body.size(); ++i) {
    const LoopStmt& s = body[i];
    if (!fn_name(s.op)) throw Error(std::string("jit: ") + op_name(s.op) + " is not an elementwise map");
    if (s.nargs < 1 || s.nargs > 3)
      throw Error("jit: statement " + std::to_string(i) + " has " + std::to_string(s.nargs) + " arguments");
    for (int j = 0; j < s.nargs; ++j) {
      int a = s.arg[j];
      if (a >= int(i) || (a < 0 && (size_t(-a - 1) >= n_inputs || !readable(size_t(-a - 1)))))
        throw Error("jit: " + where + ": statement " + std::to_string(i) + " reads an undefined value");
    }
  }
}
}  // namespace

void validate(const LoopKernel& k) {
  if (k.row_n == 0) {
    if (k.body.empty()) throw Error("jit: a loop kernel needs at least one statement");
    if (!k.steps.empty() || !k.nan_guard.empty()) throw Error("jit: a run kernel has no row steps");
    validate_body(k.body, k.inputs.size(), "a loop kernel", [&](size_t in) { return k.inputs[in].src == Src::Memory; });
    return;
  }
  if (k.row_n < 0 || k.steps.empty() || k.steps.back().kind != Kind::Store || !k.body.empty())
    throw Error("jit: a row kernel needs a positive row length and steps ending in a store");
  if (k.dtype != DType::F32) throw Error("jit: row kernels are float32");
  for (size_t i = 0; i + 1 < k.steps.size(); ++i)
    if (k.steps[i].kind == Kind::Store) throw Error("jit: a row kernel stores its row once, in its last step");
  for (size_t j = 1; j < k.inputs.size(); ++j)
    if (k.inputs[j].src == Src::Memory && k.inputs[j - 1].src != Src::Memory)
      throw Error("jit: a row kernel's memory inputs come first");
  bool stored = false;
  for (size_t i = 0; i < k.steps.size(); ++i) {
    const RowStep& st = k.steps[i];
    const bool scalar = st.kind == Kind::Scalar;
    auto readable = [&](size_t in) {
      const LoopInput& x = k.inputs[in];
      if (x.src == Src::Step)
        return x.step >= 0 && size_t(x.step) < i && defines_scalar(k.steps[size_t(x.step)].kind);
      if (scalar) return x.src == Src::Const;
      return x.src == Src::Const || (x.src == Src::Memory && x.stride == 1 && x.row_stride >= 0) ||
             (x.src == Src::Out && stored);
    };
    const std::string where = "row step " + std::to_string(i);
    validate_body(st.body, k.inputs.size(), where, readable);
    const int v = st.value;
    if (v >= int(st.body.size()) || (v < 0 && (size_t(-v - 1) >= k.inputs.size() || !readable(size_t(-v - 1)))))
      throw Error("jit: " + where + " has an undefined value");
    if (st.store && st.kind != Kind::Sum) throw Error("jit: only a sum step also stores");
    stored = stored || st.store || st.kind == Kind::Store;
  }
  for (int g : k.nan_guard)
    if (g < 0 || size_t(g) >= k.steps.size() || !defines_scalar(k.steps[size_t(g)].kind))
      throw Error("jit: a row kernel's NaN guard names a step without a scalar");
}

std::string value_name(int a) { return a >= 0 ? "v" + std::to_string(a) : "x" + std::to_string(-a - 1); }

namespace {
void body_text(std::ostringstream& o, const std::vector<LoopStmt>& body) {
  for (const LoopStmt& s : body) {
    o << ' ' << op_name(s.op) << '(';
    for (int j = 0; j < s.nargs; ++j) o << (j ? "," : "") << value_name(s.arg[j]);
    o << ')';
  }
}
}  // namespace

std::string LoopKernel::text() const {
  std::ostringstream o;
  o << dtype_name(dtype);
  if (row_n > 0) o << " rows of " << row_n;
  o << " in";
  for (const LoopInput& in : inputs) {
    switch (in.src) {
      case Src::Memory: o << ' ' << in.stride; if (row_n > 0) o << '/' << in.row_stride; break;
      case Src::Out: o << " out"; break;
      case Src::Step: o << " s" << in.step; break;
      case Src::Const: o << " " << std::hexfloat << in.value << std::defaultfloat; break;
    }
  }
  o << " |";
  body_text(o, body);
  static const char* const kKind[] = {"sum", "max", "scalar", "store"};
  for (size_t i = 0; i < steps.size(); ++i) {
    o << (i ? " ;" : "") << " s" << i << '=' << kKind[int(steps[i].kind)] << (steps[i].store ? "+store" : "") << ':';
    body_text(o, steps[i].body);
    o << " -> " << value_name(steps[i].value);
  }
  if (!nan_guard.empty()) {
    o << " | nan";
    for (int g : nan_guard) o << " s" << g;
  }
  return o.str();
}

}  // namespace synoros::kernels::jit
