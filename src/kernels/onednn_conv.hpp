// oneDNN's direct convolution as an alternative lowering of a 2-D convolution contraction
// ("nchwxy,ocxy->nohw" read through a padded, strided, dilated unfold view of an [N, C, H, W]
// buffer). Like every provider it is checked against float64 on probe inputs first, then timed
// against the gather + GEMM lowering on the plan's own buffers; the faster one is kept and the
// choice cached. Not canonical: strict mode never takes it.
#pragma once

#include <optional>
#include <string>

#include "ir/einsum_spec.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels {

struct ConvGeom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, dh, dw;  // stride and dilation (1 = dense)
  int64_t pt, pl, pb, pr;  // zero padding: top, left, bottom, right
};

// The convolution the contraction computes, when it is one oneDNN can run (f32, plain weights).
std::optional<ConvGeom> match_conv(const LowerCtx& c, const EinsumSpec& e);

// Returns `gemm_path` or an oneDNN convolution launch, whichever the selection picks.
Launch select_conv_lowering(LowerCtx& c, const EinsumSpec& e, Launch gemm_path);

// Tests: "onednn-conv" or "gemm" forces that lowering for every matched convolution (after the
// oracle check); empty restores measured selection.
void force_conv_lowering(const std::string& name);

}  // namespace synoros::kernels
