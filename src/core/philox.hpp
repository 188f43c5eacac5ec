// Counter-based random numbers (Philox4x32-10). A value depends only on (seed, counter), so
// dropout masks are the same whatever the thread count, block size or kernel.
#pragma once

#include <cstdint>

namespace synoros {

inline uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi) {
  uint64_t p = uint64_t(a) * b;
  hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// First 32-bit word of Philox4x32-10 at counter (ctr, 0, 0, 0) with key (seed lo, seed hi).
inline uint32_t philox_u32(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = philox_mulhilo(0xD2511F53u, c0, hi0);
    uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, c2, hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c0;
}

// Uniform in [0, 1) with 24 random bits: exactly representable in float and double.
inline float philox_uniform(uint64_t seed, uint64_t ctr) {
  return float(philox_u32(seed, ctr) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace synoros
