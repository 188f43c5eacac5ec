// synoros trials: the operator search with proxy training and measured latency; trials-worker:
// one candidate's training in a separate process (crash-isolated), result written as JSON.
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <cstdio>
#include <iostream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/mpi_trials.hpp"
#include "cli/trials_report.hpp"
#include "cli/worker_processes.hpp"
#include "io/atomic_file.hpp"
#include "synoros/trials.hpp"

namespace synoros::cli {

namespace {
std::string self_exe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("trials: cannot locate the synoros binary for worker processes");
  buf[n] = 0;
  return buf;
}
}  // namespace

int trials_cmd(const Args& a) {
  apply_threads(a);  // the searching process; worker processes train with one thread each
  if (a.str("timer") == "cost-model") trials::set_plan_timer(trials::cost_model_ms);
  trials::TrialsConfig c;
  c.width = a.integer("width");
  c.depth = int(a.integer("depth"));
  c.mcts_iterations = uint64_t(a.integer("iterations"));
  c.screened = a.integer("screen");
  c.enumerate = a.has("enumerate");
  c.candidates = a.integer("candidates");
  c.rounds = a.integer("rounds");
  c.latency_target = 1.0 / a.real("latency-target");
  c.latency_weight = a.real("latency-weight");
  c.proxy.train_images = a.integer("train-images");
  c.proxy.test_images = a.integer("test-images");
  c.proxy.epochs = a.integer("epochs");
  c.proxy.lr = a.real("lr");
  c.proxy.augment = a.has("augment");
  c.seed = c.proxy.seed = uint64_t(a.integer("seed"));
  c.dir = a.str("report");
  if (!a.has("inline")) {
    int workers = int(a.integer("workers"));
    std::string exe = self_exe(), tmp = c.dir + "/work";
    c.run_workers = [workers, exe, tmp](const std::vector<std::vector<std::string>>& jobs) {
      return run_worker_processes(exe, jobs, workers, tmp);
    };
  }
  c.log = [](const std::string& s) {
    std::cout << s << std::endl;
  };
  // Under mpirun: rank 0 proposes and ranks, the other ranks train what it hands out.
  MpiTrials mpi;
  if (mpi.active() && mpi.rank() > 0) {
    mpi.serve(self_exe());
    return 0;
  }
  if (mpi.active()) {
    c.run_workers = mpi.runner();
    std::cout << "MPI: rank 0 proposes and ranks, " << mpi.size() - 1 << " rank(s) train candidates" << std::endl;
  }
  trials::TrialsOutcome out;
  try {
    out = trials::run_trials(c);
    write_report(c, out);
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
              "1.00x", trials::reward(out.baseline, out.baseline, c), "-", "3x3 convolution");
  for (size_t i = 0; i < out.evaluations.size(); ++i) {
    const trials::Evaluation& e = out.evaluations[i];
    char sp[32];
    std::snprintf(sp, sizeof sp, "%.2fx", trials::speedup(e, out.baseline));
    std::printf("%-4zu %-8.4f %-10.2f %-10s %-8.4f %-8s %s%s\n", i, e.accuracy, e.latency.b64_t1, sp, e.reward,
                classes(e.class_mask).c_str(), e.formula.c_str(), e.failed ? ("  [failed: " + e.error + "]").c_str() : "");
  }
  std::printf("\nreport: %s/report.md (also report.json, front.svg, reward.svg, op<i>.py); %.0f s\n", c.dir.c_str(),
              out.seconds);
  return 0;
}

int export_cmd(const Args& a) {
  if (!a.has("operator")) throw UsageError("export: --operator ACTIONS is required (an action path from a trials report)");
  int64_t width = a.integer("width");
  synth::Spec spec = trials::resnet_conv_spec(width);
  synth::Options so;
  so.max_depth = 12;
  synth::Synthesizer syn(spec, so);
  synth::Operator op = synth::build_from_actions(syn, trials::parse_actions(a.str("operator")));
  std::string dir = a.str("out");
  std::filesystem::create_directories(dir);
  std::cout << synth::formula(spec, op) << "\n";
  for (const std::string& f : export_layer_modules(spec, op, unsigned(a.integer("mask")),
                                                           a.integer("batch"), dir, a.str("stem")))
    std::cout << "wrote " << f << "\n";
  return 0;
}

// A searched operator's network against the convolutional baseline: forward latency at batch 64
// and 1 on one and two threads, each pair timed interleaved (ABBA) in several rounds, the
// rounds' medians and ratios printed (and the spread over rounds: this VM is noisy).
int latency_cmd(const Args& a) {
  if (!a.has("operator")) throw UsageError("latency: --operator ACTIONS is required (an action path from a trials report)");
  int64_t width = a.integer("width");
  unsigned mask = unsigned(a.integer("mask"));
  int rounds = int(a.integer("rounds")), repeats = int(a.integer("repeats"));
  if (a.has("json")) writable_file(a.str("json"), "latency: --json");
  auto base = trials::make_network(trials::resnet_conv_spec(width), nullptr, 0, 1, width);
  auto cand = trials::network_from_actions(a.str("operator"), mask, 1, width);
  std::printf("%-7s %-7s %-22s %-22s %s\n", "batch", "threads", "baseline ms", "operator ms", "speedup (rounds)");
  std::string json = "[";
  for (int64_t batch : {int64_t(64), int64_t(1)})
    for (int threads : {1, 2}) {
      std::vector<double> tb, tc, sp;
      for (int r = 0; r < rounds; ++r) {
        auto [b, c] = trials::paired_latency(*base, *cand, batch == 1 ? repeats * 8 : repeats, threads, batch);
        tb.push_back(b), tc.push_back(c), sp.push_back(b / c);
      }
      auto list = [](const std::vector<double>& v, const char* fmt, const char* sep) {
        std::string s;
        for (double x : v) {
          char t[32];
          std::snprintf(t, sizeof t, fmt, x);
          s += (s.empty() ? "" : sep) + std::string(t);
        }
        return s;
      };
      std::printf("%-7lld %-7d %-22s %-22s %s\n", (long long)batch, threads, list(tb, "%.3f", " ").c_str(),
                  list(tc, "%.3f", " ").c_str(), list(sp, "%.2fx", " ").c_str());
      json += std::string(json.size() > 1 ? "," : "") + "{\"batch\":" + std::to_string(batch) +
              ",\"threads\":" + std::to_string(threads) + ",\"baseline_ms\":[" + list(tb, "%.4f", ",") +
              "],\"operator_ms\":[" + list(tc, "%.4f", ",") + "],\"speedups\":[" + list(sp, "%.4f", ",") + "]}";
    }
  json += "]\n";
  if (a.has("json")) {
    std::string path = a.str("json");
    io::write_file_atomic(path, "latency", [&](const io::ByteSink& sink) { sink(json.data(), json.size()); });
  }
  return 0;
}

int trials_worker_cmd(const Args& a) {
  int64_t width = a.integer("width");
  set_plan_memory_limit(std::min<size_t>(plan_memory_limit(), size_t(2) << 30));
  synth::Spec spec = trials::resnet_conv_spec(width);
  trials::ProxyConfig p;
  p.epochs = a.integer("epochs");
  p.train_images = a.integer("train-images");
  p.test_images = a.integer("test-images");
  p.lr = a.real("lr");
  p.seed = uint64_t(a.integer("seed"));
  p.augment = a.has("augment");
  p.width = width;
  trials::Evaluation e;
  if (a.has("actions")) {
    synth::Options so;
    so.max_depth = int(a.integer("depth"));
    synth::Synthesizer syn(spec, so);
    synth::Operator op = synth::build_from_actions(syn, trials::parse_actions(a.str("actions")));
    e = trials::evaluate(spec, &op, unsigned(a.integer("mask")), p);
  } else {
    e = trials::evaluate(spec, nullptr, 0, p);
  }
  e.latency = {};  // measured by the searching process, one candidate at a time
  std::string line = trials::to_json(e) + "\n";
  io::write_file_atomic(a.str("out"), "evaluation",
                        [&](const io::ByteSink& sink) { sink(line.data(), line.size()); });
  return 0;
}

}  // namespace synoros::cli
