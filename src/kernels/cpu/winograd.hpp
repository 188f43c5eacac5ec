// The 3x3 convolution op (conv3x3) by Winograd's F(2x2, 3x3): see winograd.cpp.
#pragma once

#include <cstdint>

namespace synoros::kernels {

#define SYNOROS_WINOGRAD_TRANSFORMS(NS)                                                     \
  namespace NS {                                                                            \
  void winograd_input_row(const float* e, const float* o, int64_t ld, int64_t tw, float* v, \
                          int64_t ldv);                                                     \
  void winograd_output_row(const float* m, int64_t ldm, int64_t tw, float* y, int64_t ldy,  \
                           int rows, int64_t cols);                                         \
  }
SYNOROS_WINOGRAD_TRANSFORMS(scalar)
SYNOROS_WINOGRAD_TRANSFORMS(avx2)
SYNOROS_WINOGRAD_TRANSFORMS(avx512)
#undef SYNOROS_WINOGRAD_TRANSFORMS

}  // namespace synoros::kernels
