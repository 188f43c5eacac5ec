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
  if (k.row_n < 0 || k.steps.empty() || !k.body.empty())
    throw Error("jit: a row kernel needs a positive row length and steps");
  if (k.dtype != DType::F32) throw Error("jit: row kernels are float32");
  // Sums, maxima and scalars; then one store and its patches, or the results; then column sums.
  size_t out_step = k.steps.size();
  bool columns = false;
  for (size_t i = 0; i < k.steps.size(); ++i) {
    const Kind kind = k.steps[i].kind;
    if (kind == Kind::Column) {
      columns = true;
      continue;
    }
    if (columns) throw Error("jit: a row kernel's column steps come last");
    const bool output = kind == Kind::Store || kind == Kind::Result;
    if (output && out_step == k.steps.size()) {
      out_step = i;
      continue;
    }
    const bool ok = out_step == k.steps.size() ? !output && kind != Kind::Patch
                    : k.steps[out_step].kind == Kind::Store ? kind == Kind::Patch
                                                            : kind == Kind::Result;
    if (!ok) throw Error("jit: a row kernel's steps end in one store and its patches, or in its results");
  }
  if (out_step == k.steps.size()) throw Error("jit: a row kernel needs steps ending in a store or a result");
  for (size_t j = 1; j < k.inputs.size(); ++j)
    if (k.inputs[j].src == Src::Memory && k.inputs[j - 1].src != Src::Memory)
      throw Error("jit: a row kernel's memory inputs come first");
  auto per_row = [&](int j) {  // a per-row memory value: a position's source
    return j >= 0 && size_t(j) < k.inputs.size() && k.inputs[size_t(j)].src == Src::Memory &&
           k.inputs[size_t(j)].stride == 0 && k.inputs[size_t(j)].row_stride >= 0;
  };
  bool stored = false;
  for (size_t i = 0; i < k.steps.size(); ++i) {
    const RowStep& st = k.steps[i];
    const bool scalar = st.once_per_row();
    auto readable = [&](size_t in) {
      const LoopInput& x = k.inputs[in];
      switch (x.src) {
        case Src::Step: return x.step >= 0 && size_t(x.step) < i && k.steps[size_t(x.step)].defines_scalar();
        case Src::Const: return true;
        case Src::Memory:
          return x.row_stride >= 0 && (x.stride == 0 || (x.stride == 1 && !scalar));
        case Src::Out: return stored && !scalar;
        case Src::Gather: {
          // The output row only in a scalar step: a step that writes the row would read back its own writes.
          const bool row = x.of == -1 ? stored && st.kind == Kind::Scalar
                                      : x.of >= 0 && size_t(x.of) < k.inputs.size() &&
                                            k.inputs[size_t(x.of)].src == Src::Memory &&
                                            k.inputs[size_t(x.of)].stride == 1 && k.inputs[size_t(x.of)].row_stride >= 0;
          return row && per_row(x.at);
        }
      }
      return false;
    };
    const std::string where = "row step " + std::to_string(i);
    validate_body(st.body, k.inputs.size(), where, readable);
    const int v = st.value;
    if (v >= int(st.body.size()) || (v < 0 && (size_t(-v - 1) >= k.inputs.size() || !readable(size_t(-v - 1)))))
      throw Error("jit: " + where + " has an undefined value");
    if (st.store && (st.kind != Kind::Sum || k.steps[out_step].kind == Kind::Result))
      throw Error("jit: only a sum step of a kernel that stores its rows also stores");
    if ((st.kind == Kind::Patch) != (st.at != -1) || (st.kind == Kind::Patch && !per_row(st.at)))
      throw Error("jit: " + where + ": a patch, and only a patch, has a per-row position");
    stored = stored || st.store || st.kind == Kind::Store;
  }
  for (int g : k.nan_guard)
    if (g < 0 || size_t(g) >= k.steps.size() || !k.steps[size_t(g)].defines_scalar())
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
      case Src::Gather: o << " g" << (in.of < 0 ? std::string("out") : value_name(-in.of - 1)) << '@' << value_name(-in.at - 1); break;
    }
  }
  o << " |";
  body_text(o, body);
  static const char* const kKind[] = {"sum", "max", "scalar", "store", "patch", "result", "column"};
  for (size_t i = 0; i < steps.size(); ++i) {
    o << (i ? " ;" : "") << " s" << i << '=' << kKind[int(steps[i].kind)] << (steps[i].store ? "+store" : "") << ':';
    body_text(o, steps[i].body);
    o << " -> " << value_name(steps[i].value);
    if (steps[i].at >= 0) o << " @" << value_name(-steps[i].at - 1);
  }
  if (!nan_guard.empty()) {
    o << " | nan";
    for (int g : nan_guard) o << " s" << g;
  }
  return o.str();
}

}  // namespace synoros::kernels::jit
