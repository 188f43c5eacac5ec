// AVX2 build of the same line kernels; with -ffp-contract=off it gives the scalar build's bits.
#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "kernels/cpu/scalar_ops.hpp"
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define SYNOROS_ISA_NS avx2
#include "kernels/cpu/map_lines_impl.hpp"
#pragma GCC pop_options
