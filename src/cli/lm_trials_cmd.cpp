// synoros lm-trials: synthesized operators in place of the GPT's projections, proxy-trained on
// text and timed as whole training steps.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "synoros/lm_trials.hpp"

namespace synoros::cli {

int lm_trials_cmd(const Args& a) {
  apply_threads(a);
  if (a.str("timer") == "cost-model") trials::set_plan_timer(trials::cost_model_ms);
  trials::LmTrialsConfig c;
  if (a.has("model")) c.proxy.model = nn::GptConfig::preset(a.str("model"));
  c.depth = int(a.integer("depth"));
  c.screened = a.integer("screen");
  c.candidates = a.integer("candidates");
  c.step_target = 1.0 / a.real("step-target");
  c.min_params_ratio = a.real("min-params");
  c.proxy.model.width = a.integer("width", c.proxy.model.width);
  c.proxy.model.heads = a.integer("heads", c.proxy.model.heads);
  c.proxy.model.layers = a.integer("layers", c.proxy.model.layers);
  c.proxy.model.context = a.integer("context", c.proxy.model.context);
  if (c.proxy.model.vocab < 256) throw UsageError("lm-trials: the model's vocabulary must hold the 256 byte values");
  if (!a.has("operator")) a.refuse("mask", "goes with --operator");
  c.actions = a.str("operator", "");
  c.mask = unsigned(a.integer("mask"));
  c.proxy.model.check();
  c.proxy.batch = a.integer("batch");
  c.proxy.steps = a.integer("steps");
  c.proxy.val_batches = a.integer("val-batches");
  c.proxy.lr = a.real("lr");
  c.proxy.seed = uint64_t(a.integer("seed"));
  std::string data = a.str("data");
  if (data != "fortunes") {
    std::ifstream probe(data, std::ios::binary);
    if (!probe || probe.peek() == std::ifstream::traits_type::eof())
      throw Error("lm-trials: cannot read --data '" + data + "' (a text file, not empty)");
    c.proxy.text_file = data;
  }
  c.dir = a.str("report");
  writable_dir(c.dir, "lm-trials: --report");
  c.log = [](const std::string& s) { std::cout << s << std::endl; };
  trials::LmTrialsOutcome out = trials::run_lm_trials(c);
  std::printf("\n%-4s %-9s %-8s %-9s %-8s %s\n", "#", "val loss", "delta", "step ms", "speedup", "operator");
  auto row = [&](const std::string& id, const trials::LmEvaluation& e) {
    if (e.failed) {
      std::printf("%-4s failed: %s  %s\n", id.c_str(), e.error.c_str(), e.formula.c_str());
      return;
    }
    char delta[32], speed[32];
    std::snprintf(delta, sizeof delta, "%+.2f%%", 100.0 * (e.val_loss / out.baseline.val_loss - 1.0));
    std::snprintf(speed, sizeof speed, "%.2fx", e.base_step_ms / e.step_ms);
    const std::string mark = e.key == "baseline" ? "" : e.family.empty() ? "  [new]" : "  [" + e.family + "]";
    std::printf("%-4s %-9.4f %-8s %-9.1f %-8s %s%s\n", id.c_str(), e.val_loss, delta, e.step_ms, speed,
                e.formula.c_str(), mark.c_str());
  };
  row("base", out.baseline);
  for (size_t i = 0; i < out.evaluations.size(); ++i) row(std::to_string(i), out.evaluations[i]);
  std::printf("\nreport: %s/report.md (also lm_evaluations.jsonl, op<i>_<class>.py); %.0f s\n", c.dir.c_str(),
              out.seconds);
  return 0;
}

}  // namespace synoros::cli
