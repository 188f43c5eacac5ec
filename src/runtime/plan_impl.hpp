// The private state of a Plan, shared by the files that implement it (plan.cpp, recompile.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel_api.hpp"
#include "passes/memory_plan.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

struct Plan::Impl {
  std::unique_ptr<kernels::PlanStorage> storage;
  std::unique_ptr<Buffer> arena;
  passes::MemoryPlan memory;
  std::vector<std::vector<ValueId>> groups;  // fused groups of more than one op
  std::vector<LaunchInfo> info;              // per launch
  std::string compiled_for;
  std::vector<bool> readable;                // holds its value after run()
  bool keep_all = false;
  std::vector<ValueId> inputs;
  std::vector<bool> fed;
  size_t unfed = 0;
  int runs = 0;            // counted up to the run that recompiles
  bool auto_recompile = false;
  std::vector<std::pair<ValueId, ValueId>> write_back;  // as compiled
  std::vector<ValueId> written_into;                    // per value: the parameter holding it
  std::vector<Buffer*> written;                         // the parameters' storage a run writes
};

}  // namespace synoros
