// AVX2 build of the convolution tiles (8 floats per vector, 16 registers).
#include <algorithm>
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/cpu/vec_avx2.hpp"
#define SYNOROS_ISA_NS avx2
#define SYNOROS_CONV_TILES_WIDE 0
#include "kernels/cpu/conv_tiles_impl.hpp"
#pragma GCC pop_options
