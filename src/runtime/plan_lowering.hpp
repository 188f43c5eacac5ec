// Lowering a placed graph: one launch per group or unfused node, in tape order, over the buffers
// the plan has bound. Internal to the runtime.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/kernel_api.hpp"
#include "passes/placement.hpp"

namespace synoros {

struct LoweredLaunch {
  ValueId node;                // the value it writes
  Launch launch;
  std::vector<ValueId> ops;    // the nodes it computes, tape order
  std::string kernel;          // the kernel chosen, or empty for the op's own
};

struct PlanLowering {
  const Graph& g;
  const passes::Placement& p;
  const std::vector<void*>& ptrs;  // per value: its buffer (placeholders while sizing)

  // Lowers every launch into `storage`, launch i's scratch frame at frame_base(i). Returns the
  // scratch bytes each node's launch took. With `out` set, appends the launches that have a
  // kernel, and to `groups` the node lists of launches computing more than one node. Each
  // node's selection certificates go to selections[node], where a measured one is kept over a
  // later pass's reading of the same choice from the tuning cache.
  std::vector<size_t> lower_all(kernels::PlanStorage& storage, const std::function<char*(size_t)>& frame_base,
                                std::vector<LoweredLaunch>* out, std::vector<std::vector<ValueId>>* groups,
                                std::vector<std::vector<SelectionCertificate>>& selections) const;

 private:
  kernels::LowerCtx context(ValueId v, void* out, kernels::PlanStorage& storage) const;
};

}  // namespace synoros
