// Convolutions recognised in the graph: a contraction over a padded, strided, dilated unfold
// view of an [N, C, H, W] buffer is a 2-D convolution (forward or weight gradient), and the chain
// fold(fold(einsum(dY, W))) autodiff writes for an input gradient is a backward-data convolution.
// The geometry found here is what a convolution kernel (oneDNN's) is asked to run.
#pragma once

#include <optional>
#include <vector>

#include "ir/einsum_spec.hpp"
#include "passes/views.hpp"
#include "synoros/ir.hpp"

namespace synoros::passes {

enum class ConvKind {
  Forward,     // y = conv(x, W)
  BwdWeights,  // dW from x and dY
  BwdData,     // dX from dY and W (the transposed convolution)
};

struct ConvGeom {
  ConvKind kind;
  bool kswap = false;  // weights laid out [O, C, KW, KH] (a window-flipped transposed convolution's)
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, dh, dw;  // stride and dilation (1 = dense)
  int64_t pt, pl, pb, pr;  // zero padding: top, left, bottom, right
};

// An operand as a kernel reads it: through a folded view of a buffer (the buffer's shape, the
// view's element strides and offset, its zero-padding gates), or plainly (viewed = false).
struct ReadView {
  bool viewed = false;
  Shape shape;  // the operand's
  Shape base_shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  std::vector<ViewGate> gates;
};

// The convolution a float32 contraction `e` computes over operands read as `in`, when it is one:
// the forward "nchwxy,ocxy->nohw" (U, weights) or the weight gradient "nohw,nchwxy->ocxy"
// (dY, U), with U an unfold view and the other operand plain.
std::optional<ConvGeom> match_conv(DType dtype, const EinsumSpec& e, const std::vector<ReadView>& in);

// A convolution's data gradient fold(fold(einsum(dY, W))) ending at the fold f2: its geometry,
// which einsum operand is dY, the einsum and the first fold. The plan keeps neither value and
// lowers f2 as one launch (fuse_conv_data_chains).
struct ConvDataChain {
  ConvGeom g;
  int dy;
  ValueId e, f1;
};
std::optional<ConvDataChain> match_conv_data_grad(const Graph& g, ValueId f2);

}  // namespace synoros::passes
