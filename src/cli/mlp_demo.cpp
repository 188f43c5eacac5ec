// The main job for now: train the tiny MLP on a synthetic regression task, show the loss curve.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"

namespace synoros::cli {

namespace {
double parse_number(const char* flag, const char* v) {
  char* end = nullptr;
  double d = std::strtod(v, &end);
  if (!v[0] || *end) throw Error(std::string(flag) + ": '" + v + "' is not a number");
  return d;
}
}  // namespace

int train_mlp(int argc, char** argv) {
  int steps = 500;
  double lr = 0.05;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--steps" || a == "--lr") && i + 1 >= argc) throw Error(a + ": missing value");
    if (a == "--steps") steps = int(parse_number("--steps", argv[++i]));
    else if (a == "--lr") lr = parse_number("--lr", argv[++i]);
    else throw Error("train-mlp: unknown option '" + a + "'");
  }
  if (steps < 1) throw Error("--steps must be >= 1");
  TinyTask task(42);
  TinyMLP m(7);
  CompiledStep step = compile_tiny_mlp_sgd(m, lr);
  std::cout << "tiny MLP 16-32-8, MSE on a fixed synthetic regression task, SGD lr=" << lr << ", "
            << steps << " steps, " << num_threads() << " thread(s)\n";
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(step({task.x, task.target})[0].get(0));
  double hi = *std::max_element(losses.begin(), losses.end());
  int stride = std::max(1, steps / 20);
  std::cout << "loss curve (every " << stride << " steps):\n";
  for (int i = 0; i < steps; i += stride) {
    int bar = int(std::lround(60.0 * losses[size_t(i)] / hi));
    std::cout << std::setw(6) << i << "  " << std::fixed << std::setprecision(5) << losses[size_t(i)]
              << "  " << std::string(size_t(bar), '#') << "\n";
  }
  std::cout << "final loss " << std::setprecision(6) << losses.back() << " (from " << losses.front()
            << ")\n";
  return losses.back() < losses.front() ? 0 : 1;
}

int print_plan(int argc, char** argv) {
  CompileOptions opts;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-fusion") opts.fuse = false;
    else if (a == "--no-plan") opts.plan_memory = false;
    else throw Error("plan: unknown option '" + a + "'");
  }
  TinyMLP m(7);
  CompiledStep step = compile_tiny_mlp_sgd(m, 0.05);
  Plan p(step.plan().graph(), step.plan().outputs(), opts);
  std::cout << p.graph().to_string() << "\n" << p.describe();
  return 0;
}

int gpt_memory() {
  Gpt m(GptConfig{}, 1);
  CompiledStep step = compile_gpt_grad(m);
  const Plan& p = step.plan();
  size_t params = 0;
  for (const Tensor& t : m.params()) params += size_t(t.numel()) * 4;
  std::cout << "{\"planned_bytes\": " << p.arena_bytes() << ", \"unplanned_bytes\": " << p.unplanned_bytes()
            << ", \"scratch_bytes\": " << p.scratch_bytes() << ", \"param_bytes\": " << params
            << ", \"launches\": " << p.launches().size() << "}\n";
  return 0;
}

int info() {
  std::cout << "isa " << kernels::isa_name(kernels::active_isa()) << ", threads " << num_threads() << "\n";
  return 0;
}

}  // namespace synoros::cli
