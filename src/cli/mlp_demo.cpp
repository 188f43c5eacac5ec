// The main job for now: train the tiny MLP on a synthetic regression task, show the loss curve.
#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"
#include "synoros/tiny_mlp.hpp"

namespace synoros::cli {

int train_mlp(const Args& a) {
  apply_threads(a);
  int64_t steps = a.integer("steps");
  double lr = a.real("lr");
  nn::TinyTask task(42);
  nn::TinyMLP m(7);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, lr);
  std::cout << "tiny MLP 16-32-8, MSE on a fixed synthetic regression task, SGD lr=" << lr << ", "
            << steps << " steps, " << num_threads() << " thread(s)\n";
  std::vector<double> losses;
  for (int64_t i = 0; i < steps; ++i) {
    losses.push_back(step({task.x, task.target})[0].get(0));
    train::check_finite_loss("train-mlp", losses.back(), i + 1, steps, "a lower --lr may help");
  }
  double hi = *std::max_element(losses.begin(), losses.end());
  int64_t stride = std::max<int64_t>(1, steps / 20);
  std::cout << "loss curve (every " << stride << " steps):\n";
  for (int64_t i = 0; i < steps; i += stride) {
    int bar = int(std::lround(60.0 * losses[size_t(i)] / hi));
    std::cout << std::setw(6) << i << "  " << std::fixed << std::setprecision(5) << losses[size_t(i)]
              << "  " << std::string(size_t(bar), '#') << "\n";
  }
  std::cout << "final loss " << std::setprecision(6) << losses.back() << " (from " << losses.front()
            << ")\n";
  return losses.back() < losses.front() ? 0 : 1;
}

int print_plan(const Args& a) {
  CompileOptions opts;
  opts.fuse = !a.has("no-fusion");
  opts.plan_memory = !a.has("no-plan");
  nn::TinyMLP m(7);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, 0.05);
  Plan p(step.plan().graph(), step.plan().outputs(), opts);
  std::cout << p.graph().to_string() << "\n" << p.describe();
  return 0;
}

int gpt_memory(const Args& a) {
  nn::GptConfig c = kBenchGpt;
  if (a.has("model")) c = nn::GptConfig::preset(a.str("model"));
  c.context = a.integer("context", c.context);
  c.check();
  nn::Gpt m(c, 1);
  m.checkpoint_blocks = a.has("checkpoint-activations");
  const int64_t batch = a.integer("batch", a.has("model") ? 1 : kBenchGptBatch);
  std::unique_ptr<optim::Optimizer> opt;
  if (!a.has("optimizer")) {
    a.refuse("clip", "applies with --optimizer (forward and backward alone clip nothing)");
  } else {
    const train::LmConfig defaults;  // the learning rate and weight decay synoros train starts from
    if (a.str("optimizer") == "adamw")
      opt = std::make_unique<optim::AdamW>(m.parameters(), defaults.lr, 0.9, 0.95, 1e-8, defaults.weight_decay);
    else
      opt = std::make_unique<optim::SGD>(m.parameters(), defaults.lr, 0.9);
    opt->set_clip_norm(a.real("clip", 1.0));
  }
  CompiledStep step = opt ? train::compile_lm_train(m, *opt, batch, c.context) : compile_gpt_grad(m, batch);
  const Plan& p = step.plan();
  size_t params = 0;
  for (const Tensor& t : m.parameters()) params += size_t(t.numel()) * 4;
  std::cout << "{\"planned_bytes\": " << p.arena_bytes() << ", \"unplanned_bytes\": " << p.unplanned_bytes()
            << ", \"scratch_bytes\": " << p.scratch_bytes() << ", \"param_bytes\": " << params
            << ", \"launches\": " << p.launches().size() << "}\n";
  if (int64_t n = a.integer("largest", 0); n > 0) {
    // The step where the live values' bytes add up to the most, and its largest values.
    std::vector<BufferInfo> bufs = p.buffers();
    std::map<int, size_t> live;  // step -> bytes (a buffer taken over in place counts once)
    for (const BufferInfo& b : bufs)
      if (b.inplace_of == kNoValue)
        for (int s = std::max(b.start, 0); s <= std::min(b.end, int(p.launches().size()) - 1); ++s) live[s] += b.bytes;
    auto peak = std::max_element(live.begin(), live.end(), [](auto& x, auto& y) { return x.second < y.second; });
    if (peak == live.end()) return 0;
    std::vector<const BufferInfo*> at;
    for (const BufferInfo& b : bufs)
      if (b.inplace_of == kNoValue && b.start <= peak->first && b.end >= peak->first) at.push_back(&b);
    std::sort(at.begin(), at.end(), [](auto* x, auto* y) { return x->bytes > y->bytes; });
    std::cout << "at launch " << peak->first << ": " << peak->second << " bytes live in " << at.size() << " values\n";
    for (size_t i = 0; i < at.size() && int64_t(i) < n; ++i) {
      const Node& nd = p.graph().node(at[i]->value);
      std::cout << "  %" << at[i]->value << " " << op_name(nd.op) << " " << shape_str(nd.shape) << " " << at[i]->bytes
                << " bytes, launches " << at[i]->start << ".." << (at[i]->end == INT_MAX ? -1 : at[i]->end) << "\n";
    }
  }
  return 0;
}

int info(const Args& a) {
  apply_threads(a);
  std::cout << "isa " << kernels::isa_name(kernels::active_isa()) << ", threads " << num_threads() << ", "
            << (fast_mode() ? "fast mode" : "default mode (canonical kernels)") << "\n";
  return 0;
}

}  // namespace synoros::cli
