#pragma once

#include <cstdint>

#include "synoros/ir.hpp"

namespace synoros::kernels {

// out[0..n) = F(in0[i*s0], in1[i*s1], ...): one run of an elementwise map.
using LineFn = void (*)(void* out, const void* const* in, const int64_t* s, int64_t n);

namespace scalar { LineFn pick_line(Op op, DType t); }
namespace avx2 { LineFn pick_line(Op op, DType t); }
namespace avx512 { LineFn pick_line(Op op, DType t); }
// The active ISA's line kernel for an elementwise op, or nullptr.
LineFn pick_line(Op op, DType t);

}  // namespace synoros::kernels
