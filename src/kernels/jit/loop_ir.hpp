// The loop-level IR of generated kernels, in two forms.
//
// A run kernel: a fused elementwise group becomes one loop over a run of output elements, each
// element computed by a straight-line body of scalar ops (the op list's fn::Enum definitions) from
// the inputs at that element: the same operations in the same order as the interpreter's line
// kernels, so a generated kernel gives the interpreter's bits. The outer walk over rows,
// broadcasts and chunks across threads stays with the runtime (fused.cpp), so the order of work
// never depends on the kernel either.
//
// A row kernel: a row reduction with its elementwise producers and consumers (softmax, layer norm
// and its gradient) becomes a sequence of steps over each row of a fixed length: reductions (a sum
// or a maximum of a body evaluated at every element), scalar steps on their results, and stores.
// Every reduction has the engine's canonical order (line_fn.hpp's canonical_sum: element t into
// lane t % 8 of its 4096-element segment, lanes combined pairwise, segments added in order), so a
// generated row kernel gives the hand-written row kernels' bits on every instruction set. A row
// kernel's output is its rows (a store step, then patches of single elements at a per-row index,
// as cross-entropy's gradient corrects its target's element) or a few values per row (result
// steps: cross-entropy's per-row loss, read at its target through a gathered input); column steps
// after it add a value down the columns over the rows of a call (layer norm's weight and bias
// gradients, a chunk's partial sums).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros::kernels::jit {

// An input read along the run: element i is at base[i * stride] (0: one value broadcast).
// In a row kernel, an input is one of five sources, each one value per element of the row:
//   Memory  element k of row r at base[r * row_stride + k] (row_stride 0: the same row for all, a
//           layer norm's weight); with stride 0, one value per row at base[r * row_stride] (a
//           row's target index, a scale), broadcast along the row;
//   Out     the output row, as an earlier step stored it;
//   Step    the scalar an earlier step computed for this row (broadcast along the row);
//   Const   `value`, broadcast;
//   Gather  one element per row, broadcast: of input `of` (a Memory row), or of the output row
//           (`of` = -1) as stored (read by scalar steps alone), at the position input `at` (a
//           per-row Memory value) holds.
// Per-row values, steps, constants and gathers are a row's scalars: the only inputs of scalar steps.
struct LoopInput {
  enum class Src : uint8_t { Memory, Out, Step, Const, Gather };
  int64_t stride = 1;
  Src src = Src::Memory;
  int64_t row_stride = 0;
  int step = -1;
  float value = 0;
  int of = -1, at = -1;
};

// One statement of the body: value = op(args); arg >= 0 names an earlier statement, arg < 0
// the input -(arg + 1).
struct LoopStmt {
  Op op;
  int nargs = 0;
  int arg[3] = {0, 0, 0};
};

// One step of a row kernel; `value` names its value: a statement of its body (>= 0) or an input
// (-(k + 1)), so a step on an input alone needs no body.
//   Sum     the canonical sum of the value over the row (store: the value is also written to the
//           output row, as a softmax keeps exp(x - m)); defines the step's scalar.
//   Max     the row's maximum of the value, as the row kernels take it (a NaN value is skipped);
//           defines the step's scalar.
//   Scalar  the value of a body over the row's scalars, once per row.
//   Store   the value written to the output row.
//   Patch   after the store: the value of a body over the row's scalars written to the output
//           row's element at the position per-row input `at` holds.
//   Result  the kernel's output is a few values per row, one per result step (in their order):
//           this body's value over the row's scalars.
//   Column  the value at every element added to the call's column sums (row_n values per column
//           step, as layer norm's weight and bias gradients): each column one chain from +0 over
//           the call's rows in ascending order, NaN rows included (no guard applies).
struct RowStep {
  enum class Kind : uint8_t { Sum, Max, Scalar, Store, Patch, Result, Column };
  Kind kind = Kind::Store;
  bool store = false;
  std::vector<LoopStmt> body;
  int value = 0;
  int at = -1;  // a patch's position
  // A scalar, patch or result step: a body over the row's scalars, evaluated once per row.
  bool once_per_row() const { return kind == Kind::Scalar || kind == Kind::Patch || kind == Kind::Result; }
  // A sum, maximum or scalar step: its value is a row's scalar later steps may read.
  bool defines_scalar() const { return kind == Kind::Sum || kind == Kind::Max || kind == Kind::Scalar; }
};

// A run kernel (row_n == 0): for i in [0, n): out[i] = body[last](inputs at i).
// A row kernel (row_n > 0, float32): n rows of row_n elements; each row runs `steps` in order:
// sums, maxima and scalars, then either the store of its output row (the output's rows
// consecutive) and any patches, or its results (the output that many values per row), then any
// column steps (their sums over the call's rows are a second output). A row where
// the scalar of any step in `nan_guard` is NaN is written as the one quiet NaN throughout, without
// patches (the row kernels' rule). Its memory inputs come first. All values are of one dtype,
// positions included (exact as floats below 2^24).
struct LoopKernel {
  DType dtype = DType::F32;
  std::vector<LoopInput> inputs;
  std::vector<LoopStmt> body;
  int64_t row_n = 0;
  std::vector<RowStep> steps;
  std::vector<int> nan_guard;
  // Output values per row: row_n, or the number of results of a kernel ending in results.
  int64_t out_n() const {
    int64_t results = 0;
    for (const RowStep& s : steps) results += s.kind == RowStep::Kind::Result;
    return results > 0 ? results : row_n;
  }
  // Column steps: each one a row of row_n sums besides the output.
  int64_t columns() const {
    int64_t n = 0;
    for (const RowStep& s : steps) n += s.kind == RowStep::Kind::Column;
    return n;
  }
  // A canonical one-line text of the kernel (ops, arguments, strides): equal text, equal kernel.
  std::string text() const;
};

// Throws Error unless every statement is an elementwise map with 1-3 arguments, each an earlier
// statement or an input, and (a row kernel) every input and step reads only what is defined
// before it, and its steps come in the order above.
void validate(const LoopKernel& k);

// fn's definition of an elementwise map ("GeluTanh" for fn::GeluTanh), or null for other ops.
const char* fn_name(Op op);
// The renderers' name of a statement's argument: "v3" (statement 3) or "x0" (input 0).
std::string value_name(int arg);

// The signature every generated kernel has: out[0, n) from ext[k] (input k at the run's start); a
// row kernel: n rows from ext[k] (a Memory input at its first row; other inputs' entries unread),
// out_n() values per row; with column steps, ext[inputs.size() + j] is column step j's row of row_n
// floats, which the call sets to its rows' sums (the one entry a kernel writes).
using RunFn = void (*)(const char* const* ext, char* out, int64_t n);

}  // namespace synoros::kernels::jit
