// Recompile for one launch (a fused elementwise group, a row kernel): its loop kernel rendered,
// compiled (or loaded from the cache), checked bit for bit against the interpreter on the plan's
// own data, timed against it, and installed only when faster. The choice is kept in the tuning cache like
// every selection, so a rerun neither times nor (with a warm kernel cache) compiles anything.
#pragma once

#include <string>

#include "kernels/kernel_api.hpp"

namespace synoros::kernels::jit {

// The outcome for one site (named for the fused groups that were the first sites; row launches
// report the same way).
struct GroupRecompile {
  std::string kernel;   // the loop kernel's text
  std::string outcome;  // "generated", "interpreter" (it was faster), "rejected: ...", "failed: ..."
  double interpreter_ns = 0, generated_ns = 0;  // per probe run (0 when taken from the cache)
  double compile_seconds = 0;
  bool cached = false;  // the choice came from the tuning cache
};

// site: of the plan being recompiled (PlanStorage::jit_sites()), none of whose launches may run
// meanwhile. Returns nothing useful (empty kernel) for a site without a loop kernel.
GroupRecompile recompile_site(const JitSite& site);

// Elements the bit check and the timing run over: a site's first output elements, or for a row
// kernel the first whole rows that hold as many elements (at least four, where it has four).
constexpr long kProbeElements = 1 << 16;

}  // namespace synoros::kernels::jit
