// oneDNN's direct convolution as an alternative lowering of the two 2-D convolution
// contractions over a padded, strided, dilated unfold view U of an [N, C, H, W] buffer: the
// forward "nchwxy,ocxy->nohw" (U, weights) and the weight gradient "nohw,nchwxy->ocxy" (dY, U).
// Like every provider it is checked against float64 on probe inputs first, then timed against
// the gather + GEMM lowering on the same probe; the faster one is kept and the choice cached.
// Not canonical: strict mode never takes it.
#pragma once

#include <optional>
#include <string>

#include "ir/einsum_spec.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels {

struct ConvGeom {
  bool bwd_weights;  // the weight gradient, else the forward convolution
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, dh, dw;  // stride and dilation (1 = dense)
  int64_t pt, pl, pb, pr;  // zero padding: top, left, bottom, right
};

// The convolution the contraction computes, when it is one oneDNN can run (f32, plain weights or
// plain dY).
std::optional<ConvGeom> match_conv(const LowerCtx& c, const EinsumSpec& e);

// Returns `gemm_path` or an oneDNN convolution launch, whichever the selection picks.
Launch select_conv_lowering(LowerCtx& c, const EinsumSpec& e, Launch gemm_path);

// Tests: "onednn-conv" or "gemm" forces that lowering for every matched convolution (after the
// oracle check); empty restores measured selection.
void force_conv_lowering(const std::string& name);
const std::string& forced_conv_lowering();  // "" when measured

}  // namespace synoros::kernels
