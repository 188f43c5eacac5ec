// Place: fusion. Groups chains of elementwise ops of one shape and dtype so they run as one
// kernel; a value is fused into its consumer when that consumer is its only reader and nobody
// outside the plan can observe it.
#pragma once

#include <vector>

#include "synoros/ir.hpp"

namespace synoros::passes {

// The largest group the fused kernel takes (kernels::lower_group sizes its tables from these).
constexpr int kFuseMaxMembers = 16;
constexpr int kFuseMaxExternals = 8;

struct FusionGroup {
  std::vector<ValueId> members;    // tape order; the last member is the group's output
  std::vector<ValueId> externals;  // values read from outside the group, first-use order
  std::vector<ValueId> gathered;   // externals read through a view member (at other indices)
};

// One group per elementwise launch root. `launched`: values computed by a launch;
// `observable`: values that must stay materialised. With `enabled` false every group has one
// member.
std::vector<FusionGroup> fuse_elementwise(const Graph& g, const std::vector<bool>& launched,
                                          const std::vector<bool>& observable, bool enabled);

bool fusable(const Graph& g, ValueId v);
// Views (other than reshape and fold) join a group as loads when their shape is the group's.
bool foldable_view(const Graph& g, ValueId v);

// For each group (by index), the non-elementwise launch whose output only that group reads and
// that has the group output's shape and dtype, or kNoValue. That producer then runs inside the
// group's launch, writing into the group's output buffer, and the group runs over it in place
// as its epilogue (bias + activation after a matmul, an update after a reduction).
std::vector<ValueId> epilogue_producers(const Graph& g, const std::vector<FusionGroup>& groups,
                                        const std::vector<bool>& launched,
                                        const std::vector<bool>& observable, bool enabled);

}  // namespace synoros::passes
