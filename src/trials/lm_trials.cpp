// Operator trials on the GPT's projections: the linear spec, synthesized projections, proxy
// training on text and the training step's time.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "io/atomic_file.hpp"
#include "synoros/lm_trials.hpp"
#include "synoros/optim.hpp"
#include "synoros/train.hpp"
#include "trials/json_fields.hpp"

namespace synoros::trials {

std::vector<ProjectionClass> gpt_projection_classes(int64_t C) {
  return {{"attn.c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"mlp.c_fc", C, 4 * C},
          {"mlp.c_proj", 4 * C, C}};
}

synth::Spec gpt_linear_spec(int64_t width, int64_t rows) {
  std::string t = "input: N, C_in; output: N, C_out; coef: g=4:3, h=2:2;";
  for (const ProjectionClass& c : gpt_projection_classes(width))
    t += " bind: N=" + std::to_string(rows) + ", C_in=" + std::to_string(c.in) + ", C_out=" + std::to_string(c.out) +
         ";";
  t += " cap: C_in=4, C_out=4; fixed: N";
  return synth::parse_spec(t);
}

SynthLinear::SynthLinear(const synth::Spec& spec, const synth::Operator& op, int64_t in, int64_t out, uint64_t seed,
                         double gain)
    : spec_(spec), op_(op), in_(in), out_(out) {
  std::vector<Tensor> w = synth::init_weights(spec, op, binding(2), seed);
  if (!w.empty() && gain != 1.0) {
    HostTensor h = w[0].value();
    for (int64_t i = 0; i < h.numel(); ++i) h.set(i, h.get(i) * gain);
    w[0] = Tensor::from(h);
  }
  for (size_t i = 0; i < w.size(); ++i) weights_.push_back(register_parameter("w" + std::to_string(i), w[i]));
}

synth::Binding SynthLinear::binding(int64_t rows) const {
  synth::Binding b;
  for (const synth::Var& v : spec_.primary) {
    if (v.name == "N") b.primary.push_back(rows);
    else if (v.name == "C_in") b.primary.push_back(in_);
    else if (v.name == "C_out") b.primary.push_back(out_);
    else throw Error("synthesized projection: the spec's variable '" + v.name + "' is not one of N, C_in, C_out");
  }
  return b;
}

Tensor SynthLinear::forward(const Tensor& x) {
  if (x.shape().size() != 2 || x.shape()[1] != in_)
    throw Error("synthesized projection: input must be [rows, " + std::to_string(in_) + "], got " +
                shape_str(x.shape()));
  return synth::apply(spec_, op_, binding(x.shape()[0]), x, weights_);
}

nn::ProjectionFactory projection_factory(const synth::Spec& spec, const synth::Operator* op, unsigned mask,
                                         int64_t layers) {
  if (!op || !mask) return {};
  return [spec, op = *op, mask, layers](const std::string& name, int64_t in, int64_t out,
                                        uint64_t seed) -> std::shared_ptr<nn::Module> {
    const std::vector<ProjectionClass> classes = gpt_projection_classes(1);  // for the names
    for (size_t i = 0; i < classes.size(); ++i)
      if (classes[i].name == name && (mask >> i & 1u)) {
        // GPT-2's init: std 0.02, the residual projections 0.02 / sqrt(2 layers).
        double std = name.ends_with("c_proj") ? 0.02 / std::sqrt(2.0 * double(layers)) : 0.02;
        return std::make_shared<SynthLinear>(spec, op, in, out, seed, std * std::sqrt(double(in)));
      }
    return nullptr;
  };
}

std::string to_json(const LmEvaluation& e) {
  auto finite = [](double v) { return std::isfinite(v) ? v : -1.0; };
  nlohmann::json j = {{"key", e.key},
                      {"formula", e.formula},
                      {"actions", e.actions},
                      {"family", e.family},
                      {"class_mask", e.class_mask},
                      {"failed", e.failed},
                      {"error", e.error},
                      {"val_loss", finite(e.val_loss)},
                      {"train_loss", finite(e.train_loss)},
                      {"step_ms", e.step_ms},
                      {"base_step_ms", e.base_step_ms},
                      {"params", e.params},
                      {"train_seconds", e.train_seconds},
                      {"order", e.order}};
  return j.dump();
}

LmEvaluation lm_evaluation_from_json(const std::string& line) {
  const std::string kMalformed = "lm-trials: malformed evaluation record";
  LmEvaluation e;
  try {
    auto j = nlohmann::json::parse(line);
    e.key = j.at("key");
    e.formula = j.at("formula");
    e.actions = j.at("actions");
    e.family = j.at("family");
    e.class_mask = unsigned(integer_field(j, "class_mask", 0, 15, kMalformed));
    e.failed = j.at("failed");
    e.error = j.at("error");
    e.val_loss = j.at("val_loss");
    e.train_loss = j.at("train_loss");
    e.step_ms = j.at("step_ms");
    e.base_step_ms = j.at("base_step_ms");
    e.params = j.at("params");
    e.train_seconds = j.at("train_seconds");
    e.order = integer_field(j, "order", 0, int64_t(1) << 53, kMalformed);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    throw Error(kMalformed + ": " + ex.what());
  }
  return e;
}

namespace {
double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

HostTensor tokens(const Shape& s, int64_t vocab, int64_t salt) {
  HostTensor h(DType::I64, s);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, double((i * 7919 + salt * 104729) % vocab));
  return h;
}

// A training step with its optimizer, ready to run on fixed tokens.
struct TimedStep {
  TimedStep(nn::Gpt& m, int64_t batch)
      : opt(m.parameters(), 1e-4, 0.9, 0.95, 1e-8, 0.01),
        step(train::compile_lm_train(m, opt, batch, m.cfg.context)) {
    Shape s{batch, m.cfg.context};
    step.plan().set_input("arg0", tokens(s, m.cfg.vocab, 1));
    step.plan().set_input("arg1", tokens(s, m.cfg.vocab, 2));
  }
  TimedStep(const TimedStep&) = delete;  // the step holds the optimizer's state
  TimedStep& operator=(const TimedStep&) = delete;
  double run() {
    opt.tick();
    return timed_run_ms(step);
  }
  optim::AdamW opt;
  CompiledStep step;
};
}  // namespace

std::pair<double, double> paired_step_ms(nn::Gpt& a, nn::Gpt& b, int64_t batch, int repeats) {
  ThreadPool pool(1);
  TimedStep sa(a, batch), sb(b, batch);
  std::vector<double> ta, tb;
  for (TimedStep* s : {&sa, &sb}) s->step.plan().set_pool(&pool), s->run(), s->run();  // the second recompiles
  for (int r = 0; r < std::max(repeats, 1); ++r) {  // ABBA
    if (r % 2 == 0) ta.push_back(sa.run()), tb.push_back(sb.run());
    else tb.push_back(sb.run()), ta.push_back(sa.run());
  }
  for (TimedStep* s : {&sa, &sb}) s->step.plan().set_pool(nullptr);
  return {median(ta), median(tb)};
}

namespace {
// Forward and backward of one projection on [1, rows, in], compiled; the layer lives as long.
struct ProjectionStep {
  ProjectionStep(const synth::Spec& spec, const synth::Operator* op, const ProjectionClass& c, int64_t rows)
      : layer(op ? std::make_shared<nn::Conv1D>(c.in, c.out, std::make_shared<SynthLinear>(spec, *op, c.in, c.out, 1))
                 : std::make_shared<nn::Conv1D>(c.in, c.out, 1, 0.02)),
        step(compile(
            [this](const std::vector<Tensor>& a) {
              Tensor x = a[0];
              x.requires_grad();
              Tensor y = layer->forward(x);
              (y * y).mean().backward();
              std::vector<Tensor> g = {x.grad()};
              for (const Tensor& p : layer->parameters()) g.push_back(p.grad());
              return g;
            },
            {{DType::F32, {1, rows, c.in}}})) {
    step.plan().set_input("arg0", Tensor::randn({1, rows, c.in}, 7).value());
  }
  ProjectionStep(const ProjectionStep&) = delete;  // the step's function holds `this`
  ProjectionStep& operator=(const ProjectionStep&) = delete;
  std::shared_ptr<nn::Conv1D> layer;
  CompiledStep step;
};
}  // namespace

std::vector<double> projection_ms(const synth::Spec& spec, const synth::Operator* op, int64_t rows, int repeats,
                                  double give_up) {
  ThreadPool one(1);
  std::vector<double> out;
  int64_t width = 0;
  for (size_t i = 0; i < spec.primary.size(); ++i)
    if (spec.primary[i].name == "C_in") width = synth::binding(spec, 0).primary[i];
  for (const ProjectionClass& c : gpt_projection_classes(width)) {
    ProjectionStep s(spec, op, c, rows);
    if (op && give_up > 0 &&
        cost_model_ms(s.step.plan()) > give_up * cost_model_ms(ProjectionStep(spec, nullptr, c, rows).step.plan())) {
      out.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    s.step.plan().set_pool(&one);
    s.step.run(), s.step.run();  // warm up; the second run recompiles hot groups
    std::vector<double> t;
    for (int r = 0; r < std::max(repeats, 1); ++r) t.push_back(timed_run_ms(s.step));
    s.step.plan().set_pool(nullptr);
    out.push_back(median(t));
  }
  return out;
}

LmEvaluation evaluate_lm(const synth::Spec& spec, const synth::Operator* op, unsigned mask, const LmProxyConfig& cfg) {
  LmEvaluation e;
  e.key = op ? op->canonical : "baseline";
  e.formula = op ? synth::formula(spec, *op) : "dense projections";
  e.actions = op ? synth::encode_actions(op->path) : "";
  e.class_mask = op ? mask : 0;
  try {
    train::LmConfig c;
    c.name = "lm-trials proxy";
    c.model = cfg.model;
    c.batch = cfg.batch;
    c.steps = cfg.steps;
    c.warmup_steps = std::max<int64_t>(1, cfg.steps / 10);
    c.lr = cfg.lr;
    c.seed = cfg.seed;
    c.text_file = cfg.text_file;
    c.projections = projection_factory(spec, op, mask, cfg.model.layers);
    train::LmTrainer t(c);
    std::vector<double> losses;
    auto t0 = std::chrono::steady_clock::now();
    t.train_steps(c.steps, [&](int64_t, double l) { losses.push_back(l); });
    if (losses.empty()) throw Error("no training step was run (steps must be at least 1)");
    e.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t tail = std::max<size_t>(1, losses.size() / 10);
    e.train_loss = std::accumulate(losses.end() - long(tail), losses.end(), 0.0) / double(tail);
    e.val_loss = t.validation_loss(cfg.val_batches);
    if (!std::isfinite(e.val_loss)) throw Error("the validation loss is not finite");
    e.params = double(t.model().parameter_count());
    nn::Gpt base(cfg.model, cfg.seed), cand(cfg.model, cfg.seed, c.projections);
    auto [b, a] = paired_step_ms(base, cand, cfg.batch);
    e.base_step_ms = b;
    e.step_ms = a;
  } catch (const std::exception& ex) {
    e.failed = true;
    e.error = ex.what();
  }
  return e;
}

namespace {
void write_text(const std::string& path, const std::string& what, const std::string& text) {
  io::write_file_atomic(path, what, [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

std::string classes_text(unsigned mask, const std::vector<ProjectionClass>& classes) {
  std::string s;
  for (size_t i = 0; i < classes.size(); ++i)
    if (mask >> i & 1u) s += (s.empty() ? "" : ", ") + classes[i].name;
  return s.empty() ? "none" : s;
}

void write_report(const LmTrialsConfig& cfg, const synth::Spec& spec, const LmTrialsOutcome& o,
                  const std::vector<synth::Operator>& trained) {
  const std::vector<ProjectionClass> classes = gpt_projection_classes(cfg.proxy.model.width);
  std::ostringstream r;
  r << "# GPT projection trials\n\n"
    << "Proxy: " << cfg.proxy.model.str() << "; batch " << cfg.proxy.batch << ", " << cfg.proxy.steps
    << " AdamW steps at lr " << cfg.proxy.lr << ", seed " << cfg.proxy.seed << "; validation over "
    << cfg.proxy.val_batches << " batches. Step: the compiled training step (forward, backward, AdamW), one thread, "
    << "timed alternately with the baseline's.\n\n"
    << "| # | operator | family | classes | val loss | vs baseline | step ms | speedup | params | front |\n"
    << "|---|---|---|---|---|---|---|---|---|---|\n";
  auto row = [&](const std::string& id, const LmEvaluation& e, bool front) {
    double ratio = e.step_ms > 0 ? e.base_step_ms / e.step_ms : 0;
    const std::string family = e.key == "baseline" ? "dense" : e.family.empty() ? "**new**" : e.family;
    r << "| " << id << " | `" << e.formula << "` | " << family << " | " << classes_text(e.class_mask, classes) << " | "
      << (e.failed ? "failed: " + e.error : fixed(e.val_loss, 4)) << " | "
      << (e.failed ? "" : fixed(100.0 * (e.val_loss / o.baseline.val_loss - 1.0), 2) + "%") << " | "
      << fixed(e.step_ms, 1) << " | " << fixed(ratio, 2) << "x | " << fixed(e.params, 0) << " | "
      << (front ? "yes" : "") << " |\n";
  };
  row("base", o.baseline, false);
  for (size_t i = 0; i < o.evaluations.size(); ++i)
    row(std::to_string(i), o.evaluations[i], std::find(o.pareto.begin(), o.pareto.end(), i) != o.pareto.end());
  r << "\nThe baseline's speedup compares two identical models timed against each other: the timing noise.\n"
    << "\nExported PyTorch modules (one per class binding of the front's operators): `op<i>_<class>.py`.\n";
  write_text(cfg.dir + "/report.md", "lm-trials report", r.str());
  for (size_t i : o.pareto)
    for (size_t b = 0; b < classes.size(); ++b)
      if (o.evaluations[i].class_mask >> b & 1u) {
        std::string name = classes[b].name;
        std::replace(name.begin(), name.end(), '.', '_');
        std::string path = cfg.dir + "/op" + std::to_string(i) + "_" + name + ".py";
        write_text(path, "exported operator", synth::pytorch_module(spec, trained[i], synth::binding(spec, b)));
      }
}

// Trains and times the baseline and each operator in its classes, finds the front, writes the
// log, the report and the front's modules.
LmTrialsOutcome evaluate_and_report(const LmTrialsConfig& cfg, const synth::Spec& spec,
                                    const std::vector<synth::Operator>& trained, const std::vector<unsigned>& masks,
                                    const std::function<void(const std::string&)>& say,
                                    std::chrono::steady_clock::time_point t0) {
  const std::vector<ProjectionClass> classes = gpt_projection_classes(cfg.proxy.model.width);
  std::filesystem::create_directories(cfg.dir);
  LmTrialsOutcome o;
  std::string log;
  o.baseline = evaluate_lm(spec, nullptr, 0, cfg.proxy);
  if (o.baseline.failed) throw Error("lm-trials: the baseline failed: " + o.baseline.error);
  log += to_json(o.baseline) + "\n";
  say("baseline: val loss " + fixed(o.baseline.val_loss, 4) + ", step " + fixed(o.baseline.step_ms, 1) + " ms");
  std::vector<std::string> family = synth::known_family_names(spec, trained, synth::known_families(spec));
  for (size_t i = 0; i < trained.size(); ++i) {
    LmEvaluation e = evaluate_lm(spec, &trained[i], masks[i], cfg.proxy);
    e.family = family[i];
    e.order = int64_t(i + 1);
    log += to_json(e) + "\n";
    say(e.formula + " in " + classes_text(e.class_mask, classes) + ": " +
        (e.failed ? "failed: " + e.error
                  : "val loss " + fixed(e.val_loss, 4) + ", step " + fixed(e.step_ms, 1) + " ms against " +
                        fixed(e.base_step_ms, 1)));
    o.evaluations.push_back(std::move(e));
  }
  // The front: no other run, the baseline (step ratio 1) included, is at least as good in
  // validation loss and in step ratio and better in one.
  auto ratio = [](const LmEvaluation& e) { return e.step_ms / e.base_step_ms; };
  auto dominates = [](double loss, double r, double loss_e, double r_e) {
    return loss <= loss_e && r <= r_e && (loss < loss_e || r < r_e);
  };
  for (size_t i = 0; i < o.evaluations.size(); ++i) {
    const LmEvaluation& e = o.evaluations[i];
    if (e.failed) continue;
    bool dominated = dominates(o.baseline.val_loss, 1.0, e.val_loss, ratio(e));
    for (const LmEvaluation& f : o.evaluations)
      if (&f != &e && !f.failed && dominates(f.val_loss, ratio(f), e.val_loss, ratio(e))) dominated = true;
    if (!dominated) o.pareto.push_back(i);
  }
  write_text(cfg.dir + "/lm_evaluations.jsonl", "lm-trials log", log);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_report(cfg, spec, o, trained);
  return o;
}
}  // namespace

LmTrialsOutcome run_lm_trials(const LmTrialsConfig& cfg) {
  auto t0 = std::chrono::steady_clock::now();
  auto say = [&](const std::string& s) {
    if (cfg.log) cfg.log(s);
  };
  const int64_t C = cfg.proxy.model.width, rows = cfg.proxy.batch * cfg.proxy.model.context;
  const std::vector<ProjectionClass> classes = gpt_projection_classes(C);
  synth::Spec spec = gpt_linear_spec(C);
  synth::Options so;
  so.max_depth = cfg.actions.empty() ? cfg.depth : 12;
  synth::Synthesizer syn(spec, so);
  if (!cfg.actions.empty()) {
    if (cfg.mask == 0 || cfg.mask > 15) throw Error("lm-trials: the mask of an operator must be in [1, 15]");
    synth::Operator op = synth::build_from_actions(syn, parse_actions(cfg.actions));
    return evaluate_and_report(cfg, spec, {op}, {cfg.mask}, say, t0);
  }
  synth::EnumResult en = synth::enumerate(syn, true);
  say("enumerated " + std::to_string(en.operators.size()) + " canonical operators up to depth " +
      std::to_string(cfg.depth));

  // Below the dense FLOPs with enough weights in every class. Operators with the same weights and
  // FLOPs in every class (spellings of one layer, or shifted variants) are one proposal: the one
  // whose lowered projections the fixed-rate cost model puts lowest (a gather of x per output
  // channel costs more than a reshape). Most weights first.
  struct Proposal {
    size_t op;
    double params = 0, flops = 0, estimate = 0;
    std::vector<double> class_params;
  };
  std::vector<Proposal> props;
  std::map<std::vector<double>, size_t> bucket;  // (weights, FLOPs) per class -> index into props
  for (size_t i = 0; i < en.operators.size(); ++i) {
    Proposal p{i, 0, 0, 0, {}};
    std::vector<double> sig;
    bool ok = true;
    for (size_t b = 0; b < classes.size() && ok; ++b) {
      synth::Stats st = synth::stats(spec, en.operators[i], synth::binding(spec, b));
      double dense = double(classes[b].in * classes[b].out);
      ok = st.flops < 2.0 * 64 * dense && st.params >= cfg.min_params_ratio * dense;
      p.params += st.params, p.flops += st.flops;
      p.class_params.push_back(st.params);
      sig.push_back(st.params), sig.push_back(st.flops);
    }
    if (!ok) continue;
    try {
      for (const ProjectionClass& c : classes)
        p.estimate += cost_model_ms(ProjectionStep(spec, &en.operators[i], c, 64).step.plan());
    } catch (const std::exception& ex) {
      say("skipped " + synth::formula(spec, en.operators[i]) + ": " + ex.what());
      continue;
    }
    auto [it, fresh] = bucket.emplace(sig, props.size());
    if (fresh) props.push_back(p);
    else if (p.estimate < props[it->second].estimate) props[it->second] = p;
  }
  std::stable_sort(props.begin(), props.end(), [](const Proposal& a, const Proposal& b) {
    return a.params != b.params ? a.params > b.params : a.flops < b.flops;
  });
  if (int64_t(props.size()) > cfg.screened) props.resize(size_t(cfg.screened));
  say(std::to_string(props.size()) + " operators to screen");

  ClassTimes t;
  t.conv_ms = projection_ms(spec, nullptr, rows);
  t.per_class.assign(classes.size(), int(cfg.proxy.model.layers));
  for (const ProjectionClass& c : classes) t.conv_weights.push_back(double(c.in * c.out));
  {
    nn::Gpt a(cfg.proxy.model, cfg.proxy.seed), b(cfg.proxy.model, cfg.proxy.seed);
    t.base_ms = paired_step_ms(a, b, cfg.proxy.batch).first;
  }
  struct Screened {
    size_t prop;
    ClassChoice choice;
  };
  std::vector<Screened> screened;
  for (size_t i = 0; i < props.size(); ++i) {
    const synth::Operator& op = en.operators[props[i].op];
    try {
      t.op_ms = projection_ms(spec, &op, rows, 5, 2.0);
    } catch (const std::exception& ex) {
      say("skipped " + synth::formula(spec, op) + ": " + ex.what());
      continue;
    }
    t.op_weights = props[i].class_params;
    // Only the classes where the operator is measured faster than the dense product (a class
    // given up is not); an operator faster in none is not trained.
    unsigned faster = 0;
    for (size_t c = 0; c < classes.size(); ++c)
      if (std::isfinite(t.op_ms[c]) && t.op_ms[c] < t.conv_ms[c]) faster |= 1u << c;
    if (!faster) {
      say("screened " + synth::formula(spec, op) + ": faster in no class");
      continue;
    }
    ClassChoice ch = weight_keeping_classes(t, faster, cfg.step_target);
    screened.push_back({i, ch});
    say("screened " + synth::formula(spec, op) + ": classes " + classes_text(ch.mask, classes) + ", predicted step " +
        fixed((t.base_ms - ch.saved_ms) / t.base_ms, 3) + "x the baseline's" + (ch.meets ? "" : " (misses)"));
  }
  // Those predicted to meet the target first, the most weights kept first; then the most time saved.
  std::stable_sort(screened.begin(), screened.end(), [](const Screened& a, const Screened& b) {
    if (a.choice.meets != b.choice.meets) return a.choice.meets;
    if (a.choice.meets) return a.choice.weights > b.choice.weights;
    return a.choice.saved_ms > b.choice.saved_ms;
  });
  if (int64_t(screened.size()) > cfg.candidates) screened.resize(size_t(cfg.candidates));

  std::vector<synth::Operator> trained;
  std::vector<unsigned> masks;
  for (const Screened& sc : screened)
    trained.push_back(en.operators[props[sc.prop].op]), masks.push_back(sc.choice.mask);
  return evaluate_and_report(cfg, spec, trained, masks, say, t0);
}

}  // namespace synoros::trials
