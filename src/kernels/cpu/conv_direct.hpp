// The engine's convolutions without the unfolded gather: see conv_direct.cpp and
// conv_weight_grad.cpp.
#pragma once

#include <optional>

#include "kernels/kernel_api.hpp"
#include "passes/conv_match.hpp"

namespace synoros::kernels {

// The launch (kernel "engine-conv") for a forward convolution g -- or a stride-1 data gradient,
// which has the same form -- with the unfold view of operand `v` over the [N, C, H, W]
// buffer at `x` and plain [O, C, KH, KW] weights, on AVX2 or AVX-512; else nullopt. Same bits as
// the gather + GEMM lowering.
std::optional<Launch> lower_conv_direct(LowerCtx& c, const passes::ConvGeom& g, const float* x,
                                        const float* w);

// The data gradient fold(fold(einsum(dY, W))) of a convolution (the chain m ending at the node
// lowered, dY and W plain) as one launch (kernel "engine-conv-data") on AVX2 or AVX-512, else
// nullopt: the unfolded gradient is computed in the core's cache, a block of channels at a
// time, and folded as the fold kernels do. Same bits as the chain's own kernels.
std::optional<Launch> lower_conv_data_grad_direct(LowerCtx& c, const passes::ConvDataChain& m,
                                                  const float* dy, const float* w);

// A convolution's weight gradient (g.kind BwdWeights: the unfold view of the [N, C, H, W] buffer
// at x and plain dY) as kernel "engine-conv-weights" on AVX2 or AVX-512, else nullopt: no
// unfolded gather, dW's chains over (n, oh, ow) in registers. Same bits as gather + GEMM.
std::optional<Launch> lower_conv_weight_grad_direct(LowerCtx& c, const passes::ConvGeom& g,
                                                    const float* x, const float* dy);

// On by default; SYNOROS_CONV_DIRECT=0 or set_conv_direct(false) leaves these convolutions to the
// other lowerings (tests compare them bit for bit). Part of kernel_config().
bool conv_direct_enabled();
void set_conv_direct(bool on);
// Enabled, on AVX2 or AVX-512, for a float32 node: where the kernels above may apply.
bool conv_direct_applies(const LowerCtx& c);

}  // namespace synoros::kernels
