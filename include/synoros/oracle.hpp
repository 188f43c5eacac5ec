// The float64 oracle: an independent, obviously correct evaluator of every op, and verify(),
// which compares a plan's results against it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "synoros/ir.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

// Evaluates what `outputs` need in float64 (integers as i64). Inputs come from `feeds`; params
// and constants from their nodes. Returns one tensor per node (empty where not needed).
std::vector<HostTensor> oracle_eval(const Graph& g, const std::vector<ValueId>& outputs,
                                    const std::map<ValueId, HostTensor>& feeds);

// Error allowance of every value, in units of its dtype's epsilon: grows with each op on the
// path from the leaves and with the square root of every reduction length along it.
std::vector<double> error_budget(const Graph& g);

struct VerifyResult {
  bool ok = true;
  double worst = 0;       // largest |fast - ref| / allowed over all compared elements
  ValueId worst_value = kNoValue;
  std::string report;     // one line per failing value
};

// Compares the plan's last results (outputs, and every intermediate when asked) against the
// oracle run on the same inputs. Allowed error per element:
//   budget * eps * (|ref| + rms(ref)),
// the rms term covering cancellation in sums.
VerifyResult verify(Plan& plan, bool intermediates = false);

// Element-wise comparison of one value (exposed for tests).
VerifyResult compare(const HostTensor& fast, const HostTensor& ref, double budget, DType dtype,
                     const std::string& label);

}  // namespace synoros
