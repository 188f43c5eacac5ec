// Operator trials on the GPT: synthesized operators replace the dense products of the blocks'
// four projections (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj), chosen per projection class,
// are proxy-trained on text and timed as compiled training steps of the whole model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "synoros/gpt.hpp"
#include "synoros/synth.hpp"
#include "synoros/trials.hpp"

namespace synoros::trials {

// A projection class of the GPT's blocks: its name and features, in block order.
struct ProjectionClass {
  std::string name;
  int64_t in = 0, out = 0;
};
std::vector<ProjectionClass> gpt_projection_classes(int64_t width);

// The spec of a linear layer [N, C_in] -> [N, C_out] with one binding per projection class at
// `width` (N = `rows`), coefficients g = 4 and h = 2, and Syno's usage caps for channels (4).
synth::Spec gpt_linear_spec(int64_t width, int64_t rows = 64);

// A synthesized operator as the product of a projection: [rows, in] -> [rows, out], weights
// "w0", "w1", ... initialised by the synthesizer's fan-in scheme with the first weight scaled by
// `gain` (the output's standard deviation for unit-variance input; GPT-2's dense init gives
// 0.02 * sqrt(in)).
class SynthLinear : public nn::Module {
 public:
  SynthLinear(const synth::Spec& spec, const synth::Operator& op, int64_t in, int64_t out, uint64_t seed,
              double gain = 1.0);
  Tensor forward(const Tensor& x) override;

 private:
  synth::Binding binding(int64_t rows) const;
  synth::Spec spec_;
  synth::Operator op_;
  int64_t in_, out_;
  std::vector<Tensor> weights_;
};

// The factory that puts `op` in the projection classes of `mask` (bit i: class i of
// gpt_projection_classes); null op or empty mask: no replacement.
nn::ProjectionFactory projection_factory(const synth::Spec& spec, const synth::Operator* op, unsigned mask,
                                         int64_t layers);

struct LmProxyConfig {
  // The 11M configuration's width and heads (so the projection classes have its shapes), two
  // blocks and a short context: a proxy that trains in about a minute on one core.
  nn::GptConfig model = {256, 64, 384, 6, 2};
  int64_t batch = 16, steps = 150, val_batches = 16;
  double lr = 1e-3;
  uint64_t seed = 1;
  std::string text_file;  // "": the fortunes
};

struct LmEvaluation {
  std::string key;      // canonical form ("baseline": the dense projections)
  std::string formula;
  std::string actions;  // serialized action path
  std::string family;   // the known family it belongs to, "" when new or the baseline
  unsigned class_mask = 0;
  bool failed = false;
  std::string error;
  double val_loss = 0, train_loss = 0;  // nats per byte (train: mean of the last tenth of the steps)
  double step_ms = 0, base_step_ms = 0;  // training step, timed alternately with the baseline's
  double params = 0;                     // of the whole model
  double train_seconds = 0;
  int64_t order = 0;
};
std::string to_json(const LmEvaluation& e);
LmEvaluation lm_evaluation_from_json(const std::string& line);

// One GPT training step (forward, backward, AdamW) compiled for (batch, context) and timed, ABBA
// against a second model: {a, b} ms, medians. The plan timer of trials.hpp replaces measurements.
std::pair<double, double> paired_step_ms(nn::Gpt& a, nn::Gpt& b, int64_t batch, int repeats = 5);
// Forward and backward of one projection of each class with `op` (null: the dense product) on
// [rows, in]: ms per class, one thread. With `give_up` > 0, a class whose plan the fixed-rate cost
// model (cost_model_ms) puts above give_up x the dense plan's is not run: its time is infinite.
std::vector<double> projection_ms(const synth::Spec& spec, const synth::Operator* op, int64_t rows, int repeats = 5,
                                  double give_up = 0);

// Trains the proxy with `op` in the classes of `mask` (null: the baseline) and times its step
// against the baseline's. Never throws for a bad candidate: it is returned as failed.
LmEvaluation evaluate_lm(const synth::Spec& spec, const synth::Operator* op, unsigned mask, const LmProxyConfig& cfg);

struct LmTrialsConfig {
  int depth = 6;
  int64_t screened = 24;           // operators whose projection times are measured
  int64_t candidates = 4;          // operators trained
  double min_params_ratio = 1.0 / 16;  // per class, against the dense product's weights
  double step_target = 1.0 / 1.3;      // training step / baseline step aimed at
  LmProxyConfig proxy;
  std::string dir = "lm-trials";   // lm_evaluations.jsonl, report.md, exported modules
  // When set: no search, the baseline and this operator (an action path on the linear spec) in the
  // classes of `mask` are trained and timed (a longer run, a larger model).
  std::string actions;
  unsigned mask = 0;
  std::function<void(const std::string&)> log;
};

struct LmTrialsOutcome {
  LmEvaluation baseline;
  std::vector<LmEvaluation> evaluations;
  std::vector<size_t> pareto;  // validation loss against step time
  double seconds = 0;
};

// Enumerates the linear spec's canonical operators to `depth`, keeps those below the dense FLOPs
// with at least min_params_ratio of its weights in every class, measures the projection times of
// the `screened` with the most weights (an operator that fails to build or run is skipped and
// logged), picks per operator, among the classes where it is measured faster than the dense
// product, those that keep the most weights while the predicted step meets the target
// (weight_keeping_classes), trains the `candidates` that keep the most weights and the baseline,
// and writes the report; the front counts the baseline (step ratio 1) as a competitor. With
// `actions`: no enumeration or screening, only the baseline and that operator in `mask`.
LmTrialsOutcome run_lm_trials(const LmTrialsConfig& cfg);

}  // namespace synoros::trials
