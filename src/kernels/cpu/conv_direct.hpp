// Stride-1 convolutions without the unfolded gather: see conv_direct.cpp.
#pragma once

#include <optional>

#include "kernels/kernel_api.hpp"
#include "passes/conv_match.hpp"

namespace synoros::kernels {

// The launch (kernel "engine-conv") for a forward convolution g -- or a stride-1 data gradient,
// which has the same form -- with stride 1, the unfold view of operand `v` over the [N, C, H, W]
// buffer at `x` and plain [O, C, KH, KW] weights, on AVX2 or AVX-512; else nullopt. Same bits as
// the gather + GEMM lowering.
std::optional<Launch> lower_conv_direct(LowerCtx& c, const passes::ConvGeom& g, const float* x,
                                        const float* w);

// On by default; SYNOROS_CONV_DIRECT=0 or set_conv_direct(false) leaves these convolutions to the
// other lowerings (tests compare them bit for bit). Part of kernel_config().
bool conv_direct_enabled();
void set_conv_direct(bool on);

}  // namespace synoros::kernels
