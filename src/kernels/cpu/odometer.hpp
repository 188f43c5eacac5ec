// Multi-index walking shared by the strided kernels (maps and gathers): a flat output position
// split into per-dimension indices, advanced one innermost run at a time.
#pragma once

#include <cstdint>

namespace synoros::kernels {

inline void unravel_index(int64_t flat, int rank, const int64_t* shape, int64_t* idx) {
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
}

// Moves idx forward by `len` along the innermost dimension, carrying into outer ones.
inline void advance_index(int64_t len, int rank, const int64_t* shape, int64_t* idx) {
  idx[rank - 1] += len;
  for (int d = rank - 1; d > 0 && idx[d] == shape[d]; --d) {
    idx[d] = 0;
    ++idx[d - 1];
  }
}

}  // namespace synoros::kernels
