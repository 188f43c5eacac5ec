#include "kernels/jit/recompile_group.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/jit/compiler.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/providers.hpp"

namespace synoros::kernels::jit {

namespace {
constexpr const char* kSymbol = "synoros_run";
// Bumped whenever the renderer changes what it writes for a kernel: cached choices then lapse.
constexpr const char* kRendererVersion = "1";
}  // namespace

GroupRecompile recompile_group(void* group) {
  GroupRecompile r;
  const LoopKernel* k = group_loop_kernel(group);
  if (!k) return r;
  r.kernel = k->text();
  const int64_t total = group_elements(group);
  if (total == 0) return r;  // nothing to compute
  const std::string key = tuning_key("jit-group " + r.kernel + " n=" + std::to_string(total) + " walk=" + group_walk(group),
                                     strict_kernels());
  std::string name, version;
  bool have = cached_choice(key, name, version) && version == kRendererVersion;
  if (have && name == "interpreter") {
    group_set_run(group, nullptr);
    r.outcome = "interpreter";
    r.cached = true;
    return r;
  }
  const Isa isa = active_isa();
  Compiled c = compile(render_cpp(*k, isa, kSymbol), kSymbol, isa);
  r.compile_seconds = c.seconds;
  if (!c.symbol) {
    group_set_run(group, nullptr);
    r.outcome = "failed: " + c.error;
    return r;
  }
  RunFn run = reinterpret_cast<RunFn>(c.symbol);
  // The same elements through both: identical bits, or the generated kernel is refused.
  const int64_t n = std::min<int64_t>(total, kProbeElements);
  std::vector<float> ref(static_cast<size_t>(n)), gen(static_cast<size_t>(n));
  group_prepare(group);
  group_set_run(group, nullptr);
  group_eval(group, 0, n, ref.data());
  group_set_run(group, run);
  group_eval(group, 0, n, gen.data());
  if (std::memcmp(ref.data(), gen.data(), size_t(n) * sizeof(float)) != 0) {
    group_set_run(group, nullptr);
    r.outcome = "rejected: its bits differ from the interpreter's";
    record_rejection(key, "generated kernel: its bits differ from the interpreter's");
    return r;
  }
  if (have && name == "generated") {
    r.outcome = "generated";
    r.cached = true;
    return r;
  }
  std::vector<double> t = best_times_interleaved({
      [&] {
        group_set_run(group, nullptr);
        group_eval(group, 0, n, ref.data());
      },
      [&] {
        group_set_run(group, run);
        group_eval(group, 0, n, gen.data());
      },
  });
  r.interpreter_ns = t[0];
  r.generated_ns = t[1];
  bool faster = t[1] < t[0];
  group_set_run(group, faster ? run : nullptr);
  r.outcome = faster ? "generated" : "interpreter";
  store_choice(key, r.outcome, kRendererVersion);
  return r;
}

}  // namespace synoros::kernels::jit
