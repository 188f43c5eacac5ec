// synoros train / synoros eval: Fashion-MNIST classifiers and the fortunes language model, with a
// progress bar, per-epoch metrics, CSV and JSON logs, curves as SVG and atomic checkpoints.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "synoros/search.hpp"
#include "io/atomic_file.hpp"
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

void set_threads(const Args& a) {
  if (a.has("threads")) setenv("SYNOROS_NUM_THREADS", std::to_string(a.integer("threads", 1, 1)).c_str(), 1);
}

std::shared_ptr<nn::Module> operator_network(const Args& a, const std::string& model, uint64_t seed) {
  if (model != "resnet-mini") throw Error("--operator replaces resnet-mini's 3x3 convolutions, not " + model + "'s layers");
  return search::network_from_actions(a.str("operator", ""), unsigned(a.integer("mask", 7, 1)), seed);
}

int train_classifier(const Args& a, const std::string& model) {
  train::ClassifierConfig c;
  c.model = model;
  c.optimizer = a.str("optimizer", "sgd");
  c.epochs = a.integer("epochs", 10, 1);
  c.batch = a.integer("batch", 64, 1);
  c.lr = a.real("lr", c.optimizer == "sgd" ? 0.05 : 2e-3);
  c.momentum = a.real("momentum", 0.9);
  c.weight_decay = a.real("weight-decay", 5e-4);
  c.clip = a.real("clip", 0);
  c.warmup_steps = a.integer("warmup", 0, 0);
  c.augment = a.has("augment");
  c.seed = uint64_t(a.integer("seed", 1, 0));
  c.train_limit = a.integer("train-limit", 0, 0);
  c.test_limit = a.integer("test-limit", 0, 0);
  c.data_dir = a.str("data-dir", "");
  std::string out = a.str("out", "runs/" + model);
  std::filesystem::create_directories(out);
  bool progress = !a.has("no-progress");
  // --operator ACTIONS [--mask M]: resnet-mini with a synthesized operator from a search report.
  std::unique_ptr<train::ClassifierTrainer> tp =
      a.has("operator") ? std::make_unique<train::ClassifierTrainer>(c, operator_network(a, model, c.seed))
                        : std::make_unique<train::ClassifierTrainer>(c);
  train::ClassifierTrainer& t = *tp;
  if (a.has("resume")) {
    t.load(a.str("resume", ""));
    std::cout << "resumed from " << a.str("resume", "") << " at step " << t.step() << "\n";
  }
  if (a.has("save-init")) t.save(a.str("save-init", ""));  // the initial weights, for side-by-side runs
  std::cout << "model " << model << ": " << t.model().parameter_count() << " parameters, " << t.steps_per_epoch()
            << " steps per epoch, batch " << c.batch << ", " << c.optimizer << " lr " << c.lr << "\n";
  std::ostringstream csv, json;
  csv << "epoch,step,train_loss,train_acc,test_loss,test_acc,seconds\n";
  json << "[";
  io::Panel loss_panel{"loss", "epoch", "cross-entropy", {{"train", {}, {}}, {"test", {}, {}}}};
  io::Panel acc_panel{"accuracy", "epoch", "accuracy", {{"train", {}, {}}, {"test", {}, {}}}};
  double total_seconds = 0, last_test_acc = 0;
  int64_t spe = t.steps_per_epoch();
  for (int64_t epoch = t.step() / spe; epoch < c.epochs; ++epoch) {
    Progress bar(progress, "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c.epochs), spe);
    t.reset_means();
    auto t0 = Clock::now();
    int64_t begin = t.step();
    t.train_steps((epoch + 1) * spe - t.step(),
                  [&](int64_t s, double) { bar.update(s - epoch * spe, t.mean_loss(), t.mean_acc(), "acc"); });
    double secs = seconds_since(t0);
    bar.finish();
    auto [test_loss, test_acc] = t.evaluate();
    total_seconds += secs;
    last_test_acc = test_acc;
    int64_t e = epoch + 1;
    std::printf("epoch %lld  train loss %.4f acc %.4f  test loss %.4f acc %.4f  %.1f s (%.1f steps/s)\n", (long long)e,
                t.mean_loss(), t.mean_acc(), test_loss, test_acc, secs, double(t.step() - begin) / secs);
    std::fflush(stdout);
    csv << e << "," << t.step() << "," << t.mean_loss() << "," << t.mean_acc() << "," << test_loss << "," << test_acc
        << "," << secs << "\n";
    json << (json.tellp() > 1 ? "," : "") << "{\"epoch\":" << e << ",\"step\":" << t.step()
         << ",\"train_loss\":" << json_num(t.mean_loss()) << ",\"train_acc\":" << json_num(t.mean_acc())
         << ",\"test_loss\":" << json_num(test_loss) << ",\"test_acc\":" << json_num(test_acc)
         << ",\"seconds\":" << json_num(secs) << "}";
    for (auto* p : {&loss_panel, &acc_panel}) {
      p->series[0].x.push_back(double(e)), p->series[1].x.push_back(double(e));
    }
    loss_panel.series[0].y.push_back(t.mean_loss()), loss_panel.series[1].y.push_back(test_loss);
    acc_panel.series[0].y.push_back(t.mean_acc()), acc_panel.series[1].y.push_back(test_acc);
    write_text(out + "/log.csv", csv.str());
    write_text(out + "/log.json", json.str() + "]\n");
    io::write_svg_chart(out + "/curves.svg", {loss_panel, acc_panel});
    t.save(a.str("save", out + "/checkpoint.safetensors"));
  }
  std::cout << "checkpoint " << a.str("save", out + "/checkpoint.safetensors") << ", curves " << out
            << "/curves.svg, logs " << out << "/log.{csv,json}\n";
  if (a.has("json"))
    std::cout << "{\"model\":\"" << model << "\",\"epochs\":" << c.epochs << ",\"train_seconds\":" << total_seconds
              << ",\"seconds_per_epoch\":" << total_seconds / double(c.epochs) << ",\"test_acc\":" << last_test_acc
              << "}\n";
  return 0;
}

int train_lm(const Args& a) {
  train::LmConfig c;
  c.model.context = a.integer("context", 64, 2);
  c.model.width = a.integer("width", 128, 1);
  c.model.layers = a.integer("layers", 2, 1);
  c.model.heads = a.integer("heads", 4, 1);
  c.batch = a.integer("batch", 16, 1);
  c.steps = a.integer("steps", 1000, 1);
  c.lr = a.real("lr", 3e-3);
  c.weight_decay = a.real("weight-decay", 0.01);
  c.clip = a.real("clip", 1.0);
  c.warmup_steps = a.integer("warmup", 50, 0);
  c.seed = uint64_t(a.integer("seed", 1, 0));
  c.data_dir = a.str("data-dir", "");
  std::string out = a.str("out", "runs/gpt-tiny");
  std::filesystem::create_directories(out);
  train::LmTrainer t(c);
  if (a.has("resume")) t.load(a.str("resume", ""));
  int64_t every = a.integer("eval-every", 200, 1);
  std::cout << "gpt-tiny: " << t.model().parameter_count() << " parameters; unigram baseline "
            << t.unigram_baseline() << " nats/byte\n";
  io::Panel panel{"gpt-tiny on fortunes", "step", "nats per byte", {{"train", {}, {}}, {"validation", {}, {}}, {"unigram", {}, {}}}};
  std::ostringstream csv;
  csv << "step,train_loss,val_loss,seconds\n";
  auto t0 = Clock::now();
  while (t.step() < c.steps) {
    Progress bar(!a.has("no-progress"), "steps", std::min(c.steps, t.step() + every) - t.step());
    int64_t begin = t.step();
    double sum = 0;
    int64_t n = 0;
    t.train_steps(every, [&](int64_t s, double l) {
      sum += l, ++n;
      bar.update(s - begin, l, sum / double(n), "mean");
    });
    bar.finish();
    double val = t.validation_loss();
    std::printf("step %lld  train loss %.4f  val loss %.4f  (unigram %.4f)  %.1f s\n", (long long)t.step(),
                sum / double(n), val, t.unigram_baseline(), seconds_since(t0));
    std::fflush(stdout);
    csv << t.step() << "," << sum / double(n) << "," << val << "," << seconds_since(t0) << "\n";
    panel.series[0].x.push_back(double(t.step())), panel.series[0].y.push_back(sum / double(n));
    panel.series[1].x.push_back(double(t.step())), panel.series[1].y.push_back(val);
    panel.series[2].x.push_back(double(t.step())), panel.series[2].y.push_back(t.unigram_baseline());
    write_text(out + "/log.csv", csv.str());
    io::write_svg_chart(out + "/curves.svg", {panel});
    t.save(a.str("save", out + "/checkpoint.safetensors"));
  }
  std::string sample = t.generate(a.str("prompt", "The "), a.integer("sample", 300, 0), 0.8, c.seed);
  std::cout << "sample (temperature 0.8):\n" << a.str("prompt", "The ") << sample << "\n";
  return 0;
}

const std::set<std::string> kTrainOptions = {
    "model", "data", "epochs", "batch", "lr", "optimizer", "momentum", "weight-decay", "clip", "warmup", "seed",
    "train-limit", "test-limit", "data-dir", "out", "save", "resume", "save-init", "threads", "steps", "context",
    "width", "layers", "heads", "eval-every", "prompt", "sample", "operator", "mask"};
}  // namespace

int train_cmd(int argc, char** argv) {
  Args a("train", argc, argv, kTrainOptions, {"augment", "no-progress", "json"});
  set_threads(a);
  std::string model = a.str("model", "resnet-mini");
  std::string data = a.str("data", model == "gpt-tiny" ? "fortunes" : "fashion-mnist");
  if (model == "gpt-tiny") {
    if (data != "fortunes") throw Error("train: gpt-tiny trains on --data fortunes, not '" + data + "'");
    return train_lm(a);
  }
  if (data != "fashion-mnist") throw Error("train: " + model + " trains on --data fashion-mnist, not '" + data + "'");
  return train_classifier(a, model);
}

int eval_cmd(int argc, char** argv) {
  std::set<std::string> options = kTrainOptions;
  options.insert("checkpoint");  // eval's own: train saves with --save and resumes with --resume
  Args a("eval", argc, argv, options, {"no-progress"});
  set_threads(a);
  std::string model = a.str("model", "resnet-mini");
  if (!a.has("checkpoint") && !a.has("resume")) throw Error("eval: --checkpoint PATH is required");
  std::string path = a.str("checkpoint", a.str("resume", ""));
  if (model == "gpt-tiny") {
    train::LmConfig c;
    c.model.context = a.integer("context", 64, 2);
    c.model.width = a.integer("width", 128, 1);
    c.model.layers = a.integer("layers", 2, 1);
    c.model.heads = a.integer("heads", 4, 1);
    train::LmTrainer t(c);
    t.load(path);
    std::cout << "validation loss " << t.validation_loss(64) << " nats/byte (unigram baseline " << t.unigram_baseline()
              << ")\n";
    std::cout << a.str("prompt", "The ") << t.generate(a.str("prompt", "The "), a.integer("sample", 200, 0), 0.8, 1) << "\n";
    return 0;
  }
  train::ClassifierConfig c;
  c.model = model;
  c.optimizer = a.str("optimizer", "sgd");
  c.train_limit = c.batch = 64;
  c.test_limit = a.integer("test-limit", 0, 0);
  c.seed = uint64_t(a.integer("seed", 1, 0));
  std::unique_ptr<train::ClassifierTrainer> tp =
      a.has("operator") ? std::make_unique<train::ClassifierTrainer>(c, operator_network(a, model, c.seed))
                        : std::make_unique<train::ClassifierTrainer>(c);
  train::ClassifierTrainer& t = *tp;
  t.load(path);
  auto [loss, acc] = t.evaluate();
  std::printf("%s at step %lld: test loss %.4f, test accuracy %.4f\n", model.c_str(), (long long)t.step(), loss, acc);
  return 0;
}

}  // namespace synoros::cli
