// Window contractions (depthwise / channel-window / 1-D convolutions, matrix-vector products
// along rows) without gathering: see window_einsum.cpp.
#pragma once

#include <optional>

#include "ir/einsum_spec.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::kernels {

// The launch when the two-operand f32 contraction has that form (the weights do not vary along
// the output's innermost label, the other operand reads it with unit stride), else nullopt: on
// AVX-512 when no output label comes from the weights alone; on AVX2 (kernel "window-cols")
// when at most one does, with at most 16 values (a convolution's output channels), over rows of
// 7 to 64 outputs. Same bits as the gather + GEMM lowering.
std::optional<Launch> lower_window_einsum(LowerCtx& c, const EinsumSpec& e);

// On by default; SYNOROS_WINDOW_EINSUM=0 or set_window_einsum(false) sends these contractions
// through gather + GEMM instead (tests compare the two bit for bit). Part of kernel_config().
bool window_einsum_enabled();
void set_window_einsum(bool on);

}  // namespace synoros::kernels
