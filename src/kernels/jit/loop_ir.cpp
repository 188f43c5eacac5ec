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
