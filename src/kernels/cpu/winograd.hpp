// The 3x3 convolution op (conv3x3) by Winograd's F(4x4, 3x3): see winograd.cpp.
#pragma once

#include <cstdint>

namespace synoros::kernels {

#define SYNOROS_WINOGRAD_TRANSFORMS(NS)                                                     \
  namespace NS {                                                                            \
  void winograd_input_tile(const float* p, int64_t ldr, int64_t C, float* v, int64_t ldxi); \
  void winograd_output_tile(const float* m, int64_t ldxi, int64_t O, float* y, int64_t ldr, \
                            int64_t ldc, int rows, int cols);                               \
  }
SYNOROS_WINOGRAD_TRANSFORMS(scalar)
SYNOROS_WINOGRAD_TRANSFORMS(avx2)
SYNOROS_WINOGRAD_TRANSFORMS(avx512)
#undef SYNOROS_WINOGRAD_TRANSFORMS

}  // namespace synoros::kernels
