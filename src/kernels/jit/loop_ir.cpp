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

void validate(const LoopKernel& k) {
  if (k.body.empty()) throw Error("jit: a loop kernel needs at least one statement");
  for (size_t i = 0; i < k.body.size(); ++i) {
    const LoopStmt& s = k.body[i];
    if (!fn_name(s.op)) throw Error(std::string("jit: ") + op_name(s.op) + " is not an elementwise map");
    if (s.nargs < 1 || s.nargs > 3) throw Error("jit: statement " + std::to_string(i) + " has " + std::to_string(s.nargs) + " arguments");
    for (int j = 0; j < s.nargs; ++j) {
      int a = s.arg[j];
      if (a >= int(i) || (a < 0 && size_t(-a - 1) >= k.inputs.size()))
        throw Error("jit: statement " + std::to_string(i) + " reads an undefined value");
    }
  }
}

std::string value_name(int a) { return a >= 0 ? "v" + std::to_string(a) : "x" + std::to_string(-a - 1); }

std::string LoopKernel::text() const {
  std::ostringstream o;
  o << dtype_name(dtype) << " in";
  for (const LoopInput& in : inputs) o << ' ' << in.stride;
  o << " |";
  for (const LoopStmt& s : body) {
    o << ' ' << op_name(s.op) << '(';
    for (int j = 0; j < s.nargs; ++j) o << (j ? "," : "") << value_name(s.arg[j]);
    o << ')';
  }
  return o.str();
}

}  // namespace synoros::kernels::jit
