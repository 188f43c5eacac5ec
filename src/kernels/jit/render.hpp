// Renderers: a loop kernel (loop_ir.hpp) as source text for a compiler.
#pragma once

#include <string>

#include "kernels/jit/loop_ir.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels::jit {

// C++ for the system compiler: one extern "C" function `symbol` of type RunFn, vectorised with the
// ISA's vector traits (vec_avx2.hpp, vec_avx512.hpp) and vec_math.hpp's polynomials where an op has
// a vector form, lane by lane through fn::Enum::f where it has none; plain scalar code for
// Isa::Scalar. Includes the prelude headers (prelude.hpp) by their source-tree names.
std::string render_cpp(const LoopKernel& k, Isa isa, const std::string& symbol);

// CUDA C for NVRTC: a __global__ function `symbol`(ext, out, n), one thread per element in a
// grid-stride loop, each element through the same fn::Enum::f definitions. Like the C++ kernel it
// covers one innermost run (inputs at their run strides): a device launch over a whole group
// with broadcast rows needs the outer walk too. Not bit-equal to the CPU everywhere: pow is
// CUDA's powf, and GPUs return their own NaN for invalid operations.
std::string render_cuda(const LoopKernel& k, const std::string& symbol);

}  // namespace synoros::kernels::jit
