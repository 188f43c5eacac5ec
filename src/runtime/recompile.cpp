// Recompile, the last step of Track -> Place -> Measure -> Recompile: the plan's hot fused groups
// and row kernels get generated kernels where those are faster (kernels/jit/recompile_site.hpp
// decides each).
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/jit/compiler.hpp"
#include "kernels/jit/recompile_site.hpp"
#include "kernels/providers.hpp"
#include "runtime/plan_impl.hpp"
#include "synoros/profile.hpp"

namespace synoros {

int RecompileReport::generated() const {
  int n = 0;
  for (const RecompileEntry& e : entries) n += e.outcome == "generated";
  return n;
}

std::string RecompileReport::table() const {
  std::ostringstream o;
  o << "recompile: " << generated() << " of " << entries.size() << " candidate groups generated\n";
  o << std::left << std::setw(8) << "node" << std::setw(12) << "outcome" << std::right << std::setw(12)
    << "interp ns" << std::setw(12) << "gen ns" << std::setw(10) << "compile" << "  kernel\n";
  o << std::fixed << std::setprecision(0);
  for (const RecompileEntry& e : entries) {
    std::string outcome = e.outcome.substr(0, e.outcome.find(':'));
    o << std::left << std::setw(8) << ("%" + std::to_string(e.node)) << std::setw(12)
      << (outcome + (e.cached ? "*" : "")) << std::right << std::setw(12) << e.interpreter_ns << std::setw(12)
      << e.generated_ns << std::setw(9) << std::setprecision(2) << e.compile_seconds << "s" << std::setprecision(0)
      << "  " << e.kernel << "\n";
    if (e.outcome.find(':') != std::string::npos) o << "        " << e.outcome << "\n";
  }
  if (!entries.empty()) o << "(* the tuning cache's choice)\n";
  return o.str();
}

RecompileReport Plan::recompile(const RecompileOptions& opts) {
  RecompileReport report;
  impl_->runs = 2;  // done now: the second run need not do it again
  if (!kernels::jit::enabled()) return report;
  if (!opts.launch_ns.empty() && opts.launch_ns.size() != launches_.size())
    throw Error("recompile: " + std::to_string(opts.launch_ns.size()) + " launch times for a plan of " +
                std::to_string(launches_.size()) + " launches");
  std::map<ValueId, size_t> launch_of;
  for (size_t k = 0; k < launches_.size(); ++k) launch_of[launches_[k].node] = k;
  double sum = 0;
  for (double t : opts.launch_ns) sum += t;
  std::vector<bool> judged(launches_.size(), false);  // launches with a site decided here
  for (const kernels::JitSite& site : impl_->storage->jit_sites()) {
    const ValueId node = site.node;
    auto it = launch_of.find(node);
    if (it == launch_of.end() || !site.kernel) continue;  // folded, or not a loop
    size_t k = it->second;
    if (!opts.launch_ns.empty() && (opts.launch_ns[k] < opts.min_ns || opts.launch_ns[k] < opts.min_share * sum))
      continue;
    kernels::jit::GroupRecompile g;
    double floor_ns = 0;
    if (!opts.launch_ns.empty() && opts.peak.gbps > 0 && opts.peak.gflops > 0) {
      // Only where the launch is bound by memory: its bytes are exact, while a producer's FLOPs
      // (the op's direct count) can exceed what a fast algorithm does, such as Winograd's.
      LaunchWork w = launch_work(*this, k);
      if (w.bytes / opts.peak.gbps >= w.flops / opts.peak.gflops)
        floor_ns = roofline_ns(w.flops, w.bytes, opts.peak, num_threads());
    }
    std::vector<SelectionCertificate> made;
    if (floor_ns > 0 && opts.launch_ns[k] <= opts.roofline_slack * floor_ns) {
      // Too close to the machine's limit to gain: no compile, no timing; the interpreter runs it
      // (also where an earlier Recompile had installed generated code).
      site.ops->set_run(site.args, nullptr);
      g.kernel = site.kernel->text();
      std::ostringstream why;
      why << std::fixed << std::setprecision(0) << "skipped: " << opts.launch_ns[k] << " ns against a roofline of "
          << floor_ns << " ns";
      g.outcome = why.str();
    } else {
      try {
        kernels::SelectionTrace trace(&made);
        g = kernels::jit::recompile_site(site);
      } catch (const std::exception& e) {  // never worse than the interpreter
        site.ops->set_run(site.args, nullptr);
        g.kernel = site.kernel->text();
        g.outcome = std::string("failed: ") + e.what();
      }
    }
    // The launch's certificates: this choice replaces an earlier Recompile's of the same key.
    auto& sel = impl_->info[k].selections;
    for (SelectionCertificate& c : made) {
      sel.erase(std::remove_if(sel.begin(), sel.end(), [&](const SelectionCertificate& s) { return s.key == c.key; }),
                sel.end());
      sel.push_back(std::move(c));
    }
    report.entries.push_back({node, g.kernel, g.outcome, g.interpreter_ns, g.generated_ns, g.compile_seconds, g.cached});
    judged[k] = true;
  }
  // The label says whether the launch now runs generated code in any of its sites (a group, the
  // producer it is the epilogue of, a reduction's prologue); a later recompile may undo it.
  std::vector<bool> generated(launches_.size(), false);
  for (const kernels::JitSite& site : impl_->storage->jit_sites()) {
    auto it = launch_of.find(site.node);
    if (it != launch_of.end() && site.kernel && site.ops->run(site.args)) generated[it->second] = true;
  }
  for (size_t k = 0; k < launches_.size(); ++k) {
    if (!judged[k]) continue;
    const std::string op = op_name(graph_.node(launches_[k].node).op), tag = " generated";
    std::string& label = impl_->info[k].kernel;
    if (label == "generated") label = op;
    else if (label.size() > tag.size() && label.compare(label.size() - tag.size(), tag.size(), tag) == 0)
      label.resize(label.size() - tag.size());
    if (generated[k]) label = label == op ? "generated" : label + tag;
  }
  return report;
}

std::vector<const kernels::jit::LoopKernel*> Plan::loop_kernels() const {
  std::map<ValueId, bool> launched;
  for (const Launch& l : launches_) launched[l.node] = true;
  std::vector<const kernels::jit::LoopKernel*> out;
  for (const kernels::JitSite& site : impl_->storage->jit_sites()) {
    const kernels::jit::LoopKernel* k = site.kernel;
    if (k && launched.count(site.node)) out.push_back(k);
  }
  return out;
}

void Plan::run_and_recompile() {
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  using Clock = std::chrono::steady_clock;
  RecompileOptions opts;
  opts.launch_ns.reserve(launches_.size());
  for (const Launch& l : launches_) {
    auto t0 = Clock::now();
    l.fn(l.args, pool);
    opts.launch_ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  try {
    recompile(opts);
  } catch (const std::exception& e) {  // the run itself succeeded: keep the interpreter
    std::cerr << "synoros: recompile: " << e.what() << "\n";
  }
}

}  // namespace synoros
