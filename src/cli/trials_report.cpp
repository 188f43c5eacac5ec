// The trials report: markdown for people, JSON for tools, SVG plots and PyTorch modules.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "io/atomic_file.hpp"
#include "synoros/plot.hpp"
#include "cli/trials_report.hpp"

namespace synoros::cli {

using namespace trials;

namespace {
void write_text(const std::string& path, const std::string& text) {
  io::write_file_atomic(path, "report", [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}
std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string classes(unsigned mask) {
  const char* names[] = {"28x28", "14x14", "7x7"};
  std::string s;
  for (int i = 0; i < 3; ++i)
    if (mask >> i & 1u) s += (s.empty() ? "" : ", ") + std::string(names[i]);
  return s.empty() ? "-" : s;
}
}  // namespace

std::vector<std::string> export_layer_modules(const synth::Spec& spec, const synth::Operator& op, unsigned mask,
                                              int64_t batch, const std::string& dir, const std::string& stem) {
  std::vector<std::string> files;
  for (size_t c = 0; c < spec.bindings.size(); ++c) {
    if (!(mask >> c & 1u)) continue;
    synth::Binding b = synth::binding(spec, c);
    for (size_t v = 0; v < spec.primary.size(); ++v)
      if (spec.primary[v].name == "N") b.primary[v] = batch;
    files.push_back(dir + "/" + stem + "_b" + std::to_string(batch) + "_class" + std::to_string(c) + ".py");
    write_text(files.back(), synth::pytorch_module(spec, op, b, "SynthOp"));
  }
  return files;
}

void write_report(const TrialsConfig& cfg, const TrialsOutcome& out) {
  const Evaluation& base = out.baseline;
  synth::Spec spec = resnet_conv_spec(cfg.width);
  synth::Options so;
  so.max_depth = cfg.depth;
  synth::Synthesizer syn(spec, so);
  std::ostringstream md, js, notes;
  md << "# Operator trials report\n\n"
     << "Backbone: ResNetMini (width " << cfg.width << ") on Fashion-MNIST; candidates replace the stride-1 3x3 "
     << "convolutions of the layer classes where their layer is faster than the convolution.\n"
     << "Proxy: " << cfg.proxy.train_images << " training images, " << base.trained_epochs << " epoch(s) (final round), "
     << cfg.proxy.test_images << " test images. Latency: compiled inference plan of the whole network, median ms.\n"
     << "Reward: accuracy - " << cfg.latency_weight << " x max(0, latency ratio / " << fmt("%.3f", cfg.latency_target)
     << " - 1) (latency target: " << fmt("%.2f", 1 / cfg.latency_target) << "x faster than the baseline).\n"
     << "Time: " << fmt("%.0f", out.seconds) << " s.\n\n"
     << "| # | operator | family | layers | params | MFLOPs | accuracy | b64 1T ms | b64 2T ms | b1 1T ms | speedup b64 | "
        "reward | front |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  md << "| base | 3x3 convolution | standard kxk | all | " << fmt("%.0f", base.params) << " | " << fmt("%.1f", base.flops / 1e6) << " | "
     << fmt("%.4f", base.accuracy) << " | " << fmt("%.2f", base.latency.b64_t1) << " | " << fmt("%.2f", base.latency.b64_t2)
     << " | " << fmt("%.3f", base.latency.b1_t1) << " | 1.00x | " << fmt("%.4f", reward(base, base, cfg)) << " | |\n";
  // Latency on the plot is the baseline's divided by the candidate's speedup, so points measured
  // in different minutes of a noisy machine compare as their paired speedups do.
  auto plotted = [&](const Evaluation& e) { return base.latency.b64_t1 / std::max(speedup(e, base), 1e-9); };
  io::Panel front{"accuracy vs latency (batch 64, 1 thread)", "latency (ms, baseline / paired speedup)", "proxy test accuracy",
                  {{"candidates", {}, {}, true}, {"Pareto front", {}, {}, false}, {"baseline conv", {}, {}, true}}};
  io::Panel best{"best reward over time", "evaluations finished", "reward", {{"best so far", {}, {}, false}}};
  front.series[2].x.push_back(base.latency.b64_t1);
  front.series[2].y.push_back(base.accuracy);
  js << "{\"baseline\": " << to_json(base) << ", \"candidates\": [";
  double best_r = -1e9;
  // Each candidate known (the family its canonical form or function belongs to) or new.
  std::vector<synth::Operator> built;
  std::vector<size_t> built_of(out.evaluations.size(), SIZE_MAX);
  for (size_t i = 0; i < out.evaluations.size(); ++i) {
    if (out.evaluations[i].actions.empty()) continue;
    try {
      built.push_back(synth::build_from_actions(syn, parse_actions(out.evaluations[i].actions)));
      built_of[i] = built.size() - 1;
    } catch (const std::exception&) {
      // named "?" below: its actions no longer build here
    }
  }
  std::vector<std::string> family = synth::known_family_names(spec, built, synth::known_families(spec));
  auto family_of = [&](size_t i) {
    if (built_of[i] == SIZE_MAX) return std::string("?");
    const std::string& f = family[built_of[i]];
    return f.empty() ? std::string("**new**") : f;
  };
  for (size_t i = 0; i < out.evaluations.size(); ++i) {
    const Evaluation& e = out.evaluations[i];
    bool on_front = std::find(out.pareto.begin(), out.pareto.end(), i) != out.pareto.end();
    js << (i ? ", " : "") << to_json(e);
    double speed = speedup(e, base);
    md << "| " << i << " | `" << e.formula << "` | " << family_of(i) << " | " << classes(e.class_mask) << " | " << fmt("%.0f", e.params) << " | "
       << fmt("%.1f", e.flops / 1e6) << " | " << (e.failed ? "failed: " + e.error : fmt("%.4f", e.accuracy)) << " | "
       << fmt("%.2f", e.latency.b64_t1) << " | " << fmt("%.2f", e.latency.b64_t2) << " | " << fmt("%.3f", e.latency.b1_t1)
       << " | " << fmt("%.2fx", speed) << " | " << fmt("%.4f", e.reward) << " | " << (on_front ? "yes" : "") << " |\n";
    if (!e.failed) {
      front.series[0].x.push_back(plotted(e));
      front.series[0].y.push_back(e.accuracy);
      best_r = std::max(best_r, e.reward);
      best.series[0].x.push_back(double(best.series[0].x.size() + 1));
      best.series[0].y.push_back(best_r);
    }
    if (on_front && !e.actions.empty()) {
      try {
        synth::Operator op = synth::build_from_actions(syn, parse_actions(e.actions));
        std::string file = cfg.dir + "/op" + std::to_string(i) + ".py";
        write_text(file, synth::pytorch_module(spec, op, synth::binding(spec, 0), "SynthOp" + std::to_string(i)));
        // One module per replaced layer class at batch 64, for the network-level PyTorch timing.
        export_layer_modules(spec, op, e.class_mask, 64, cfg.dir, "op" + std::to_string(i));
      } catch (const std::exception& ex) {
        notes << "\nop" << i << ": export failed: " << ex.what() << "\n";
      }
    }
  }
  std::vector<std::pair<double, double>> pts;
  for (size_t i : out.pareto) pts.push_back({plotted(out.evaluations[i]), out.evaluations[i].accuracy});
  std::sort(pts.begin(), pts.end());
  for (auto [x, y] : pts) front.series[1].x.push_back(x), front.series[1].y.push_back(y);
  js << "], \"pareto\": [";
  for (size_t k = 0; k < out.pareto.size(); ++k) js << (k ? ", " : "") << out.pareto[k];
  js << "], \"family\": [";
  for (size_t i = 0; i < out.evaluations.size(); ++i)
    js << (i ? ", " : "") << "\""
       << (built_of[i] == SIZE_MAX ? "?" : family[built_of[i]].empty() ? "new" : family[built_of[i]]) << "\"";
  js << "], \"seconds\": " << out.seconds << "}\n";
  md << notes.str() << "\nOperators on the front are exported as PyTorch modules (`op<i>.py`, binding of the 28x28 class;\n"
     << "`op<i>_b64_class<c>.py`, batch 64 for layer class c: `python3 bench/torch_synth_network.py DIR/op<i>` times the\n"
     << "network with them against the convolutional one in PyTorch).\n"
     << "Plots: `front.svg` (accuracy vs latency with the Pareto front), `reward.svg` (best reward over time).\n";
  write_text(cfg.dir + "/report.md", md.str());
  write_text(cfg.dir + "/report.json", js.str());
  io::write_svg_chart(cfg.dir + "/front.svg", {front});
  io::write_svg_chart(cfg.dir + "/reward.svg", {best});
}

}  // namespace synoros::cli
