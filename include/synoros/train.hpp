// Training loops over compiled steps: image classifiers (MLP, LeNet, ResNetMini) and the byte
// language model, with the step (forward, backward, optimizer update) captured once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "synoros/checkpoint.hpp"
#include "synoros/distributed.hpp"
#include "synoros/gpt.hpp"
#include "synoros/lora.hpp"
#include "synoros/nn.hpp"
#include "synoros/optim.hpp"

namespace synoros::train {

// A checkpoint's record of how its bits were made: "kernels" = "default" or "fast" (part of
// run_metadata(), so a resume in the other mode is refused), and in fast mode "kernel_choices",
// every kernel selection the process made (kernels::recorded_choices()).
void record_kernel_choices(io::Metadata& md);
// A trainer's checkpoint: the tensors and `md` completed with the kernel record, the format
// version and the step, written atomically.
void save_run_checkpoint(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         io::Metadata md, int64_t step);
// In fast mode, a trainer's step compiled again (by `compile`, into fused and dp) with the kernel
// choices a checkpoint recorded, ahead of the tuning cache and of measuring; true when it was.
// Call it before changing any state: a record this build cannot honour is an error that leaves
// the trainer as it was. False, and nothing compiled, when there is nothing to replay.
using StepCompiler = std::function<void(std::unique_ptr<CompiledStep>&, std::unique_ptr<dist::DataParallelStep>&)>;
bool compile_replayed(const io::Metadata& md, const std::string& path, const StepCompiler& compile,
                      std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp);

// Throws Error "WHO: the loss became L at step S of TOTAL (HINT)" unless `loss` is finite; `step`
// counts from 1, as progress lines do.
void check_finite_loss(const std::string& who, double loss, int64_t step, int64_t total, const std::string& hint);
// The hint for a trainer's non-finite loss: clipping only when gradients are not clipped.
inline const char* non_finite_hint(double clip) {
  return clip > 0 ? "lower the learning rate" : "lower the learning rate or clip the gradients";
}

// "mlp", "lenet", "resnet-mini": classifiers of [N, 1, 28, 28] images into `classes`.
std::shared_ptr<nn::Module> make_classifier(const std::string& name, int64_t classes, uint64_t seed);

// One training step over (images [B, 1, 28, 28] f32, labels [B] i64): returns {loss, logits};
// the module is put in training mode.
CompiledStep compile_classifier_train(nn::Module& model, optim::Optimizer& opt, int64_t batch);
// Inference over images [B, 1, 28, 28]: returns {logits}; the module is put in eval mode.
CompiledStep compile_classifier_eval(nn::Module& model, int64_t batch);

// Language-model step over (tokens [B, T] i64, targets [B, T] i64): returns {loss}.
CompiledStep compile_lm_train(nn::Gpt& model, optim::Optimizer& opt, int64_t batch, int64_t context);
// The mean cross-entropy of one batch, for a traced step: model(tokens) against targets.
Tensor lm_loss(nn::Gpt& model, const Tensor& tokens, const Tensor& targets);
CompiledStep compile_lm_eval(nn::Gpt& model, int64_t batch, int64_t context);

}  // namespace synoros::train

#include <functional>
#include <memory>

namespace synoros::data {
struct ImageDataset;
class Loader;
}  // namespace synoros::data

namespace synoros::train {

struct ClassifierConfig {
  std::string model = "resnet-mini";
  std::string optimizer = "sgd";  // sgd | adamw
  int64_t epochs = 1, batch = 64;
  double lr = 0.05, momentum = 0.9, weight_decay = 5e-4, clip = 0;
  int64_t warmup_steps = 0;
  bool cosine = true;     // cosine decay over all steps after the warmup
  bool augment = false;   // random crop (pad 2) and horizontal flip
  uint64_t seed = 1;
  int64_t train_limit = 0, test_limit = 0;  // 0: the whole split
  // Evaluation only: the training split is not read, so a directory with the test files alone
  // serves. No training step is compiled, the batch is clamped to the test images, and
  // train_steps() and save() throw Error.
  bool evaluate_only = false;
  std::string data_dir;                       // "": the default Fashion-MNIST directory
  int64_t steps = 0;                          // > 0: the schedule's length in steps (else epochs)
  // Saved with checkpoints and checked on resume, e.g. the searched operator a model was built with.
  std::map<std::string, std::string> extra;
  // Data-parallel training: the global batch is cut into `shards` micro-shards of batch / shards
  // images, whose gradients are folded in a fixed order (synoros/distributed.hpp); the group's
  // ranks share the micro-shards. The bits depend on `shards`, never on the group's size. With
  // shards = 1 and no group, one fused step runs the whole batch.
  int64_t shards = 1;
  std::shared_ptr<dist::ProcessGroup> group;  // null: this process alone
};

struct EpochStats {
  int64_t epoch = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0, seconds = 0;
};

// Trains an image classifier on Fashion-MNIST through one compiled step. Everything that
// decides the next step (parameters, optimizer state, step count, data order) is a function
// of the seed and the step, so a run resumed from a checkpoint continues bit for bit.
class ClassifierTrainer {
 public:
  explicit ClassifierTrainer(ClassifierConfig cfg);
  // Trains `model` (a classifier of [N, 1, 28, 28] images) instead of cfg.model's built-in one;
  // cfg.model still names it in checkpoints.
  ClassifierTrainer(ClassifierConfig cfg, std::shared_ptr<nn::Module> model);
  ~ClassifierTrainer();
  // Runs up to `n` training steps (stopping at the end of the schedule); on_step(step, loss)
  // after each. Returns the number run.
  int64_t train_steps(int64_t n, const std::function<void(int64_t, double)>& on_step = {});
  // Loss and accuracy over the test split (eval mode).
  std::pair<double, double> evaluate();
  int64_t step() const { return step_; }
  int64_t steps_per_epoch() const;
  int64_t total_steps() const { return cfg_.steps > 0 ? cfg_.steps : steps_per_epoch() * cfg_.epochs; }
  nn::Module& model() { return *model_; }
  optim::Optimizer& optimizer() { return *opt_; }
  const ClassifierConfig& config() const { return cfg_; }
  // The data-parallel step (shards > 1 or several ranks), else null: its times and layout.
  const dist::DataParallelStep* data_parallel() const { return dp_.get(); }
  // Model, optimizer state, progress and the run's configuration in one safetensors file
  // (written atomically). load checks names, shapes and the model kind; with `resume` it also
  // refuses a checkpoint whose configuration (batch, seed, data, schedule, ...) differs from this
  // trainer's, naming the field, since the continued run would not be the one it claims to be.
  void save(const std::string& path);
  void load(const std::string& path, bool resume = true);
  std::map<std::string, std::string> run_metadata() const;
  // Running means over the steps since the last reset.
  double mean_loss() const { return seen_ ? loss_sum_ / double(seen_) : 0; }
  double mean_acc() const { return seen_ ? double(correct_) / double(seen_) : 0; }
  void reset_means() { loss_sum_ = 0, correct_ = 0, seen_ = 0; }

 private:
  ClassifierConfig cfg_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::shared_ptr<const data::ImageDataset> train_set_, test_set_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<CompiledStep> step_fn_;
  std::unique_ptr<dist::DataParallelStep> dp_;  // shards > 1 or a group of several ranks
  void compile_step(std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp);
  std::vector<std::unique_ptr<CompiledStep>> eval_fns_;  // full batches, then the tail
  HostTensor images_, labels_;
  int64_t step_ = 0;
  double loss_sum_ = 0;
  int64_t correct_ = 0, seen_ = 0;
};

}  // namespace synoros::train

namespace synoros::train {

struct LmConfig {
  std::string name = "gpt-tiny";  // the configuration's name, recorded in checkpoints
  nn::GptConfig model = nn::GptConfig::preset("gpt-tiny");
  int64_t batch = 16, steps = 1000, warmup_steps = 50;
  double lr = 3e-3, weight_decay = 0.01, clip = 1.0;
  uint64_t seed = 1;
  std::string data_dir;   // "": the default fortunes directory
  std::string text_file;  // when set: train on this file's bytes instead of the fortunes
  // Fine-tuning: the base model's file (anything nn::Gpt::load reads); its sizes replace `model`.
  std::string base;
  // With a base: LoRA adapters of this configuration train and the base stays frozen (none:
  // every parameter trains).
  std::optional<nn::LoraConfig> lora;
  int64_t sequence = 0;  // training window length (0: the model's context)
  // Gradient accumulation: micro-batches of `batch` windows per optimizer step (the step's
  // windows are the same as one batch of accum x batch; the gradient is the mean of the
  // micro-batches' means, folded in micro-batch order). The micro-batches are the micro-shards of
  // data-parallel training: the group's ranks share them, and the bits depend on `accum` only.
  int64_t accum = 1;
  // Activation checkpointing per block (nn::Gpt::checkpoint_blocks): less memory, one more
  // forward pass of the blocks, the same bits.
  bool checkpoint_activations = false;
  std::shared_ptr<dist::ProcessGroup> group;  // null: this process alone
  // Other operators in place of the projections' dense products (operator trials); not with a base.
  nn::ProjectionFactory projections;
  // Recorded in checkpoints and checked on resume (what `projections` holds, for instance).
  std::map<std::string, std::string> extra;
  int64_t seq() const { return sequence > 0 ? sequence : model.context; }
};

// Trains a GPT (gpt-tiny by default) on bytes (the fortunes, or any text file) with AdamW, warmup
// and cosine decay and gradient clipping (random windows of the training split).
class LmTrainer {
 public:
  explicit LmTrainer(LmConfig cfg);
  ~LmTrainer();
  int64_t train_steps(int64_t n, const std::function<void(int64_t, double)>& on_step = {});
  // Mean loss (nats per byte) over up to `max_batches` sequential validation windows.
  double validation_loss(int64_t max_batches = 8);
  // The unigram entropy of the training bytes: the loss of the best context-free model.
  double unigram_baseline() const { return unigram_; }
  // Samples `n` bytes after the last `context` bytes of `prompt` (temperature > 0; seeded).
  std::string generate(const std::string& prompt, int64_t n, double temperature, uint64_t seed);
  int64_t step() const { return step_; }
  nn::Gpt& model() { return *model_; }
  // The adapters when fine-tuning with LoRA, else null.
  nn::GptLora* lora() { return lora_.get(); }
  optim::Optimizer& optimizer() { return *opt_; }
  const LmConfig& config() const { return cfg_; }
  // The data-parallel step (accum > 1 or several ranks), else null: its times and layout.
  const dist::DataParallelStep* data_parallel() const { return dp_.get(); }
  // The optimizer state with the model's parameters (or, with LoRA, the adapters: "lora." + PEFT's
  // names; the frozen base is named by its file and a hash of its values in the metadata).
  void save(const std::string& path);
  // With `resume`, refuses a checkpoint of another configuration (naming the field); without,
  // only the model's shape must agree (evaluation).
  void load(const std::string& path, bool resume = true);
  std::map<std::string, std::string> run_metadata() const;

 private:
  LmConfig cfg_;
  std::vector<std::pair<std::string, Tensor>> state() const;
  std::shared_ptr<nn::Gpt> model_;
  std::unique_ptr<nn::GptLora> lora_;
  std::string base_hash_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::shared_ptr<const std::vector<uint8_t>> train_, val_;
  double unigram_ = 0;
  void compile_step(std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp);
  std::unique_ptr<CompiledStep> step_fn_, val_fn_;
  std::unique_ptr<dist::DataParallelStep> dp_;  // accum > 1 or a group of several ranks
  std::unique_ptr<nn::GptGenerator> gen_;
  HostTensor x_, y_;
  int64_t step_ = 0;
};

}  // namespace synoros::train
