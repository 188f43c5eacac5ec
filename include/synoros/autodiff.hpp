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

}  // namespace synoros
