#include "kernels/jit/recompile_site.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/jit/compiler.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/providers.hpp"

namespace synoros::kernels::jit {

namespace {
constexpr const char* kSymbol = "synoros_run";
// Operations per element: a run kernel's statements, a row kernel's statements in its passes over
// the row (scalar steps, patches and results run once per row).
size_t statements(const LoopKernel& k) {
  size_t n = k.body.size();
  for (const RowStep& s : k.steps) {
    n += s.once_per_row() ? 0 : s.body.size() + (s.kind != RowStep::Kind::Store);
  }
  return n;
}
// The probe's outputs agree: the output elements [0, out) bit for bit, column sums after them bit
// for bit or both NaN (a launch writes a NaN sum as the one quiet NaN, whatever its bits were).
bool same_bits(const std::vector<float>& ref, const std::vector<float>& gen, size_t out) {
  if (std::memcmp(ref.data(), gen.data(), out * sizeof(float)) != 0) return false;
  for (size_t i = out; i < ref.size(); ++i)
    if (!(std::isnan(ref[i]) && std::isnan(gen[i])) && std::memcmp(&ref[i], &gen[i], sizeof(float)) != 0) return false;
  return true;
}
// Bumped whenever the renderer changes what it writes for a kernel: cached choices then lapse.
constexpr const char* kRendererVersion = "5";
}  // namespace

GroupRecompile recompile_site(const JitSite& site) {
  GroupRecompile r;
  const LoopKernel* k = site.kernel;
  if (!k) return r;
  r.kernel = k->text();
  const JitSite::Ops& ops = *site.ops;
  void* args = site.args;
  const int64_t total = site.elements;
  if (total == 0) return r;  // nothing to compute
  // "jit-group": the prefix of the first sites' keys, kept so that recorded choices stay valid.
  const std::string key = tuning_key("jit-group " + r.kernel + " n=" + std::to_string(total) + " walk=" + site.walk,
                                     strict_kernels());
  // Two candidates: the interpreter (the reference) and the generated kernel, which must give
  // the interpreter's bits on the probe elements; it is compiled only when the choice is
  // measured or the cache picked it.
  // The probe: the first kProbeElements of the output, or of the rows a row kernel reads (whole
  // rows, at least four where there are); a kernel with results writes that many values per row.
  const int64_t g = site.granule;
  int64_t n = std::max(g, std::min<int64_t>(total, kProbeElements) / g * g);
  if (k->row_n > 0) {  // generated row kernels take four rows at a time
    const int64_t rows = total / k->out_n();
    n = std::max(std::min<int64_t>(rows, 4), std::min<int64_t>(rows, kProbeElements / k->row_n)) * k->out_n();
  }
  const double read = k->row_n > 0 ? double(n) / double(k->out_n()) * double(k->row_n) : double(n);  // elements
  // With column steps, the probe compares each call's column sums too.
  int64_t sums = 0;
  if (k->columns() > 0) {
    if (site.column_rows <= 0) throw Error("jit: a site of a kernel with column steps needs its rows per call");
    const int64_t rows = n / k->out_n();
    sums = (rows + site.column_rows - 1) / site.column_rows * k->columns() * k->row_n;
  }
  std::vector<float> ref(static_cast<size_t>(n + sums)), gen(static_cast<size_t>(n + sums));
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
    ops.prepare(args);
    ops.set_run(args, nullptr);
    ops.eval(args, 0, n, ref.data());
    ops.set_run(args, run);
    ops.eval(args, 0, n, gen.data());
    if (!same_bits(ref, gen, size_t(n))) {
      failure = "rejected: its bits differ from the interpreter's";
      return Verdict("generated kernel: its bits differ from the interpreter's");
    }
    return Verdict();
  };
  std::vector<Candidate> cands = {
      {"interpreter", kRendererVersion, nullptr,
       [&] {
         ops.set_run(args, nullptr);
         ops.eval(args, 0, n, ref.data());
       }},
      {"generated", kRendererVersion, check_generated,
       [&] {
         ops.set_run(args, run);
         ops.eval(args, 0, n, gen.data());
       }},
  };
  ChooseOptions o;
  o.flops = read * double(statements(*k));  // one operation per statement and element
  size_t streams = 1;  // the output, and each input read from memory along the run
  for (const LoopInput& in : k->inputs) streams += in.src == LoopInput::Src::Memory && in.stride != 0;
  o.bytes = read * double(dtype_size(k->dtype)) * double(streams);
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
  ops.set_run(args, ch.index == 1 ? run : nullptr);
  r.outcome = ch.index == 1 ? "generated" : failure.empty() ? "interpreter" : failure;
  return r;
}

}  // namespace synoros::kernels::jit
