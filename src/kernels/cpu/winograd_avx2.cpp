// AVX2 build of the 3x3 convolution's transforms (the same bits as every build).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/winograd.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "kernels/cpu/vec_avx2.hpp"
#define SYNOROS_ISA_NS avx2
#define SYNOROS_WINOGRAD_VEC 256
#include "kernels/cpu/winograd_impl.hpp"
#pragma GCC pop_options
