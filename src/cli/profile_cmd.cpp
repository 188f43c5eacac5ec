// synoros profile: per-launch timings of one training step, as a table and a Chrome trace.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "io/atomic_file.hpp"
#include "kernels/providers.hpp"
#include "synoros/trials.hpp"
#include "synoros/synoros.hpp"
#include "synoros/tiny_mlp.hpp"

namespace synoros::cli {

namespace {
// Measure, then Recompile with the measured times (the hot groups get generated kernels where
// those are faster; the roofline model leaves out those already near the machine's limit), then
// measure again: the table shows the plan as it now runs.
Profile measure(Plan& plan, int iterations, const MachinePeak& peak) {
  Profile before = profile(plan, iterations, peak);
  RecompileOptions opts;
  for (const ProfileEntry& e : before.entries) opts.launch_ns.push_back(e.ns);
  opts.peak = peak;
  RecompileReport r = plan.recompile(opts);
  if (r.entries.empty()) return before;
  std::cout << r.table();
  if (r.generated() == 0) return before;  // the plan runs as it did
  Profile after = profile(plan, iterations, peak);
  std::cout << "step " << before.total_ns / 1e3 << " us before Recompile, " << after.total_ns / 1e3 << " us after\n\n";
  return after;
}

// --certificates: the choices are measured in a tuning cache of the command's own (the user's
// stays as it was), so every selection's certificate lists its candidates as tried now.
class FreshTuning {
 public:
  explicit FreshTuning(bool on)
      : path_(on ? config::temp_dir() + "/synoros-certificates-" + std::to_string(::getpid()) + ".txt" : "") {
    if (!on) return;
    env_.emplace("SYNOROS_TUNING_CACHE", path_.c_str());
    kernels::clear_tuning_cache();
  }
  ~FreshTuning() {
    if (path_.empty()) return;
    kernels::clear_tuning_cache();  // removes the temporary file
    std::remove((path_ + ".lock").c_str());
    env_.reset();
    kernels::reload_tuning_cache();
  }
  FreshTuning(const FreshTuning&) = delete;
  FreshTuning& operator=(const FreshTuning&) = delete;

 private:
  std::string path_;
  std::optional<config::ScopedOverride> env_;
};

void write_certificates(const std::string& path, const Plan& plan, const Profile& prof) {
  Certificates c = certify(plan, prof, num_threads());
  std::cout << c.table();
  std::string text = c.json();
  io::write_file_atomic(path, "selection certificates", [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
  std::cout << "certificates written to " << path << "\n";
}
}  // namespace

int profile_model(const Args& a) {
  apply_threads(a);
  std::string model = a.str("model"), trace = a.str("trace"), describe = a.str("describe"), actions = a.str("operator");
  unsigned mask = unsigned(a.integer("mask"));
  int iterations = int(a.integer("iterations"));
  bool inference = a.has("inference");
  if (!actions.empty()) {  // resnet-mini with a synthesized operator, inference
    if (a.has("model") && model != "resnet-mini")
      throw UsageError("profile: --operator replaces resnet-mini's convolutions, not " + model + "'s");
    model = "resnet-mini", inference = true;
  } else {
    a.refuse("mask", "goes with --operator");
  }
  if (!inference) a.refuse("batch", "goes with --inference");
  if (inference && model != "mlp-classifier" && model != "lenet" && model != "resnet-mini")
    throw UsageError("profile: --inference applies to the classifiers (mlp-classifier, lenet, resnet-mini)");
  if (!describe.empty() && (model == "mlp" || model == "gpt" || model == "gpt2-block" || inference))
    throw UsageError("profile: --describe applies to the classifiers' training step");
  std::string certificates = a.str("certificates");
  if (!certificates.empty()) writable_file(certificates, "profile: --certificates");
  if (!trace.empty()) writable_file(trace, "profile: --trace", false);
  FreshTuning fresh(!certificates.empty());
  MachinePeak peak = measure_peak();
  Profile prof;
  // Certificates of the plan just profiled (launch i of the profile is launch i of the plan).
  auto certify_plan = [&](const Plan& plan) {
    if (!certificates.empty()) write_certificates(certificates, plan, prof);
  };
  if (model == "mlp") {
    nn::TinyTask task(1);
    nn::TinyMLP m(2);
    CompiledStep step = nn::compile_tiny_mlp_sgd(m, 1e-3);
    step.plan().set_input("arg0", task.x);
    step.plan().set_input("arg1", task.target);
    prof = measure(step.plan(), iterations, peak);
    certify_plan(step.plan());
  } else if (model == "gpt") {
    nn::Gpt m(kBenchGpt, 1);
    CompiledStep step = compile_gpt_grad(m, kBenchGptBatch);
    HostTensor x(DType::I64, {kBenchGptBatch, m.cfg.context}), y(DType::I64, {kBenchGptBatch, m.cfg.context});
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, double(i % 256)), y.set(i, double((i * 7) % 256));
    step.plan().set_input("arg0", x);
    step.plan().set_input("arg1", y);
    prof = measure(step.plan(), std::min(iterations, 5), peak);
    certify_plan(step.plan());
  } else if (model == "gpt2-block") {  // what one block adds to a training step: y, dx, its gradients
    nn::GptBlock blk(nn::GptConfig::preset("gpt2-98m"), 1);
    CompiledStep step = nn::compile_block_grad(blk, 1, 512);
    step.plan().set_input("arg0", Tensor::randn({1, 512, blk.width}, 3).value());
    step.plan().set_input("arg1", Tensor::randn({1, 512, blk.width}, 4).value());
    prof = measure(step.plan(), std::min(iterations, 5), peak);
    certify_plan(step.plan());
  } else if (model == "mlp-classifier" || model == "lenet" || model == "resnet-mini") {
    std::shared_ptr<nn::Module> m;
    if (!actions.empty()) {  // resnet-mini with a synthesized operator (an action path from a search report)
      m = trials::network_from_actions(actions, mask, 1);
    } else {
      m = train::make_classifier(model == "mlp-classifier" ? "mlp" : model, 10, 1);
    }
    if (inference) {  // the eval-mode forward pass (at batch 64, what the operator search times)
      m->eval();
      const int64_t batch = a.integer("batch");
      CompiledStep fwd = compile([&m](const std::vector<Tensor>& in) { return std::vector<Tensor>{m->forward(in[0])}; },
                                 {{DType::F32, {batch, 1, 28, 28}}});
      fwd.plan().set_input("arg0", Tensor::randn({batch, 1, 28, 28}, 3).value());
      prof = measure(fwd.plan(), std::min(iterations, 20), peak);
      std::cout << prof.table();
      certify_plan(fwd.plan());
      return 0;
    }
    optim::SGD opt(m->parameters(), 0.05, 0.9, 5e-4);
    CompiledStep step = train::compile_classifier_train(*m, opt, 64);
    HostTensor y(DType::I64, {64});
    for (int64_t i = 0; i < 64; ++i) y.set(i, double(i % 10));
    step.plan().set_input("arg0", Tensor::randn({64, 1, 28, 28}, 3).value());
    step.plan().set_input("arg1", y);
    prof = measure(step.plan(), std::min(iterations, 5), peak);
    certify_plan(step.plan());
    if (!describe.empty()) {
      std::ofstream f(describe);
      if (!(f << step.plan().describe() << step.plan().graph().to_string()))
        throw Error("profile: cannot write '" + describe + "'");
    }
  }
  std::cout << prof.table() << prof.by_leading_op_table();
  if (!trace.empty()) {
    std::ofstream f(trace);
    if (!f) throw Error("profile: cannot write '" + trace + "'");
    f << prof.chrome_trace();
    std::cout << "trace written to " << trace << " (open in chrome://tracing or ui.perfetto.dev)\n";
  }
  return 0;
}

int peak(const Args& a) {
  apply_threads(a);
  MachinePeak p = measure_peak(num_threads());
  std::cout << "{\"gflops\": " << p.gflops << ", \"gbps\": " << p.gbps << ", \"read_gbps\": " << p.read_gbps
            << ", \"isa\": \"" << p.isa << "\", \"threads\": " << p.threads << ", \"gflops_threads\": " << p.gflops_threads
            << ", \"gbps_threads\": " << p.gbps_threads << ", \"read_gbps_threads\": " << p.read_gbps_threads << "}\n";
  return 0;
}

// Compiles the built-in models and the benchmark shapes once, so every kernel choice is measured
// now and stored in the tuning cache; prints the choices.
int tune(const Args& a) {
  apply_threads(a);
  std::cout << "tuning cache: " << kernels::tuning_cache_path() << "\n";
  auto show = [](const char* what, const Plan& p) {
    for (size_t k = 0; k < p.launch_info().size(); ++k) {
      const LaunchInfo& li = p.launch_info()[k];
      if (li.kernel == op_name(p.graph().node(p.launches()[k].node).op)) continue;
      std::cout << "  " << what << " %" << p.launches()[k].node << " -> " << li.kernel << "\n";
    }
  };
  nn::TinyMLP mlp(1);
  show("tiny-mlp", nn::compile_tiny_mlp_sgd(mlp, 1e-3).plan());
  nn::Gpt gpt(kBenchGpt, 1);
  show("gpt", compile_gpt_grad(gpt, kBenchGptBatch).plan());
  for (int64_t n : {64, 128, 256, 512, 1024, 2048}) {
    Graph g;
    g.matmul(g.input(DType::F32, {n, n}, "a"), g.input(DType::F32, {n, n}, "b"));
    show(("matmul " + std::to_string(n)).c_str(), Plan(g, {ValueId(2)}));
  }
  std::cout << kernels::tuning_cache_size() << " choices cached\n";
  return 0;
}

}  // namespace synoros::cli
