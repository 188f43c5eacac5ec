// AVX-512 build of the 3x3 convolution's transforms (the same bits as every build).
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports as a use of an uninitialised value (a false positive, as in gemm.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/winograd.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,prefer-vector-width=512")
#include "kernels/cpu/vec_avx512.hpp"
#define SYNOROS_ISA_NS avx512
#define SYNOROS_WINOGRAD_VEC 512
#include "kernels/cpu/winograd_impl.hpp"
#pragma GCC pop_options
#pragma GCC diagnostic pop
