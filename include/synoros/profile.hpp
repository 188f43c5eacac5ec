// Measure: where time goes in a plan, per launch (a node or a fused group), against the limits
// of this machine measured by the same harness.
#pragma once

#include <string>
#include <vector>

#include "synoros/runtime.hpp"

namespace synoros {

struct MachinePeak {
  double gflops = 0;  // one core, f32 FMA, the active instruction set
  double gbps = 0;    // one core, streaming read + write
  std::string isa;
};

// Measures the peak FMA rate and memory bandwidth of one core (takes about half a second).
MachinePeak measure_peak();

struct ProfileEntry {
  ValueId node;
  std::string label;  // op, or the fused ops "einsum+add+relu"
  bool fast = false;  // its kernel rounds differently from the canonical order (fast mode only)
  double ns = 0;      // median time per run
  double flops = 0, bytes = 0;
  double gflops() const { return ns > 0 ? flops / ns : 0; }
  double gbps() const { return ns > 0 ? bytes / ns : 0; }
};

struct Profile {
  std::vector<ProfileEntry> entries;  // in launch order
  double total_ns = 0;                // median time of a whole run
  MachinePeak peak;
  // Sorted by time, with each launch's share of the run and of the machine's peak.
  std::string table() const;
  // Chrome / Perfetto trace events (the format PyTorch's profiler writes), one run laid out.
  std::string chrome_trace() const;
};

// Runs the plan `iterations` times (inputs as currently fed), timing every launch.
Profile profile(Plan& plan, int iterations, const MachinePeak& peak);

}  // namespace synoros
