// synoros search: operator search with proxy training and measured latency; search-worker:
// one candidate's training in a separate process (crash-isolated), result written as JSON.
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <cstdio>
#include <iostream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/mpi_search.hpp"
#include "io/atomic_file.hpp"
#include "synoros/search.hpp"

namespace synoros::cli {

namespace {
std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("search: cannot locate the synoros binary for worker processes");
  buf[n] = 0;
  return buf;
}
}  // namespace

int search_cmd(int argc, char** argv) {
  Args a("search", argc, argv,
         {"width", "depth", "iterations", "screen", "candidates", "rounds", "latency-target", "latency-weight",
          "workers", "train-images", "test-images", "epochs", "lr", "seed", "report", "threads"},
         {"inline", "augment", "enumerate"});
  if (a.has("threads")) setenv("SYNOROS_NUM_THREADS", std::to_string(a.integer("threads", 1, 1)).c_str(), 1);
  search::SearchConfig c;
  c.width = a.integer("width", 16, 1);
  c.depth = int(a.integer("depth", 6, 1));
  c.mcts_iterations = uint64_t(a.integer("iterations", 3000, 1));
  c.screened = a.integer("screen", 24, 1);
  c.enumerate = a.has("enumerate");
  c.candidates = a.integer("candidates", 6, 1);
  c.rounds = a.integer("rounds", 2, 1);
  c.latency_target = 1.0 / a.real("latency-target", 1.5);
  c.latency_weight = a.real("latency-weight", 0.1);
  c.workers = int(a.integer("workers", 2, 1));
  c.proxy.train_images = a.integer("train-images", 4096, 64);
  c.proxy.test_images = a.integer("test-images", 2000, 1);
  c.proxy.epochs = a.integer("epochs", 1, 1);
  c.proxy.lr = a.real("lr", 0.05);
  c.proxy.augment = a.has("augment");
  c.seed = c.proxy.seed = uint64_t(a.integer("seed", 1, 0));
  c.dir = a.str("report", "search-report");
  if (!a.has("inline")) c.worker_exe = self_exe();
  c.log = [](const std::string& s) {
    std::cout << s << std::endl;
  };
  // Under mpirun: rank 0 searches, the other ranks train what it hands out.
  MpiSearch mpi;
  if (mpi.active() && mpi.rank() > 0) {
    mpi.serve(self_exe());
    return 0;
  }
  if (mpi.active()) {
    c.run_workers = mpi.runner();
    std::cout << "MPI: rank 0 searches, " << mpi.size() - 1 << " rank(s) train candidates" << std::endl;
  }
  search::SearchOutcome out;
  try {
    out = search::run_search(c);
    search::write_report(c, out);
  } catch (const std::exception& e) {
    if (mpi.active()) mpi.abort(e.what());
    throw;
  }
  // The layer classes (binding order) that take the operator, e.g. "0,1".
  auto classes = [](unsigned mask) {
    std::string s;
    for (int i = 0; i < 8; ++i)
      if (mask & (1u << i)) s += (s.empty() ? "" : ",") + std::to_string(i);
    return s.empty() ? std::string("-") : s;
  };
  std::printf("\n%-4s %-8s %-10s %-10s %-8s %-8s %s\n", "#", "accuracy", "b64 ms", "speedup", "reward", "classes",
              "operator");
  std::printf("%-4s %-8.4f %-10.2f %-10s %-8.4f %-8s %s\n", "base", out.baseline.accuracy, out.baseline.latency.b64_t1,
              "1.00x", search::reward(out.baseline, out.baseline, c), "-", "3x3 convolution");
  for (size_t i = 0; i < out.evaluations.size(); ++i) {
    const search::Evaluation& e = out.evaluations[i];
    char sp[32];
    std::snprintf(sp, sizeof sp, "%.2fx", search::speedup(e, out.baseline));
    std::printf("%-4zu %-8.4f %-10.2f %-10s %-8.4f %-8s %s%s\n", i, e.accuracy, e.latency.b64_t1, sp, e.reward,
                classes(e.class_mask).c_str(), e.formula.c_str(), e.failed ? ("  [failed: " + e.error + "]").c_str() : "");
  }
  std::printf("\nreport: %s/report.md (also report.json, front.svg, reward.svg, op<i>.py); %.0f s\n", c.dir.c_str(),
              out.seconds);
  return 0;
}

int export_cmd(int argc, char** argv) {
  Args a("export", argc, argv, {"operator", "mask", "batch", "out", "stem", "width"}, {});
  if (!a.has("operator")) throw Error("export: --operator ACTIONS is required (an action path from a search report)");
  int64_t width = a.integer("width", 16, 1);
  synth::Spec spec = search::resnet_conv_spec(width);
  synth::Options so;
  so.max_depth = 12;
  synth::Synthesizer syn(spec, so);
  synth::Operator op = synth::build_from_actions(syn, search::parse_actions(a.str("operator", "")));
  std::string dir = a.str("out", ".");
  std::filesystem::create_directories(dir);
  std::cout << synth::formula(spec, op) << "\n";
  for (const std::string& f : search::export_layer_modules(spec, op, unsigned(a.integer("mask", 7, 1)),
                                                           a.integer("batch", 64, 1), dir, a.str("stem", "op")))
    std::cout << "wrote " << f << "\n";
  return 0;
}

int search_worker_cmd(int argc, char** argv) {
  Args a("search-worker", argc, argv,
         {"width", "mask", "epochs", "train-images", "test-images", "lr", "seed", "out", "actions", "depth"},
         {"augment"});
  int64_t width = a.integer("width", 16, 1);
  set_plan_memory_limit(std::min<size_t>(plan_memory_limit(), size_t(2) << 30));
  synth::Spec spec = search::resnet_conv_spec(width);
  search::ProxyConfig p;
  p.epochs = a.integer("epochs", 1, 1);
  p.train_images = a.integer("train-images", 4096, 1);
  p.test_images = a.integer("test-images", 2000, 1);
  p.lr = a.real("lr", 0.05);
  p.seed = uint64_t(a.integer("seed", 1, 0));
  p.augment = a.has("augment");
  p.width = width;
  search::Evaluation e;
  if (a.has("actions")) {
    synth::Options so;
    so.max_depth = int(a.integer("depth", 6, 1));
    synth::Synthesizer syn(spec, so);
    synth::Operator op = synth::build_from_actions(syn, search::parse_actions(a.str("actions", "")));
    e = search::evaluate(spec, &op, unsigned(a.integer("mask", 7, 0)), p);
  } else {
    e = search::evaluate(spec, nullptr, 0, p);
  }
  e.latency = {};  // measured by the searching process, one candidate at a time
  std::string line = search::to_json(e) + "\n";
  io::write_file_atomic(a.str("out", "worker.json"), "evaluation",
                        [&](const io::ByteSink& sink) { sink(line.data(), line.size()); });
  return 0;
}

}  // namespace synoros::cli
