// The forward replay of an operator's index expressions (shared by lowering and export).
#pragma once

#include <string>
#include <vector>

#include "synoros/synth.hpp"

namespace synoros::synth {

struct LowerPlan {
  struct Step {
    enum T { Reshape, Permute, Expand, Shift, Stride, Unfold } t;
    std::vector<int64_t> ints;  // Reshape/Expand: target shape; Permute: perm; Shift: (axis, 1);
                                // Stride: (axis, s); Unfold: (axis, window, 1)
  };
  struct Contract {
    std::string spec;  // einsum spec
    int weight;        // weight index, -1: single-operand reduction
  };
  Shape x_shape;
  std::vector<Step> steps;
  std::string x_labels;  // one label per iterator axis of x after the views
  // Output iterators that x reads only as o / B (or o mod B) are contracted as two labels, the
  // quotient and the remainder, so a block-diagonal operator is a batched product rather than x
  // repeated along o: the weights holding o are viewed with that axis split (weight_views[w],
  // empty: as it is) and the chain's result is reshaped to out_shape (empty: nothing factored).
  std::vector<Shape> weight_views;
  Shape out_shape;
  std::vector<Contract> chain;
  double flops = 0;
};

int64_t eval_size(const Spec& sp, const Size& z, const Binding& bind);
LowerPlan make_plan(const Spec& spec, const Operator& op, const Binding& bind);

}  // namespace synoros::synth
