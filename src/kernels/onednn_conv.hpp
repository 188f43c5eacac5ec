// oneDNN's convolution (direct, and Winograd for 3x3 stride-1) as alternative lowerings of the two 2-D convolution
// contractions over a padded, strided, dilated unfold view U of an [N, C, H, W] buffer: the
// forward "nchwxy,ocxy->nohw" (U, weights) and the weight gradient "nohw,nchwxy->ocxy" (dY, U).
// Like every provider it is checked against float64 on probe inputs first, then timed against
// the gather + GEMM lowering on the same probe; the fastest is kept and the choice cached.
// Not canonical: strict mode never takes it.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "ir/einsum_spec.hpp"
#include "passes/conv_match.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels {

using passes::ConvDataChain;
using passes::ConvGeom;
using passes::ConvKind;

// How the lowering reads its operands (LowerCtx's folded views), for passes::match_conv.
std::vector<passes::ReadView> read_views(const LowerCtx& c);

// Returns `gemm_path` or an oneDNN convolution launch, whichever the selection picks.
Launch select_conv_lowering(LowerCtx& c, const EinsumSpec& e, Launch gemm_path);

// The alternative to oneDNN lowered over probe buffers: x the images (dY for the data gradient),
// b the second input, y the output, each laid out as for g.
using ProbeLowering = std::function<Launch(PlanStorage& storage, float* x, float* b, float* y)>;

// oneDNN's convolution g over x (images, or dY for the data gradient) and b (weights, or dY for
// the weight gradient), writing c.out -- or `alt`: oneDNN is checked against float64 on a probe
// and timed there against `alt_on_probe`, and the faster is kept (the choice cached). Both get
// scratch in the sizing pass, so the frame fits whichever is chosen. `alt_name` names the
// alternative in the tuning cache and in recorded choices.
Launch select_onednn(LowerCtx& c, const ConvGeom& g, const float* x, const float* b, Launch alt,
                     const ProbeLowering& alt_on_probe, const std::string& alt_name = "gemm");

// The chain as oneDNN's backward-data convolution or as its own three kernels, whichever the
// selection picks.
Launch lower_conv_data_grad(LowerCtx& c);

// Tests: "onednn-conv", "onednn-wino", "onednn-bwd" or "gemm" forces that lowering for every matched convolution
// (after the oracle check; "onednn-wino" takes the direct algorithm where Winograd does not
// apply); empty restores measured selection.
void force_conv_lowering(const std::string& name);
const std::string& forced_conv_lowering();  // "" when measured

}  // namespace synoros::kernels
