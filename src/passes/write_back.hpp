// Updates written into their parameters. A compiled training step's new parameter values and
// optimizer state are outputs that replace leaves after the run; where it is safe, the launch that
// computes one writes it straight into the storage it replaces, and runs as soon as its inputs are
// ready and the old value's last reader has run. A gradient then dies right after its update
// instead of at the end of the step, and the new values need neither arena space nor a copy.
#pragma once

#include <utility>
#include <vector>

#include "passes/memory_plan.hpp"
#include "synoros/ir.hpp"

namespace synoros::passes {

// `pairs` are (value, parameter): the plan's output `value` replaces the leaf `parameter` (an
// Op::Param) once the run is over. A pair is taken when
//   - the value is a launch's own output in the arena (not an alias, not fused away), of the
//     parameter's dtype and shape, and no other pair names the value or the parameter;
//   - no output observes the parameter itself (nor does keep_intermediates);
//   - every other launch that reads the parameter comes before the one writing the value, and
//     that one reads it, if at all, only element by element where it writes (an in-place read).
// A taken value leaves the arena (mi.in_arena); the result gives, per value, the parameter whose
// storage holds it (kNoValue: none). The launches in `mi` are then reordered: each taken update,
// with the launches that lead only to updates and read nothing computed (a learning-rate schedule,
// a bias correction), moves up to just after the latest launch it depends on or that reads the
// parameter. Every launch still follows the launches it reads from, so values are unchanged.
std::vector<ValueId> write_back_updates(const Graph& g, const std::vector<std::pair<ValueId, ValueId>>& pairs,
                                        MemoryPlanInput& mi);

}  // namespace synoros::passes
