// Reverse-mode autodiff on the tape: gradient nodes are appended to the same Graph.
#pragma once

#include <vector>

#include "synoros/ir.hpp"

namespace synoros {

// Appends the nodes computing d(loss)/d(w) for each w in `wrt` and returns their ids. `loss`
// must be a scalar unless `seed` (the upstream gradient, same shape as loss) is given. A w that
// does not influence loss gets a zero tensor. Adjoints with several contributions are summed in
// tape order, so the gradient graph is deterministic.
std::vector<ValueId> grad(Graph& g, ValueId loss, const std::vector<ValueId>& wrt,
                          ValueId seed = kNoValue);

// The same with activation checkpointing: recompute[v] is the checkpointed segment value v
// belongs to (-1: none; shorter than the tape: the rest none). A segment's values are not kept
// for the backward pass: each one a gradient needs is computed again from the segment's inputs
// (the same ops and attributes, so the same bits), appended right where it is first needed, so
// the memory planner frees the forward's copies early. Values of a segment that a later value
// outside it reads are kept (they live on anyway).
std::vector<ValueId> grad(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed,
                          const std::vector<int32_t>& recompute);

}  // namespace synoros
