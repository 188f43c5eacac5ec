// Measure: where time goes in a plan, per launch (a node or a fused group), against the limits
// of this machine measured by the same harness.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "synoros/runtime.hpp"

namespace synoros {

// Measures the peak FMA rate and memory bandwidth of one core, and of `threads` threads running
// at once (about half a second, more with threads).
MachinePeak measure_peak(int threads = 1);

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
  // The launches' time summed by their leading op (the label's first op: a fused group counts
  // under its first, so a GEMM with its fused epilogue is "einsum"), largest first.
  std::vector<std::pair<std::string, double>> by_leading_op() const;
  std::string by_leading_op_table() const;
  // Chrome / Perfetto trace events (the format PyTorch's profiler writes), one run laid out.
  std::string chrome_trace() const;
};

// Runs the plan `iterations` times (inputs as currently fed), timing every launch.
Profile profile(Plan& plan, int iterations, const MachinePeak& peak);

// A launch's work for the roofline model: its ops' FLOPs (the op table's costs) and the bytes
// it reads from memory and writes.
struct LaunchWork {
  double flops = 0, bytes = 0;
};
LaunchWork launch_work(const Plan& plan, size_t launch);

// The roofline model: the least time (ns) work can take on `threads` cores: its FLOPs at the FMA
// peak or its bytes at the streaming bandwidth, whichever is longer (both one core's, scaled by
// the thread count). 0 when the peak is unknown.
double roofline_ns(double flops, double bytes, const MachinePeak& peak, int threads);

// How well the model predicts: predicted / measured time over a set of runs (1 = the run reaches
// the machine's limit; below 1, it takes longer than the model says).
struct Calibration {
  size_t count = 0;
  double median = 0, lowest = 0, highest = 0;
};
Calibration calibrate(std::vector<double> predicted_over_measured);

// Selection certificates of a profiled plan: per launch, its measured time beside the roofline
// model's, and every kernel selection its lowering (and Recompile) made with the candidates,
// their float64 checks against their bounds and their timings.
struct LaunchCertificate {
  ValueId node;
  std::string label;
  double measured_ns = 0, predicted_ns = 0;
  std::vector<SelectionCertificate> selections;
};
struct Certificates {
  MachinePeak peak;
  int threads = 1;
  std::vector<LaunchCertificate> launches;  // in launch order
  Calibration launch_calibration;           // over launches measured at 1 us or more
  Calibration candidate_calibration;        // over the candidates timed when they were selected
  std::string table() const;                // the calibration, then each selection's candidates
  std::string json() const;
};
Certificates certify(const Plan& plan, const Profile& profile, int threads);

}  // namespace synoros
