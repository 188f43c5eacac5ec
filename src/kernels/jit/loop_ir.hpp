// The loop-level IR of generated kernels. A fused elementwise group becomes one loop over a run of
// output elements, each element computed by a straight-line body of scalar ops (the op list's
// fn::Enum definitions) from the inputs at that element: the same operations in the same order as
// the interpreter's line kernels, so a generated kernel gives the interpreter's bits. The outer
// walk over rows, broadcasts and chunks across threads stays with the runtime (fused.cpp), so the
// order of work never depends on the kernel either.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros::kernels::jit {

// An input read along the run: element i is at base[i * stride] (0: one value broadcast).
struct LoopInput {
  int64_t stride = 1;
};

// One statement of the body: value = op(args); arg >= 0 names an earlier statement, arg < 0
// the input -(arg + 1).
struct LoopStmt {
  Op op;
  int nargs = 0;
  int arg[3] = {0, 0, 0};
};

// for i in [0, n): out[i] = body[last](inputs at i), all values of one dtype.
struct LoopKernel {
  DType dtype = DType::F32;
  std::vector<LoopInput> inputs;
  std::vector<LoopStmt> body;
  // A canonical one-line text of the kernel (ops, arguments, strides): equal text, equal kernel.
  std::string text() const;
};

// Throws Error unless every statement is an elementwise map with 1-3 arguments, each an earlier
// statement or an input.
void validate(const LoopKernel& k);

// fn's definition of an elementwise map ("GeluTanh" for fn::GeluTanh), or null for other ops.
const char* fn_name(Op op);
// The renderers' name of a statement's argument: "v3" (statement 3) or "x0" (input 0).
std::string value_name(int arg);

// The signature every generated run has: out[0, n) from ext[k] (input k at the run's start).
using RunFn = void (*)(const char* const* ext, char* out, int64_t n);

}  // namespace synoros::kernels::jit
