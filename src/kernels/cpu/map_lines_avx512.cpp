// AVX-512 build of the elementwise line kernels (16 floats per vector, 32 registers); with
// -ffp-contract=off it gives the same bits as the scalar and AVX2 builds.
#include <cmath>
#include <cstdint>
#include "kernels/cpu/line_fn.hpp"
#include "kernels/cpu/scalar_ops.hpp"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")
#define SYNOROS_ISA_NS avx512
#include "kernels/cpu/map_lines_impl.hpp"
#pragma GCC pop_options
