// synoros profile: per-launch timings of one training step, as a table and a Chrome trace.
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/commands.hpp"
#include "synoros/synoros.hpp"

namespace synoros::cli {

int profile_model(int argc, char** argv) {
  std::string model = "mlp", trace;
  int iterations = 200;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--model" || a == "--iterations" || a == "--trace") && i + 1 >= argc) throw Error(a + ": missing value");
    if (a == "--model") model = argv[++i];
    else if (a == "--iterations") iterations = std::atoi(argv[++i]);
    else if (a == "--trace") trace = argv[++i];
    else throw Error("profile: unknown option '" + a + "'");
  }
  if (iterations < 1) throw Error("profile: --iterations must be >= 1");
  MachinePeak peak = measure_peak();
  Profile prof;
  if (model == "mlp") {
    TinyTask task(1);
    TinyMLP m(2);
    CompiledStep step = compile_tiny_mlp_sgd(m, 1e-3);
    step.plan().set_input("arg0", task.x);
    step.plan().set_input("arg1", task.target);
    prof = profile(step.plan(), iterations, peak);
  } else if (model == "gpt") {
    Gpt m(GptConfig{}, 1);
    CompiledStep step = compile_gpt_grad(m);
    HostTensor x(DType::I64, {m.cfg.batch, m.cfg.context}), y(DType::I64, {m.cfg.batch, m.cfg.context});
    for (int64_t i = 0; i < x.numel(); ++i) x.set(i, double(i % 256)), y.set(i, double((i * 7) % 256));
    step.plan().set_input("arg0", x);
    step.plan().set_input("arg1", y);
    prof = profile(step.plan(), std::min(iterations, 5), peak);
  } else {
    throw Error("profile: unknown model '" + model + "' (mlp, gpt)");
  }
  std::cout << prof.table();
  if (!trace.empty()) {
    std::ofstream f(trace);
    if (!f) throw Error("profile: cannot write '" + trace + "'");
    f << prof.chrome_trace();
    std::cout << "trace written to " << trace << " (open in chrome://tracing or ui.perfetto.dev)\n";
  }
  return 0;
}

}  // namespace synoros::cli
