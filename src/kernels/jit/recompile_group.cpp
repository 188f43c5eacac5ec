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
  // Two candidates: the interpreter (the reference) and the generated kernel, which must give
  // the interpreter's bits on the probe elements; it is compiled only when the choice is
  // measured or the cache picked it.
  const int64_t n = std::min<int64_t>(total, kProbeElements);
  std::vector<float> ref(static_cast<size_t>(n)), gen(static_cast<size_t>(n));
  RunFn run = nullptr;
  std::string failure;  // the outcome when the generated kernel is refused
  auto check_generated = [&]() -> Verdict {
    const Isa isa = active_isa();
    Compiled c = compile(render_cpp(*k, isa, kSymbol), kSymbol, isa);
    r.compile_seconds = c.seconds;
    if (!c.symbol) {
      failure = "failed: " + c.error;
      return "generated kernel: " + failure;
    }
    run = reinterpret_cast<RunFn>(c.symbol);
    group_prepare(group);
    group_set_run(group, nullptr);
    group_eval(group, 0, n, ref.data());
    group_set_run(group, run);
    group_eval(group, 0, n, gen.data());
    if (std::memcmp(ref.data(), gen.data(), size_t(n) * sizeof(float)) != 0) {
      failure = "rejected: its bits differ from the interpreter's";
      return Verdict("generated kernel: its bits differ from the interpreter's");
    }
    return Verdict();
  };
  std::vector<Candidate> cands = {
      {"interpreter", kRendererVersion, nullptr,
       [&] {
         group_set_run(group, nullptr);
         group_eval(group, 0, n, ref.data());
       }},
      {"generated", kRendererVersion, check_generated,
       [&] {
         group_set_run(group, run);
         group_eval(group, 0, n, gen.data());
       }},
  };
  ChooseOptions o;
  o.flops = double(n) * double(k->body.size());  // one operation per statement and element
  o.bytes = double(n) * double(dtype_size(k->dtype)) * double(k->inputs.size() + 1);
  o.store_unmeasured = false;  // a compiler missing now may be there next time
  // Either candidate gives the same bits, so a replay has nothing to reproduce: a recorded
  // choice from another renderer version lapses instead of failing the run.
  o.replay = false;
  Choice ch = choose(key, cands, o);
  r.cached = ch.from_cache;
  if (ch.index == 1 && ch.from_cache) {  // the cache's choice: compiled and checked here
    std::string why = check_generated().why;
    if (!why.empty()) {
      record_rejection(key, why);
      amend_certificate(0, why);
      ch.index = 0, r.cached = false;
    }
  }
  if (!ch.ns.empty()) r.interpreter_ns = ch.ns[0], r.generated_ns = ch.ns[1];
  group_set_run(group, ch.index == 1 ? run : nullptr);
  r.outcome = ch.index == 1 ? "generated" : failure.empty() ? "interpreter" : failure;
  return r;
}

}  // namespace synoros::kernels::jit
