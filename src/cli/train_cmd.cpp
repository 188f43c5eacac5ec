// synoros train / synoros eval: Fashion-MNIST classifiers and the fortunes language model, with a
// progress bar, per-epoch metrics, CSV and JSON logs, curves as SVG and atomic checkpoints.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/mpi_runtime.hpp"
#include "io/atomic_file.hpp"
#include "kernels/providers.hpp"
#include "synoros/lm_trials.hpp"
#include "synoros/trials.hpp"
#include "synoros/synoros.hpp"

namespace synoros::cli {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string hms(double s) {
  int64_t t = int64_t(s + 0.5);
  char b[32];
  std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60), (long long)(t % 60));
  return b;
}

// One line on stderr, redrawn in place at most ten times a second.
class Progress {
 public:
  Progress(bool on, std::string label, int64_t total) : on_(on), label_(std::move(label)), total_(total) {}
  void update(int64_t done, double loss, double extra, const char* extra_name) {
    if (!on_) return;
    double now = seconds_since(start_);
    if (done < total_ && now - last_ < 0.1) return;
    last_ = now;
    int width = 24, fill = total_ ? int(double(width) * double(done) / double(total_)) : width;
    double rate = now > 0 ? double(done) / now : 0;
    char b[256];
    std::snprintf(b, sizeof b, "\r%s [%s%s] %lld/%lld %.1f steps/s loss %.4f %s %.3f ETA %s ", label_.c_str(),
                  std::string(size_t(fill), '#').c_str(), std::string(size_t(width - fill), '.').c_str(),
                  (long long)done, (long long)total_, rate, loss, extra_name, extra,
                  hms(rate > 0 ? double(total_ - done) / rate : 0).c_str());
    std::cerr << b << std::flush;
  }
  void finish() {
    if (on_) std::cerr << "\n";
  }

 private:
  bool on_;
  std::string label_;
  int64_t total_;
  Clock::time_point start_ = Clock::now();
  double last_ = -1;
};

void write_text(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, "log", [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

// A run's history: rows of numbers under named columns, kept as log.csv and log.json. A resumed
// run reads the rows its checkpoint had reached back from log.csv and appends, so the logs and
// curves always cover the whole run.
class RunLog {
 public:
  RunLog(std::string dir, std::vector<std::string> columns) : dir_(std::move(dir)), columns_(std::move(columns)) {}
  // Keeps the rows of an earlier log.csv whose step (column `step_col`) is at most `step`.
  void resume(int64_t step, size_t step_col) {
    std::ifstream in(dir_ + "/log.csv");
    std::string line;
    if (!in || !std::getline(in, line) || line != header()) return;  // no log, or another kind of run's
    while (std::getline(in, line)) {
      std::vector<double> row;
      std::stringstream ss(line);
      std::string cell;
      while (std::getline(ss, cell, ','))  // json_num writes a non-finite value as null
        row.push_back(cell == "null" ? NAN : std::strtod(cell.c_str(), nullptr));
      if (row.size() == columns_.size() && row[step_col] <= double(step)) rows_.push_back(row);
    }
  }
  void add(std::vector<double> row) { rows_.push_back(std::move(row)); }
  const std::vector<std::vector<double>>& rows() const { return rows_; }
  std::vector<double> column(size_t c) const {
    std::vector<double> v;
    for (const auto& r : rows_) v.push_back(r[c]);
    return v;
  }
  void write() const {
    std::ostringstream csv, json;
    csv << header() << "\n";
    json << "[";
    for (size_t i = 0; i < rows_.size(); ++i) {
      json << (i ? "," : "") << "{";
      for (size_t c = 0; c < columns_.size(); ++c) {
        csv << (c ? "," : "") << json_num(rows_[i][c]);
        json << (c ? "," : "") << "\"" << columns_[c] << "\":" << json_num(rows_[i][c]);
      }
      csv << "\n";
      json << "}";
    }
    write_text(dir_ + "/log.csv", csv.str());
    write_text(dir_ + "/log.json", json.str() + "]\n");
  }

 private:
  std::string header() const {
    std::string h;
    for (const std::string& c : columns_) h += (h.empty() ? "" : ",") + c;
    return h;
  }
  std::string dir_;
  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
};

// Fast mode: the run directory keeps the kernel choices of its last run (kernel_choices.txt),
// and a rerun into it (not a resume: the checkpoint has its own record) replays them.
std::string choices_path(const std::string& out) { return out + "/kernel_choices.txt"; }

void replay_run_choices(const Args& a, const std::string& out) {
  std::string p = choices_path(out);
  if (!fast_mode() || a.has("resume") || !std::filesystem::exists(p)) return;
  kernels::replay_choices(read_text_file(p, "kernel choices"), "'" + p + "'");
  std::cout << "fast mode: replaying the kernel choices in " << p << "\n";
}

void write_run_choices(const std::string& out) {
  if (!fast_mode()) return;
  std::string text = kernels::recorded_choices();
  io::write_file_atomic(choices_path(out), "kernel choices",
                        [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

// Data-parallel runs: only rank 0 prints, logs and writes files; the other ranks' standard
// output is discarded (errors still reach standard error, naming the rank).
bool lead_rank(const MpiRuntime& mpi) {
  if (mpi.rank() == 0) return true;
  if (!std::freopen("/dev/null", "w", stdout)) throw Error("train: cannot silence rank " + std::to_string(mpi.rank()));
  return false;
}

void describe_data_parallel(const MpiRuntime& mpi, const dist::DataParallelStep* dp, const char* shards_flag) {
  if (!dp) return;
  auto [first, last] = dp->local_shards();
  std::cout << "data-parallel: " << mpi.size() << " rank(s), " << dp->shards() << " micro-shards per step (" << shards_flag
            << "), rank 0 computes micro-shards " << first << ".." << last - 1 << "\n";
}

// A testing hook for the failure of one rank: SYNOROS_FAULT="kill:R:S" kills rank R (SIGKILL)
// after its step S, "hang:R:S" makes it stop answering, so that a test can check that the other
// ranks stop with an error in bounded time; "slow:R:S" pauses it for 2 s more than the peers'
// deadline (SYNOROS_DIST_TIMEOUT), as a long evaluation would.
void injected_fault(const MpiRuntime& mpi, int64_t step) {
  static const std::string spec = config::text("SYNOROS_FAULT");
  if (spec.empty()) return;
  char kind[8] = {};
  int rank = -1;
  long long at = -1;
  if (std::sscanf(spec.c_str(), "%7[a-z]:%d:%lld", kind, &rank, &at) != 3 || rank != mpi.rank() || at != step) return;
  std::fprintf(stderr, "synoros: SYNOROS_FAULT: rank %d %s after step %lld\n", rank, kind, at);
  if (std::string(kind) == "kill") std::raise(SIGKILL);
  if (std::string(kind) == "slow")
    std::this_thread::sleep_for(std::chrono::seconds(config::integer("SYNOROS_DIST_TIMEOUT").value_or(600) + 2));
  if (std::string(kind) == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Steady-state speed: the time between consecutive steps inside one run of training steps (the
// first step of each, which follows compilation or an evaluation, is left out).
class StepClock {
 public:
  void start() { last_ = Clock::now(), first_ = true; }
  void step() {
    auto now = Clock::now();
    if (!first_) seconds_ += std::chrono::duration<double>(now - last_).count(), ++steps_;
    last_ = now, first_ = false;
  }
  double steps_per_second() const { return seconds_ > 0 ? double(steps_) / seconds_ : 0; }

 private:
  Clock::time_point last_;
  bool first_ = true;
  double seconds_ = 0;
  int64_t steps_ = 0;
};

// The JSON summary's fields on speed and data parallelism.
std::string json_speed(const StepClock& clock, const MpiRuntime& mpi, const dist::DataParallelStep* dp) {
  std::string s = ",\"steady_steps_per_s\":" + json_num(clock.steps_per_second()) +
                  ",\"ranks\":" + std::to_string(mpi.size()) + ",\"threads\":" + std::to_string(num_threads());
  if (dp) {
    const dist::StepTimes& t = dp->times();
    s += ",\"micro_shards\":" + std::to_string(dp->shards()) + ",\"compute_s\":" + json_num(t.compute) +
         ",\"communication_s\":" + json_num(t.communication) + ",\"update_s\":" + json_num(t.update);
  }
  return s;
}

// Where rank 0's steps went: the share of the step spent communicating (and waiting for peers).
void report_data_parallel(const dist::DataParallelStep* dp) {
  if (!dp || dp->times().steps == 0) return;
  const dist::StepTimes& t = dp->times();
  double all = t.compute + t.communication + t.update;
  std::printf("data-parallel steps on rank 0: compute %.2f s, communication %.2f s (%.1f%%), update %.2f s\n", t.compute,
              t.communication, all > 0 ? 100.0 * t.communication / all : 0.0, t.update);
}

const char* kOperatorKey = "operator";
const char* kMaskKey = "operator_mask";

std::shared_ptr<nn::Module> operator_network(const std::string& actions, int64_t mask, uint64_t seed) {
  return trials::network_from_actions(actions, unsigned(mask), seed);
}

int train_classifier(const Args& a, const std::string& model, const MpiRuntime& mpi) {
  train::ClassifierConfig c;
  c.shards = a.integer("shards", 1);
  c.group = mpi.group();
  const bool lead = lead_rank(mpi);
  c.model = model;
  c.optimizer = a.str("optimizer");
  if (a.has("epochs") && a.has("steps")) throw UsageError("train: give --epochs or --steps, not both");
  if (c.optimizer != "sgd") a.refuse("momentum", "applies to sgd only");
  c.epochs = a.integer("epochs");
  c.steps = a.integer("steps", 0);
  c.batch = a.integer("batch", 64);
  c.lr = a.real("lr", c.optimizer == "sgd" ? 0.05 : 2e-3);
  c.momentum = a.real("momentum");
  c.weight_decay = a.real("weight-decay", 5e-4);
  c.clip = a.real("clip", 0);
  c.warmup_steps = a.integer("warmup", 0);
  c.augment = a.has("augment");
  c.seed = uint64_t(a.integer("seed"));
  c.train_limit = a.integer("train-limit", 0);
  c.test_limit = a.integer("test-limit", 0);
  c.data_dir = a.str("data-dir", "");
  if (!a.has("operator")) a.refuse("mask", "goes with --operator");
  if (a.has("operator") && model != "resnet-mini")
    throw UsageError("train: --operator replaces resnet-mini's 3x3 convolutions or a GPT's projections, not " + model +
                     "'s layers");
  if (a.has("operator") && a.has("mask")) trials::check_class_mask(unsigned(a.integer("mask")));
  // Recorded either way, so resuming with or without --operator is checked in both directions.
  c.extra = {{kOperatorKey, a.str("operator", "")},
             {kMaskKey, a.has("operator") ? std::to_string(a.integer("mask", 7)) : ""}};
  std::string out = a.str("out", "runs/" + model), save = a.str("save", out + "/checkpoint.safetensors");
  if (lead) {
    writable_dir(out, "run directory");
    writable_file(save, "checkpoint");
    if (a.has("save-init")) writable_file(a.str("save-init"), "checkpoint");
  }
  bool progress = lead && !a.has("no-progress");
  replay_run_choices(a, out);
  // --operator ACTIONS [--mask M]: resnet-mini with a synthesized operator from a search report.
  std::unique_ptr<train::ClassifierTrainer> tp =
      a.has("operator")
          ? std::make_unique<train::ClassifierTrainer>(c, operator_network(a.str("operator"), a.integer("mask", 7), c.seed))
          : std::make_unique<train::ClassifierTrainer>(c);
  train::ClassifierTrainer& t = *tp;
  RunLog log(out, {"epoch", "step", "train_loss", "train_acc", "test_loss", "test_acc", "seconds"});
  if (a.has("resume")) {
    t.load(a.str("resume"));
    log.resume(t.step(), 1);
    std::cout << "resumed from " << a.str("resume") << " at step " << t.step() << "\n";
  }
  if (lead && a.has("save-init")) t.save(a.str("save-init"));  // the initial weights, for side-by-side runs
  int64_t spe = t.steps_per_epoch(), total = t.total_steps(), epochs = (total + spe - 1) / spe;
  std::cout << "model " << model << ": " << t.model().parameter_count() << " parameters, " << spe
            << " steps per epoch, " << total << " steps, batch " << c.batch << ", " << c.optimizer << " lr " << c.lr
            << "\n";
  describe_data_parallel(mpi, t.data_parallel(), "--shards");
  double total_seconds = 0, last_test_acc = 0;
  StepClock clock;
  for (int64_t epoch = t.step() / spe; epoch < epochs && t.step() < total; ++epoch) {
    int64_t end = std::min((epoch + 1) * spe, total);
    Progress bar(progress, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs), end - epoch * spe);
    t.reset_means();
    auto t0 = Clock::now();
    int64_t begin = t.step();
    clock.start();
    t.train_steps(end - t.step(), [&](int64_t s, double) {
      clock.step();
      injected_fault(mpi, s);
      bar.update(s - epoch * spe, t.mean_loss(), t.mean_acc(), "acc");
    });
    double secs = seconds_since(t0);
    bar.finish();
    if (lead) {  // rank 0 evaluates and writes while the others wait
      auto [test_loss, test_acc] = t.evaluate();
      total_seconds += secs;
      last_test_acc = test_acc;
      int64_t e = epoch + 1;
      std::printf("epoch %lld  train loss %.4f acc %.4f  test loss %.4f acc %.4f  %.1f s (%.1f steps/s)\n", (long long)e,
                  t.mean_loss(), t.mean_acc(), test_loss, test_acc, secs, double(t.step() - begin) / secs);
      std::fflush(stdout);
      log.add({double(e), double(t.step()), t.mean_loss(), t.mean_acc(), test_loss, test_acc, secs});
      log.write();
      std::vector<double> x = log.column(0);
      io::write_svg_chart(out + "/curves.svg",
                          {{"loss", "epoch", "cross-entropy", {{"train", x, log.column(2)}, {"test", x, log.column(4)}}},
                           {"accuracy", "epoch", "accuracy", {{"train", x, log.column(3)}, {"test", x, log.column(5)}}}});
      t.save(save);
      write_run_choices(out);
    }
    mpi.meet();
  }
  report_data_parallel(t.data_parallel());
  std::cout << "checkpoint " << save << ", curves " << out << "/curves.svg, logs " << out << "/log.{csv,json}\n";
  if (a.has("json"))
    std::cout << "{\"model\":\"" << model << "\",\"epochs\":" << epochs << ",\"steps\":" << total
              << ",\"train_seconds\":" << total_seconds << ",\"seconds_per_epoch\":" << total_seconds / double(epochs)
              << ",\"test_acc\":" << last_test_acc << json_speed(clock, mpi, t.data_parallel()) << "}\n";
  return 0;
}

bool is_gpt(const std::string& model) {
  const std::vector<std::string> names = nn::GptConfig::preset_names();
  return std::find(names.begin(), names.end(), model) != names.end();
}

// The GPT's projections of the classes of `mask` become the operator of an action path on the
// linear spec at the model's width; recorded in the run's metadata. Returns the formula.
std::string use_projections(train::LmConfig& c, const std::string& actions, int64_t mask) {
  synth::Spec spec = trials::gpt_linear_spec(c.model.width);
  synth::Options so;
  so.max_depth = 12;
  synth::Synthesizer syn(spec, so);
  synth::Operator op = synth::build_from_actions(syn, trials::parse_actions(actions));
  c.projections = trials::projection_factory(spec, &op, unsigned(mask), c.model.layers);
  c.extra = {{kOperatorKey, actions}, {kMaskKey, std::to_string(mask)}};
  return synth::formula(spec, op);
}

train::LmConfig lm_config(const Args& a) {
  train::LmConfig c;
  c.name = a.str("model");
  c.model = nn::GptConfig::preset(c.name);
  c.model.context = a.integer("context", c.model.context);
  c.model.width = a.integer("width", c.model.width);
  c.model.layers = a.integer("layers", c.model.layers);
  c.model.heads = a.integer("heads", c.model.heads);
  if (c.model.width % c.model.heads)
    throw UsageError("train: --heads " + std::to_string(c.model.heads) + " does not divide --width " +
                     std::to_string(c.model.width));
  return c;
}

// The language-model loop of train and finetune: progress, validation, logs, curves and
// checkpoints every --eval-every steps (`saved` runs after each checkpoint), a sample at the end.
int lm_loop(const Args& a, train::LmConfig c, const MpiRuntime& mpi,
            const std::function<void(train::LmTrainer&, const std::string&)>& saved = {});

int train_lm(const Args& a, const MpiRuntime& mpi) {
  train::LmConfig c = lm_config(a);
  c.batch = a.integer("batch", 16);
  c.steps = a.integer("steps", 1000);
  c.lr = a.real("lr", c.name == "gpt-tiny" ? 3e-3 : 6e-4);
  c.weight_decay = a.real("weight-decay", 0.01);
  c.clip = a.real("clip", 1.0);
  c.warmup_steps = a.integer("warmup", 50);
  // --operator ACTIONS [--mask M]: the projections of the classes of M are that operator (an
  // action path of an lm-trials report, on the linear spec at this width). Recorded in the
  // checkpoints when given, so a resume must name the same operator.
  if (!a.has("operator")) a.refuse("mask", "goes with --operator");
  if (a.has("resume")) {  // the same projections, or the parameters would not match (named here)
    const std::string path = a.str("resume");
    io::Metadata md = io::load_safetensors(path).metadata;
    const std::string was = md.count(kOperatorKey) ? md.at(kOperatorKey) : "";
    if (was != a.str("operator", ""))
      throw Error("train: checkpoint '" + path + "' was trained " +
                  (was.empty() ? std::string("with dense projections; resume without --operator")
                               : "with --operator '" + was + "' --mask " + md[kMaskKey] + "; resume with the same"));
  }
  if (a.has("operator")) {
    const int64_t mask = a.integer("mask", 15);
    if (mask > 15) throw UsageError("train: --mask for a GPT's projections must be in [1, 15]");
    std::cout << "projections of classes " << mask << ": " << use_projections(c, a.str("operator"), mask) << "\n";
  }
  return lm_loop(a, c, mpi);
}

int lm_loop(const Args& a, train::LmConfig c, const MpiRuntime& mpi,
            const std::function<void(train::LmTrainer&, const std::string&)>& saved) {
  c.group = mpi.group();
  const bool lead = lead_rank(mpi);
  c.seed = uint64_t(a.integer("seed"));
  c.accum = a.integer("accum", 1);
  c.checkpoint_activations = a.has("checkpoint-activations");
  c.data_dir = a.str("data-dir", "");
  if (a.str("data", "fortunes") != "fortunes") c.text_file = a.str("data");
  std::string out = a.str("out", "runs/" + c.name), save = a.str("save", out + "/checkpoint.safetensors");
  if (lead) {
    writable_dir(out, "run directory");
    writable_file(save, "checkpoint");
  }
  replay_run_choices(a, out);
  train::LmTrainer t(c);
  RunLog log(out, {"step", "train_loss", "val_loss", "seconds"});
  if (a.has("resume")) {
    t.load(a.str("resume"));
    log.resume(t.step(), 0);
    std::cout << "resumed from " << a.str("resume") << " at step " << t.step() << "\n";
  }
  int64_t every = a.integer("eval-every");
  std::cout << c.name << ": " << t.model().parameter_count() << " parameters";
  if (t.lora())
    std::cout << " (frozen) + " << t.lora()->parameter_count() << " LoRA parameters (rank " << t.lora()->config().rank
              << ", alpha " << t.lora()->config().alpha << ", " << t.lora()->config().targets_str() << ")";
  std::cout << "; unigram baseline " << t.unigram_baseline() << " nats/byte\n";
  describe_data_parallel(mpi, t.data_parallel(), "--accum");
  double done_seconds = log.rows().empty() ? 0 : log.rows().back()[3];
  auto t0 = Clock::now();
  StepClock clock;
  double last_val = 0;
  while (t.step() < c.steps) {
    Progress bar(lead && !a.has("no-progress"), "steps", std::min(c.steps, t.step() + every) - t.step());
    int64_t begin = t.step();
    double sum = 0;
    int64_t n = 0;
    clock.start();
    t.train_steps(every, [&](int64_t s, double l) {
      clock.step();
      injected_fault(mpi, s);
      sum += l, ++n;
      bar.update(s - begin, l, sum / double(n), "mean");
    });
    bar.finish();
    if (lead) {  // rank 0 validates and writes while the others wait
      double val = last_val = t.validation_loss();
      double secs = done_seconds + seconds_since(t0);
      std::printf("step %lld  train loss %.4f  val loss %.4f  (unigram %.4f)  %.1f s\n", (long long)t.step(),
                  sum / double(n), val, t.unigram_baseline(), secs);
      std::fflush(stdout);
      log.add({double(t.step()), sum / double(n), val, secs});
      log.write();
      std::vector<double> x = log.column(0);
      io::write_svg_chart(out + "/curves.svg",
                          {{c.name + " on " + (c.text_file.empty() ? std::string("fortunes") : c.text_file), "step",
                            "nats per byte",
                            {{"train", x, log.column(1)},
                             {"validation", x, log.column(2)},
                             {"unigram", x, std::vector<double>(x.size(), t.unigram_baseline())}}}});
      t.save(save);
      write_run_choices(out);
      if (saved) saved(t, out);
    }
    mpi.meet();
  }
  if (!lead) return 0;
  report_data_parallel(t.data_parallel());
  std::string prompt = a.str("prompt", "The ");
  std::cout << "sample (temperature 0.8):\n" << prompt << t.generate(prompt, a.integer("sample"), 0.8, c.seed) << "\n";
  if (a.has("json"))
    std::cout << "{\"model\":\"" << c.name << "\",\"steps\":" << c.steps << ",\"val_loss\":" << json_num(last_val)
              << json_speed(clock, mpi, t.data_parallel()) << "}\n";
  return 0;
}
}  // namespace

int train_cmd(const Args& a) {
  apply_threads(a);
  std::string model = a.str("model");
  bool lm = is_gpt(model);
  a.require_scope(lm ? "lm" : "classifier", model);
  std::string data = a.str("data", lm ? "fortunes" : "fashion-mnist");
  if (lm && data != "fortunes" && !std::filesystem::is_regular_file(data))
    throw UsageError("train: --data for " + model + " is fortunes or a text file; '" + data + "' is neither");
  if (!lm && data != "fashion-mnist")
    throw UsageError("train: " + model + " trains on --data fashion-mnist, not '" + data + "'");
  MpiRuntime mpi("train");
  try {
    return lm ? train_lm(a, mpi) : train_classifier(a, model, mpi);
  } catch (const std::exception& e) {
    if (mpi.active()) mpi.abort(e.what());
    throw;
  }
}

int finetune_cmd(const Args& a) {
  apply_threads(a);
  if (!a.has("base")) throw UsageError("finetune: --base PATH (the model to adapt) is required");
  std::string data = a.str("data", "fortunes");
  if (data != "fortunes" && !std::filesystem::is_regular_file(data))
    throw UsageError("finetune: --data is fortunes or a text file; '" + data + "' is neither");
  train::LmConfig c;
  c.name = "finetune";
  c.base = a.str("base");
  if (!std::filesystem::is_regular_file(c.base)) throw UsageError("finetune: --base '" + c.base + "' is not a file");
  int64_t rank = a.integer("lora-rank", 8);
  if (rank > 0) {
    nn::LoraConfig l;
    l.rank = rank;
    l.alpha = a.real("lora-alpha", 2.0 * double(rank));
    l.targets = nn::LoraConfig::parse_targets(a.str("lora-targets", l.targets_str()));
    c.lora = l;
  } else {
    for (const char* k : {"lora-alpha", "lora-targets"}) a.refuse(k, "needs --lora-rank > 0");
    a.refuse("merge", "needs --lora-rank > 0 (with rank 0 every parameter is trained: the checkpoint is the model)");
  }
  c.sequence = a.integer("sequence", 0);
  c.batch = a.integer("batch", 8);
  c.steps = a.integer("steps", 200);
  c.lr = a.real("lr", rank > 0 ? 1e-3 : 1e-4);
  c.weight_decay = a.real("weight-decay", 0.0);
  c.clip = a.real("clip", 1.0);
  c.warmup_steps = a.integer("warmup", 20);
  bool merge = a.has("merge");
  MpiRuntime mpi("finetune");
  try {
  return lm_loop(a, c, mpi, [&](train::LmTrainer& t, const std::string& out) {
    if (!t.lora()) return;
    t.lora()->save_pretrained(out + "/adapter", c.base);
    if (merge && t.step() == c.steps) {
      t.lora()->merge();
      t.model().save(out + "/merged.safetensors");
      t.lora()->unmerge();
      std::cout << "merged model: " << out << "/merged.safetensors\n";
    }
  });
  } catch (const std::exception& e) {
    if (mpi.active()) mpi.abort(e.what());
    throw;
  }
}

// The model, optimizer and configuration come from the checkpoint's metadata.
int eval_cmd(const Args& a) {
  apply_threads(a);
  if (!a.has("checkpoint")) throw UsageError("eval: --checkpoint PATH is required");
  std::string path = a.str("checkpoint");
  io::Metadata md = io::load_safetensors(path).metadata;
  std::string model = io::metadata_text(md, "model", path);
  if (a.has("model") && a.str("model") != model)
    throw Error("eval: checkpoint '" + path + "' holds a model of kind " + model + ", not " + a.str("model"));
  bool lm = is_gpt(model) || model == "finetune";
  a.require_scope(lm ? "lm" : "classifier", model);
  if (md.count("kernels") && md.at("kernels") == "fast" && !fast_mode() && !config::flag("SYNOROS_STRICT")) {
    set_fast_mode(true);  // the kernels the training chose, so the figures are the ones it printed
    std::cout << "fast mode: the checkpoint was trained in fast mode; evaluating with the kernels it recorded\n";
  }
  if (lm) {
    // The model's shape; checkpoints written before it was recorded were trained with the defaults
    // as far as anyone can tell (a different shape fails the load, naming the tensor).
    train::LmConfig c;
    c.name = model;
    if (model == "finetune") {  // the base's file, the adapters' configuration and the window length
      c.base = io::metadata_text(md, "base", path);
      if (md.count("lora_rank")) {
        nn::LoraConfig l;
        l.rank = io::metadata_int(md, "lora_rank", path, 1, 65536);
        l.alpha = std::stod(io::metadata_text(md, "lora_alpha", path));
        l.targets = nn::LoraConfig::parse_targets(io::metadata_text(md, "lora_targets", path));
        c.lora = l;
      }
      if (md.count("sequence")) c.sequence = io::metadata_int(md, "sequence", path, 1, 1 << 16);
      for (const char* k : {"context", "width", "layers", "heads"}) a.refuse(k, "comes from the base model");
    } else {
      c.model = nn::GptConfig::preset(model);
    }
    if (md.count("data") && md.at("data") != "fortunes") c.text_file = md.at("data");
    auto shape = [&](const char* key, int64_t fallback, int64_t lo, int64_t hi) {
      if (!md.count(key)) return a.integer(key, fallback);
      a.refuse(key, "is recorded in the checkpoint");
      return io::metadata_int(md, key, path, lo, hi);
    };
    if (c.base.empty()) {
      c.model.context = shape("context", c.model.context, 2, 1 << 16);
      c.model.width = shape("width", c.model.width, 1, 1 << 16);
      c.model.layers = shape("layers", c.model.layers, 1, 1024);
      c.model.heads = shape("heads", c.model.heads, 1, 1024);
    }
    c.data_dir = a.str("data-dir", "");
    if (md.count(kOperatorKey) && !md.at(kOperatorKey).empty())  // synthesized projections
      use_projections(c, md.at(kOperatorKey), io::metadata_int(md, kMaskKey, path, 1, 15));
    train::LmTrainer t(c);
    t.load(path, false);
    std::cout << "validation loss " << t.validation_loss(64) << " nats/byte (unigram baseline " << t.unigram_baseline()
              << ")\n";
    std::string prompt = a.str("prompt", "The ");
    std::cout << prompt << t.generate(prompt, a.integer("sample"), 0.8, 1) << "\n";
    return 0;
  }
  if (model != "mlp" && model != "lenet" && model != "resnet-mini")
    throw Error("eval: checkpoint '" + path + "' holds an unknown model '" + model + "'");
  train::ClassifierConfig c;
  c.model = model;
  c.optimizer = io::metadata_text(md, "optimizer", path);
  c.evaluate_only = true;
  c.test_limit = a.integer("test-limit", 0);
  c.seed = 1;
  c.data_dir = a.str("data-dir", "");
  std::unique_ptr<train::ClassifierTrainer> tp;
  std::string actions = a.str("operator", "");
  int64_t mask = a.integer("mask", 7);
  if (a.has("operator") && a.has("mask")) trials::check_class_mask(unsigned(mask));
  if (md.count(kOperatorKey)) {  // recorded (empty: the plain network)
    a.refuse("operator", "is recorded in the checkpoint");
    a.refuse("mask", "is recorded in the checkpoint");
    actions = md.at(kOperatorKey);
    if (!actions.empty()) mask = io::metadata_int(md, kMaskKey, path, 1, 255);
  }
  if (!actions.empty()) {
    tp = std::make_unique<train::ClassifierTrainer>(c, operator_network(actions, mask, c.seed));
  } else {
    tp = std::make_unique<train::ClassifierTrainer>(c);
  }
  train::ClassifierTrainer& t = *tp;
  t.load(path, false);
  auto [loss, acc] = t.evaluate();
  std::printf("%s at step %lld: test loss %.4f, test accuracy %.4f\n", model.c_str(), (long long)t.step(), loss, acc);
  return 0;
}

}  // namespace synoros::cli
