// Operator trials, the engine's operator search with real training and measured latency: candidates from the synthesizer
// replace the stride-1 3x3 convolutions of ResNetMini, are trained on a Fashion-MNIST proxy and
// timed as compiled plans of the whole network; a Pareto front of accuracy against latency and a
// scalarized reward with a stated latency target rank them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "synoros/nn.hpp"
#include "synoros/synth.hpp"

namespace synoros::trials {

// The layer spec of ResNetMini's replaceable convolutions: [N, C, H, W] -> [N, C, H, W] with
// k=3, g=4, s=2 and one binding per layer class (C, H) = (w, 28), (2w, 14), (4w, 7).
synth::Spec resnet_conv_spec(int64_t width = 16);
// The size classes of those layers, in binding order, and how many layers of each the network has.
std::vector<std::pair<int64_t, int64_t>> resnet_layer_classes(int64_t width = 16);
std::vector<int> layers_per_class(int64_t width = 16);

// A synthesized operator as a layer: weights are parameters "w0", "w1", ... initialised with the
// synthesizer's fan-in scheme; the binding follows the input's shape at every call.
class SynthLayer : public nn::Module {
 public:
  SynthLayer(const synth::Spec& spec, const synth::Operator& op, int64_t channels, int64_t size, uint64_t seed);
  Tensor forward(const Tensor& x) override;

 private:
  synth::Spec spec_;
  synth::Operator op_;
  std::vector<Tensor> weights_;
};

// ResNetMini whose stride-1 3x3 convolutions of the classes set in `class_mask` (bit i: binding
// i of the spec) are `op`; null op: the plain convolutional baseline.
std::shared_ptr<nn::ResNetMini> make_network(const synth::Spec& spec, const synth::Operator* op, unsigned class_mask,
                                             uint64_t seed, int64_t width = 16);

// ResNetMini with the operator of a serialized action path (as in evaluations.jsonl and the
// report) in the layer classes of `mask`; the search's own spec at `width`.
std::shared_ptr<nn::ResNetMini> network_from_actions(const std::string& actions, unsigned mask, uint64_t seed,
                                                     int64_t width = 16, int max_depth = 12);
// Throws Error unless `mask` names at least one of resnet-mini's layer classes and no other
// bit: a --mask typed for a classifier's searched operator (network_from_actions itself ignores
// bits past the classes, as checkpoints that recorded such a mask were trained).
void check_class_mask(unsigned mask);

// How many spatial positions of the output an impulse at the centre of the input reaches (all
// channels set, positive weights so nothing cancels), at the spec's binding 0: 9 for a 3x3 or a
// depthwise 3x3 window, 3 for a 1x3 row, 1 for a pointwise layer. The layers the search replaces
// are the network's spatial mixers, so among operators that reach the latency target the ones
// that keep more of that mixing are trained first.
int64_t spatial_footprint(const synth::Spec& spec, const synth::Operator& op);

struct Latency {
  double b1_t1 = 0, b64_t1 = 0, b1_t2 = 0, b64_t2 = 0;  // ms per forward pass (eval mode), medians
};
// How the functions below time a compiled plan (ms per run). Unset (the default): each plan is
// run and timed with a steady clock. A set timer replaces every measurement, so a search's
// outcome can be made independent of the machine's load (tests, dry runs).
using PlanTimer = std::function<double(const Plan&)>;
void set_plan_timer(PlanTimer timer);
// A deterministic estimate: every op's FLOPs and bytes at fixed rates (100 GFLOP/s, 20 GB/s).
double cost_model_ms(const Plan& plan);
// One run of a compiled step and its time in ms, measured with a steady clock; when a plan timer
// is set, its figure for the plan instead (the step is not run).
double timed_run_ms(CompiledStep& step);

// Times the compiled inference plan of `net` at batch 1 and 64 on one and two threads.
Latency measure_latency(nn::Module& net, int repeats = 5);
// Forward times (ms, medians; batch 64 and one thread unless told) of two networks, run
// alternately (ABBA) so both see the same machine state: {a, b}.
std::pair<double, double> paired_latency(nn::Module& a, nn::Module& b, int repeats = 7, int threads = 1,
                                         int64_t batch = 64);
// Forward time (ms, batch 64, one thread) of one layer of each class: the operator against the
// 3x3 convolution it would replace. With `give_up_ms`, a class whose first run takes longer than
// its limit ends the timing: that time is returned for it and every class after it.
std::vector<double> layer_latency(const synth::Spec& spec, const synth::Operator* op, int repeats = 5,
                                  int64_t batch = 64, const std::vector<double>* give_up_ms = nullptr);

struct ProxyConfig {
  int64_t train_images = 4096, test_images = 2000, epochs = 1, batch = 64;
  int64_t width = 16;  // ResNetMini's first-stage channels (the spec's must match)
  double lr = 0.05;
  uint64_t seed = 1;
  bool augment = false;
};

struct Evaluation {
  std::string key;      // the operator's canonical form ("baseline" for the convolution)
  std::string formula;  // human-readable
  std::string actions;  // serialized action path (replayable)
  bool failed = false;
  std::string error;
  unsigned class_mask = 0;  // layer classes that use the operator
  double accuracy = 0, loss = 0;
  int64_t trained_epochs = 0;
  Latency latency;
  // The baseline's b64_t1 timed interleaved with this network's (same minute of this noisy
  // machine); 0 when not measured. The speedup is read from this pair when present.
  double paired_base_b64_t1 = 0;
  double flops = 0, params = 0;  // of the whole network
  double train_seconds = 0;
  double reward = 0;
  int64_t order = 0;  // completion order (for "best reward over time")
};

// Baseline latency over this network's latency (batch 64, one thread): from the paired
// measurement when there is one, else against `baseline`'s own.
double speedup(const Evaluation& e, const Evaluation& baseline);

std::string to_json(const Evaluation& e);
Evaluation evaluation_from_json(const std::string& line);

// Action paths as text (so worker processes can rebuild an operator).
std::string serialize_actions(const std::vector<synth::Action>& path);
std::vector<synth::Action> parse_actions(const std::string& text);

// Trains and times one candidate (null op: the baseline). Never throws for a bad candidate: a
// crash inside, a non-finite loss or an unusable operator is returned as failed.
Evaluation evaluate(const synth::Spec& spec, const synth::Operator* op, unsigned class_mask, const ProxyConfig& cfg);

// One worker run: the evaluation record a worker wrote (`synoros trials-worker` runs one), or
// why there is none.
struct WorkerResult {
  bool ok = false;
  std::string line;   // the evaluation record (when ok)
  std::string error;  // why not (when !ok)
  std::string where;  // who ran it ("local", "rank 1", ...)
};
struct TrialsConfig {
  int64_t width = 16;
  int depth = 6;
  uint64_t mcts_iterations = 3000;
  bool enumerate = false;        // propose every canonical operator up to `depth` instead of MCTS
  double min_params_ratio = 1.0 / 32;  // an operator's parameters at least this x the 3x3 conv's
  int64_t screened = 24;         // distinct operators whose layer latency is measured
  int64_t candidates = 6;        // operators trained in the first round of successive halving
  int64_t rounds = 2;            // halving rounds (each doubles the training budget)
  double latency_target = 1.0 / 1.5;  // network latency / baseline latency aimed at
  double latency_weight = 0.1;   // reward = accuracy - weight * max(0, latency ratio / target - 1)
  ProxyConfig proxy;
  uint64_t seed = 1;
  std::string dir = "trials";    // evaluations.jsonl (resumable), mcts.state, report files
  // Where the jobs' argument lists (a `synoros trials-worker` command line each) are trained,
  // one result per job in order; unset: in this process, one after another. The command line
  // tool sets it to run worker processes (crash-isolated) or to hand jobs to other MPI ranks.
  std::function<std::vector<WorkerResult>(const std::vector<std::vector<std::string>>&)> run_workers;
  std::function<void(const std::string&)> log;  // progress lines
};

struct TrialsOutcome {
  Evaluation baseline;
  std::vector<Evaluation> evaluations;  // every finished one, in completion order
  std::vector<size_t> pareto;           // indices into evaluations: the accuracy/latency front
  double seconds = 0;
};

// Screening's prediction of a network in which an operator replaces the 3x3 convolutions of
// some layer classes: per class (binding order) the convolution's and the operator's layer time
// (ms, batch 64), layers in the network, and weights per layer; the baseline network's time.
struct ClassTimes {
  std::vector<double> conv_ms, op_ms;
  std::vector<int> per_class;
  std::vector<double> conv_weights, op_weights;
  double base_ms = 0;
};
struct ClassChoice {
  unsigned mask = 0;     // classes that take the operator
  double saved_ms = 0;   // predicted time saved per batch
  double weights = 0;    // weights of the replaceable layers (operator's and convolutions kept)
  bool meets = false;    // predicted network time <= latency_target x the baseline's
};
ClassChoice predict_classes(const ClassTimes& t, unsigned mask, double latency_target);
// A different operator per layer class: of the non-empty subsets of `classes` predicted to meet
// the target, the one that keeps the most weights (ties: the most time saved); `classes` itself
// when it does not meet the target or no subset keeps more. The full training of the depthwise
// 3x3 operator in every class underfit (91.5% training accuracy against the baseline's 93.1%),
// so the capacity a subset keeps is worth trying when the latency budget allows it.
ClassChoice weight_keeping_classes(const ClassTimes& t, unsigned classes, double latency_target);
double reward(const Evaluation& e, const Evaluation& baseline, const TrialsConfig& cfg);
TrialsOutcome run_trials(const TrialsConfig& cfg);
}  // namespace synoros::trials
