// The search loop: MCTS proposes operators (FLOPs window around a 3x3 convolution), their layers
// are timed against the convolution per layer class, the fastest go through successive halving
// of proxy training (in worker processes), and every finished evaluation is appended to a log
// that a restarted search reads back instead of evaluating again.
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "synoros/checkpoint.hpp"
#include "synoros/trials.hpp"

namespace synoros::trials {

double speedup(const Evaluation& e, const Evaluation& base) {
  if (e.failed || e.latency.b64_t1 <= 0) return 0;
  if (e.paired_base_b64_t1 > 0) return e.paired_base_b64_t1 / e.latency.b64_t1;
  return base.latency.b64_t1 / e.latency.b64_t1;
}

double reward(const Evaluation& e, const Evaluation& base, const TrialsConfig& cfg) {
  if (e.failed || base.latency.b64_t1 <= 0) return -1;
  double sp = speedup(e, base);
  if (sp <= 0) return -1;
  double ratio = 1.0 / sp;
  return e.accuracy - cfg.latency_weight * std::max(0.0, ratio / cfg.latency_target - 1.0);
}

ClassChoice predict_classes(const ClassTimes& t, unsigned mask, double latency_target) {
  ClassChoice ch;
  ch.mask = mask;
  for (size_t c = 0; c < t.conv_ms.size(); ++c) {
    bool in = mask & (1u << c);
    if (in) ch.saved_ms += t.per_class[c] * (t.conv_ms[c] - t.op_ms[c]);
    ch.weights += t.per_class[c] * (in ? t.op_weights[c] : t.conv_weights[c]);
  }
  ch.meets = t.base_ms > ch.saved_ms && (t.base_ms - ch.saved_ms) <= t.base_ms * latency_target;
  return ch;
}

ClassChoice weight_keeping_classes(const ClassTimes& t, unsigned classes, double latency_target) {
  ClassChoice best = predict_classes(t, classes, latency_target);
  if (!best.meets) return best;
  for (unsigned m = (classes - 1) & classes; m; m = (m - 1) & classes) {
    ClassChoice ch = predict_classes(t, m, latency_target);
    if (ch.meets && (ch.weights > best.weights || (ch.weights == best.weights && ch.saved_ms > best.saved_ms)))
      best = ch;
  }
  return best;
}

namespace {
using Clock = std::chrono::steady_clock;

struct Job {
  const synth::Operator* op;  // null: baseline
  unsigned mask;
  int64_t epochs;
};

// One record per operator, set of layer classes it replaces and training budget.
std::string record_key(const std::string& key, unsigned mask, int64_t epochs) {
  return key + "|" + std::to_string(mask) + "@" + std::to_string(epochs);
}

// Appends one whole line and syncs it, so a kill leaves at most the last line cut short.
void append_line(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw Error("trials: cannot append to '" + path + "'");
  bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok) throw Error("trials: writing '" + path + "' failed");
}

class Log {
 public:
  explicit Log(const std::string& path) : path_(path) {
    std::ifstream f(path);
    std::string line;
    std::vector<Evaluation> read;
    std::set<int64_t> failed_base;  // budgets at which a baseline failed (kept by earlier builds)
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      try {
        read.push_back(evaluation_from_json(line));
        next_order_ = std::max(next_order_, read.back().order + 1);
        if (read.back().failed && read.back().key == "baseline") failed_base.insert(read.back().trained_epochs);
      } catch (const Error&) {
        // A line cut by a kill mid-write: everything before it is intact.
      }
    }
    // A failed candidate is a result (not retried), unless a baseline failed at its budget too (the
    // same cause, most likely): those, and the failed baseline, are trained again.
    for (const Evaluation& e : read)
      if (!e.failed || (e.key != "baseline" && !failed_base.count(e.trained_epochs)))
        done_[record_key(e.key, e.class_mask, e.trained_epochs)] = e;
  }
  const Evaluation* find(const std::string& key, unsigned mask, int64_t epochs) const {
    auto it = done_.find(record_key(key, mask, epochs));
    return it == done_.end() ? nullptr : &it->second;
  }
  Evaluation& add(Evaluation e) {
    e.order = next_order_++;
    append_line(path_, to_json(e) + "\n");
    return done_[record_key(e.key, e.class_mask, e.trained_epochs)] = e;
  }

 private:
  std::string path_;
  std::map<std::string, Evaluation> done_;
  int64_t next_order_ = 0;
};

// Screening times by key (an operator's canonical form, "convolution", "baseline network"):
// one tab-separated line each, appended as they are measured; a line cut by a kill is ignored.
class ScreenLog {
 public:
  explicit ScreenLog(const std::string& path) : path_(path) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
      size_t tab = line.find('\t');
      if (tab == std::string::npos || line.empty() || line.back() != ';') continue;
      std::vector<double> v;
      std::istringstream in(line.substr(tab + 1, line.size() - tab - 2));
      double x;
      while (in >> x) v.push_back(x);
      times_[line.substr(0, tab)] = v;
    }
  }
  bool get(const std::string& key, std::vector<double>& out) const {
    auto it = times_.find(key);
    if (it == times_.end()) return false;
    out = it->second;
    return true;
  }
  void put(const std::string& key, const std::vector<double>& v) {
    if (key.find_first_of("\t\n") != std::string::npos) return;  // not representable: re-measured
    times_[key] = v;
    std::ostringstream line;
    line.precision(17);
    line << key << '\t';
    for (size_t i = 0; i < v.size(); ++i) line << (i ? " " : "") << v[i];
    line << ";\n";
    append_line(path_, line.str());
  }

 private:
  std::string path_;
  std::map<std::string, std::vector<double>> times_;
};

// Runs the jobs wherever cfg.run_workers sends them (worker processes, other ranks), or inline
// without a runner. A worker that dies yields a failed evaluation.
std::vector<Evaluation> run_jobs(const TrialsConfig& cfg, const synth::Spec& spec, const std::vector<Job>& jobs,
                                 const std::function<void(const std::string&)>& say) {
  std::vector<Evaluation> out(jobs.size());
  auto proxy = [&](const Job& j) {
    ProxyConfig p = cfg.proxy;
    p.epochs = j.epochs;
    p.width = cfg.width;
    return p;
  };
  if (!cfg.run_workers) {
    for (size_t i = 0; i < jobs.size(); ++i) out[i] = evaluate(spec, jobs[i].op, jobs[i].mask, proxy(jobs[i]));
    return out;
  }
  std::vector<std::vector<std::string>> args;
  for (const Job& j : jobs) {
    ProxyConfig p = proxy(j);
    std::vector<std::string> a = {"--width", std::to_string(cfg.width), "--mask", std::to_string(j.mask),
                                  "--epochs", std::to_string(p.epochs), "--train-images",
                                  std::to_string(p.train_images), "--test-images", std::to_string(p.test_images),
                                  "--lr", io::metadata_real(p.lr), "--seed", std::to_string(p.seed)};
    if (p.augment) a.push_back("--augment");
    if (j.op) a.insert(a.end(), {"--actions", serialize_actions(j.op->path), "--depth", std::to_string(cfg.depth)});
    args.push_back(std::move(a));
  }
  std::vector<WorkerResult> res = cfg.run_workers(args);
  if (res.size() != jobs.size()) throw Error("trials: the worker runner returned the wrong number of results");
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (res[i].ok) {
      try {
        out[i] = evaluation_from_json(res[i].line);
        if (res[i].where != "local") say("  trained by " + res[i].where);
        continue;
      } catch (const Error& e) {
        res[i].error = e.what();
      }
    }
    Evaluation e;
    e.key = jobs[i].op ? jobs[i].op->canonical : "baseline";
    e.formula = jobs[i].op ? synth::formula(spec, *jobs[i].op) : "3x3 convolution";
    e.actions = jobs[i].op ? serialize_actions(jobs[i].op->path) : "";
    e.class_mask = jobs[i].mask;
    e.trained_epochs = jobs[i].epochs;
    e.failed = true;
    e.error = res[i].error + (res[i].where.empty() ? "" : " (" + res[i].where + ")");
    out[i] = e;
  }
  return out;
}
}  // namespace

TrialsOutcome run_trials(const TrialsConfig& cfg) {
  auto t0 = Clock::now();
  // A candidate whose lowering needs more than 2 GiB per plan is reported as failed, never run.
  set_plan_memory_limit(std::min<size_t>(plan_memory_limit(), size_t(2) << 30));
  auto say = [&](const std::string& s) {
    if (cfg.log) cfg.log(s);
  };
  std::filesystem::create_directories(cfg.dir);
  Log log(cfg.dir + "/evaluations.jsonl");
  synth::Spec spec = resnet_conv_spec(cfg.width);
  synth::Options so;
  so.max_depth = cfg.depth;
  synth::Synthesizer syn(spec, so);

  // 1. Propose: MCTS on a FLOPs window around the 3x3 convolution (cheap, no training).
  synth::Binding b0 = synth::binding(spec, 0);
  auto var = [&](const char* name) {
    for (size_t i = 0; i < spec.primary.size(); ++i)
      if (spec.primary[i].name == name) return double(b0.primary[i]);
    throw Error(std::string("trials: the spec has no variable ") + name);
  };
  double conv_flops = 2.0 * var("N") * var("C") * var("C") * 9.0 * var("H") * var("W");
  std::vector<synth::Operator> proposed;
  if (cfg.enumerate) {
    synth::EnumResult en = synth::enumerate(syn, true);
    proposed = std::move(en.operators);
    say("enumerated " + std::to_string(proposed.size()) + " canonical operators up to depth " + std::to_string(cfg.depth));
  } else {
    synth::MctsOptions mo;
    mo.seed = cfg.seed;
    mo.keep_best = size_t(cfg.screened) * 4;
    mo.checkpoint = cfg.dir + "/mcts.state";
    synth::Mcts mcts(syn, synth::flops_proxy_reward(syn, conv_flops, 0.05, 0.6), mo);
    if (std::filesystem::exists(mo.checkpoint)) mcts.load(mo.checkpoint);
    synth::SearchResult r = mcts.run(cfg.mcts_iterations);
    for (auto& [rw, op] : r.best) proposed.push_back(op);
    say("proposed " + std::to_string(proposed.size()) + " operators in " + std::to_string(r.iterations) +
        " MCTS iterations");
  }
  double conv_params = var("C") * var("C") * 9.0;

  // 2. Screen: time one layer of each class against the convolution; keep the classes where
  //    the operator is faster (a different operator per layer class: it or the convolution).
  //    The times are kept in screen.tsv: a resumed search predicts from the same numbers, so
  //    it picks the same classes and finds the evaluations it already has.
  ScreenLog screen_log(cfg.dir + "/screen.tsv");
  std::vector<double> conv_lat;
  if (!screen_log.get("convolution", conv_lat)) {
    conv_lat = layer_latency(spec, nullptr);
    screen_log.put("convolution", conv_lat);
  }
  say("3x3 convolution layer ms (batch 64, 1 thread): " + std::to_string(conv_lat[0]).substr(0, 6) + " / " +
      std::to_string(conv_lat[1]).substr(0, 6) + " / " + std::to_string(conv_lat[2]).substr(0, 6));
  // How many layers of each class the network has, and its own latency: the screen predicts a
  // candidate's network latency from its layer times.
  std::vector<int> per_class = layers_per_class(cfg.width);
  double base_ms = 0;
  if (std::vector<double> b; screen_log.get("baseline network", b) && b.size() == 1) {
    base_ms = b[0];
  } else {
    auto base_net = make_network(spec, nullptr, 0, cfg.proxy.seed, cfg.width);
    base_ms = measure_latency(*base_net, 3).b64_t1;
    screen_log.put("baseline network", {base_ms});
  }
  say("baseline network ms (batch 64, 1 thread): " + std::to_string(base_ms).substr(0, 6));
  struct Screened {
    const synth::Operator* op;
    unsigned mask;
    double saved;  // ms saved per batch of 64 over the layers it replaces
    double flops;  // of the layers it replaces
    bool meets;    // predicted to reach the latency target
    int64_t footprint;
    double weights;  // of the replaceable layers (the operator's and the convolutions kept)
  };
  // The 3x3 convolution's weights per layer of each class.
  std::vector<double> conv_weights;
  for (size_t c = 0; c < per_class.size(); ++c) {
    double ch = double(resnet_layer_classes(cfg.width)[c].first);
    conv_weights.push_back(ch * ch * 9.0);
  }
  std::vector<Screened> screened;
  std::set<std::string> seen;
  int64_t timed = 0;
  for (const synth::Operator& op : proposed) {
    if (timed >= cfg.screened) break;
    if (!seen.insert(op.canonical).second || op.weights.empty()) continue;
    synth::Stats st = synth::stats(spec, op, b0);
    // Too few parameters to learn (a handful of shared scalars), or more arithmetic than the
    // latency target leaves room for: not worth timing.
    if (st.params < conv_params * cfg.min_params_ratio || st.flops > conv_flops * cfg.latency_target) continue;
    ++timed;
    std::vector<double> lat;
    if (!screen_log.get(op.canonical, lat)) {
      try {
        std::vector<double> limit(conv_lat.size());
        for (size_t c = 0; c < limit.size(); ++c) limit[c] = 3 * conv_lat[c];
        lat = layer_latency(spec, &op, 3, 64, &limit);
      } catch (const std::exception& ex) {
        lat.clear();
        say("  skipped (lowering failed): " + std::string(ex.what()));
      }
      screen_log.put(op.canonical, lat);  // empty: the lowering failed
    }
    if (lat.size() != conv_lat.size()) continue;
    unsigned faster = 0;
    std::string times;
    for (size_t c = 0; c < lat.size(); ++c) {
      if (lat[c] < conv_lat[c] * 0.9) faster |= 1u << c;
      times += (c ? " / " : "") + std::to_string(lat[c]).substr(0, 6);
    }
    ClassTimes ct{conv_lat, lat, per_class, conv_weights, {}, base_ms};
    for (size_t c = 0; c < lat.size(); ++c)
      ct.op_weights.push_back(double(synth::stats(spec, op, synth::binding(spec, c)).params));
    auto screened_as = [&](const ClassChoice& ch) {
      Screened v{&op, ch.mask, ch.saved_ms, 0, ch.meets, 0, ch.weights};
      for (size_t c = 0; c < lat.size(); ++c)
        if (ch.mask & (1u << c)) v.flops += per_class[c] * synth::stats(spec, op, synth::binding(spec, c)).flops;
      return v;
    };
    Screened all = screened_as(predict_classes(ct, faster, cfg.latency_target));
    if (all.meets) all.footprint = spatial_footprint(spec, op);
    say("  layer ms " + times + (faster ? "  faster in classes " + std::to_string(faster) : "  (no faster class)") +
        (all.meets ? "  [meets the target; spatial footprint " + std::to_string(all.footprint) + "]" : "") + "  " +
        synth::formula(spec, op));
    if (!faster) continue;
    screened.push_back(all);
    // A different operator per layer class: the subset of those classes that still reaches the
    // target and keeps the most convolution weights is trained as well.
    ClassChoice keep = weight_keeping_classes(ct, faster, cfg.latency_target);
    if (all.meets && keep.mask != faster) {
      Screened v = screened_as(keep);
      v.footprint = all.footprint;
      screened.push_back(v);
      say("    also in classes " + std::to_string(keep.mask) + " only (predicted " +
          std::to_string(base_ms / (base_ms - keep.saved_ms)).substr(0, 4) + "x, " +
          std::to_string(int64_t(keep.weights)) + " weights in the replaceable layers)");
    }
  }
  // Training is what costs: spend it on the networks predicted to reach the latency target,
  // those that keep the most spatial mixing first (the replaced layers are the network's 3x3
  // mixers), then the most weights in the replaceable layers, then the most arithmetic; then
  // the rest by time saved.
  std::stable_sort(screened.begin(), screened.end(), [](const Screened& a, const Screened& b) {
    if (a.meets != b.meets) return a.meets;
    if (!a.meets) return a.saved > b.saved;
    if (a.footprint != b.footprint) return a.footprint > b.footprint;
    if (a.weights != b.weights) return a.weights > b.weights;
    return a.flops > b.flops;
  });
  if (int64_t(screened.size()) > cfg.candidates) screened.resize(size_t(cfg.candidates));
  say("screened " + std::to_string(screened.size()) + " operators faster than the convolution in some layer class");

  // 3. Successive halving: train, keep the better half by reward, double the budget.
  TrialsOutcome out;
  std::vector<Screened> alive = screened;
  std::shared_ptr<nn::ResNetMini> base_net;  // the baseline timed next to each candidate (compiled once)
  int64_t epochs = cfg.proxy.epochs;
  for (int64_t round = 0; round < cfg.rounds && (!alive.empty() || round == 0); ++round, epochs *= 2) {
    std::vector<Job> jobs;
    if (!log.find("baseline", 0, epochs)) jobs.push_back({nullptr, 0, epochs});
    for (const Screened& s : alive)
      if (!log.find(s.op->canonical, s.mask, epochs)) jobs.push_back({s.op, s.mask, epochs});
    say("round " + std::to_string(round + 1) + ": " + std::to_string(alive.size()) + " candidates, " +
        std::to_string(epochs) + " epoch(s) on " + std::to_string(cfg.proxy.train_images) + " images, " +
        std::to_string(jobs.size()) + " to train");
    std::vector<Evaluation> fresh = run_jobs(cfg, spec, jobs, say);
    // Without the baseline nothing can be rewarded, and its failure (missing data, say) is most
    // likely every candidate's too: stop before any of this round is recorded, so that a rerun
    // once the cause is fixed trains them all.
    if (!jobs.empty() && !jobs[0].op && fresh[0].failed)
      throw Error("trials: the baseline network failed, so nothing can be compared with it (nothing of this round "
                  "was recorded): " + fresh[0].error);
    // Latency is measured here, one candidate at a time, so parallel training never skews it.
    for (size_t i = 0; i < fresh.size(); ++i) {
      Evaluation& e = fresh[i];
      if (!e.failed) {
        try {
          auto net = make_network(spec, jobs[i].op, jobs[i].mask, cfg.proxy.seed, cfg.width);
          e.latency = measure_latency(*net);
          if (jobs[i].op) {  // the speedup from one interleaved run of both networks
            if (!base_net) base_net = make_network(spec, nullptr, 0, cfg.proxy.seed, cfg.width);
            auto [tb, tc] = paired_latency(*base_net, *net);
            e.paired_base_b64_t1 = tb;
            e.latency.b64_t1 = tc;
          }
        } catch (const std::exception& ex) {
          e.failed = true, e.error = ex.what();
        }
      }
      const Evaluation& rec = log.add(e);
      char sp[64] = "";
      if (!rec.failed && rec.paired_base_b64_t1 > 0)
        std::snprintf(sp, sizeof sp, " (baseline %.2f ms in the same run: %.2fx)", rec.paired_base_b64_t1,
                      rec.paired_base_b64_t1 / rec.latency.b64_t1);
      say("  " + std::string(rec.failed ? "FAILED " + rec.error : "acc " + std::to_string(rec.accuracy)) +
          "  latency b64 " + std::to_string(rec.latency.b64_t1) + " ms" + sp +
          (rec.class_mask ? "  classes " + std::to_string(rec.class_mask) : "") + "  " + rec.formula);
    }
    const Evaluation& base = *log.find("baseline", 0, epochs);
    out.baseline = base;
    std::vector<std::pair<double, Screened>> ranked;
    for (const Screened& s : alive) {
      Evaluation e = *log.find(s.op->canonical, s.mask, epochs);
      ranked.push_back({reward(e, base, cfg), s});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    alive.clear();
    for (size_t i = 0; i < (ranked.size() + 1) / 2; ++i)
      if (ranked[i].first > -1) alive.push_back(ranked[i].second);
    if (round + 1 < cfg.rounds && alive.size() <= 1 && ranked.size() <= 1) break;
  }

  // Everything evaluated at the final baseline budget, rewarded against that baseline.
  int64_t final_epochs = out.baseline.trained_epochs;
  for (const Screened& s : screened) {
    for (int64_t ep = final_epochs; ep >= cfg.proxy.epochs; ep /= 2) {
      const Evaluation* e = log.find(s.op->canonical, s.mask, ep);
      if (!e) continue;
      Evaluation c = *e;
      const Evaluation* base = log.find("baseline", 0, ep);
      c.reward = base ? reward(c, *base, cfg) : -1;
      out.evaluations.push_back(c);
      break;
    }
  }
  std::sort(out.evaluations.begin(), out.evaluations.end(), [](const Evaluation& a, const Evaluation& b) { return a.order < b.order; });
  // The Pareto front over (accuracy up, batch-64 latency down) among candidates at the final budget.
  for (size_t i = 0; i < out.evaluations.size(); ++i) {
    const Evaluation& a = out.evaluations[i];
    if (a.failed || a.trained_epochs != final_epochs) continue;
    bool dominated = false;
    for (const Evaluation& b : out.evaluations)
      if (&b != &a && !b.failed && b.trained_epochs == final_epochs && b.accuracy >= a.accuracy &&
          speedup(b, out.baseline) >= speedup(a, out.baseline) &&
          (b.accuracy > a.accuracy || speedup(b, out.baseline) > speedup(a, out.baseline)))
        dominated = true;
    if (!dominated) out.pareto.push_back(i);
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace synoros::trials
