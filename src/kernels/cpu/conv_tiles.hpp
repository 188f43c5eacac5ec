// The register tiles of the engine's convolution kernels (conv_direct.cpp, conv_weight_grad.cpp),
// built once per instruction set from conv_tiles_impl.hpp (conv_tiles_avx2.cpp,
// conv_tiles_avx512.cpp). Every output of a tile is one FMA chain from +0 (or from the value
// it continues) in the order its loop runs, so both builds give the same bits.
#pragma once

#include <cstdint>

namespace synoros::kernels {

// A weight-gradient tile's view of its chunk: dY transposed to [position][Op] and the padded
// images (rows of Wp, Hp rows per image) that the groups' base pointers point into.
struct WgradTileArgs {
  const float* dyt;
  int64_t Op, OH, OW, Hp, Wp, sh, sw, dw;
};

#define SYNOROS_CONV_TILES(NS)                                                                    \
  namespace NS {                                                                                  \
  /* Vectors of positions per forward tile, most output channels per forward tile. */             \
  constexpr int kConvVectors = 3;                                                                 \
  int conv_tile_rows();                                                                           \
  int64_t conv_tile_lanes();                                                                      \
  /* c[i ldc + j] = chain over k < K of w[i ldw + k] * b[off[k] + j], i < rows, j < lanes. */     \
  void conv_tile(int64_t rows, int64_t K, const float* w, int64_t ldw, const int64_t* off,        \
                 const float* b, float* c, int64_t ldc);                                          \
  /* Groups of kwt taps per weight-gradient tile of v vectors (as many as the registers hold). */ \
  int64_t wgrad_groups(int kwt, int64_t v);                                                       \
  /* The chains of wgrad_groups(kwt, v) groups x kwt taps x v vectors of output channels from o0  \
     over the first ni images' positions; acc (rows of ld) holds them (first: start at +0). */    \
  void wgrad_tile(int kwt, int64_t v, const WgradTileArgs& a, int64_t ni,                         \
                  const float* const* bases, float* acc, int64_t ld, int64_t o0, bool first);     \
  }

SYNOROS_CONV_TILES(avx2)
SYNOROS_CONV_TILES(avx512)
#undef SYNOROS_CONV_TILES

}  // namespace synoros::kernels
