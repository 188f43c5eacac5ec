// The 3x3 convolution op (conv3x3) by Winograd's F(4x4, 3x3): see winograd.cpp.
#pragma once

#include <cstdint>

namespace synoros::kernels {

#define SYNOROS_WINOGRAD_TRANSFORMS(NS)                                                     \
  namespace NS {                                                                            \
  void winograd_split_row(const float* src, int64_t W, int64_t p, int64_t n, float* out,    \
                          float* tmp);                                                      \
  void winograd_input_rows(const float* pad, int64_t ld, int64_t tw, int64_t nty, float* v, \
                           int64_t ldv);                                                    \
  void winograd_output_rows(const float* m, int64_t ldm, int64_t tw, int64_t nty, float* y, \
                            int64_t ldy, int64_t rows, int64_t cols);                       \
  }
SYNOROS_WINOGRAD_TRANSFORMS(scalar)
SYNOROS_WINOGRAD_TRANSFORMS(avx2)
SYNOROS_WINOGRAD_TRANSFORMS(avx512)
#undef SYNOROS_WINOGRAD_TRANSFORMS

}  // namespace synoros::kernels
