// The Fashion-MNIST classifier trainer: data order, schedule and checkpoints.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "synoros/checkpoint.hpp"
#include "synoros/data.hpp"
#include "synoros/train.hpp"
#include "kernels/providers.hpp"

namespace synoros::train {

namespace {
constexpr int64_t kEvalBatch = 500;

double host_cross_entropy(const HostTensor& logits, const HostTensor& labels, int64_t rows) {
  int64_t k = logits.shape[1];
  double total = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, logits.get(i * k + j));
    double se = 0;
    for (int64_t j = 0; j < k; ++j) se += std::exp(logits.get(i * k + j) - mx);
    total += std::log(se) + mx - logits.get(i * k + int64_t(labels.get(i)));
  }
  return total;
}
}  // namespace

void record_kernel_choices(io::Metadata& md) {
  md["kernels"] = fast_mode() ? "fast" : "default";
  if (fast_mode()) md["kernel_choices"] = kernels::recorded_choices();
}

void check_finite_loss(const std::string& who, double loss, int64_t step, int64_t total, const std::string& hint) {
  if (!std::isfinite(loss))
    throw Error(who + ": the loss became " + std::to_string(loss) + " at step " + std::to_string(step) + " of " +
                std::to_string(total) + " (" + hint + ")");
}

void save_run_checkpoint(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         io::Metadata md, int64_t step) {
  record_kernel_choices(md);
  md[io::kFormatKey] = io::kFormatVersion;
  md["step"] = std::to_string(step);
  io::save_safetensors(path, tensors, md);
}

bool compile_replayed(const io::Metadata& md, const std::string& path, const StepCompiler& compile,
                      std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp) {
  auto it = md.find("kernel_choices");
  if (!fast_mode() || it == md.end()) return false;
  kernels::replay_choices(it->second, "checkpoint '" + path + "'");
  try {
    compile(fused, dp);
  } catch (...) {
    kernels::clear_replayed_choices();
    throw;
  }
  return true;
}

ClassifierTrainer::ClassifierTrainer(ClassifierConfig cfg) : ClassifierTrainer(std::move(cfg), nullptr) {}

ClassifierTrainer::ClassifierTrainer(ClassifierConfig cfg, std::shared_ptr<nn::Module> model)
    : cfg_(std::move(cfg)), model_(std::move(model)) {
  if (cfg_.epochs < 1 || cfg_.batch < 1) throw Error("train: epochs and batch size must be >= 1");
  if (cfg_.lr <= 0) throw Error("train: the learning rate must be > 0");
  auto limit = [](int64_t l) { return l > 0 ? std::optional<int64_t>(l) : std::nullopt; };
  test_set_ = std::make_shared<data::ImageDataset>(
      data::load_fashion_mnist(cfg_.data_dir, data::Split::Test, limit(cfg_.test_limit)));
  train_set_ = cfg_.evaluate_only ? test_set_
                                  : std::make_shared<data::ImageDataset>(data::load_fashion_mnist(
                                        cfg_.data_dir, data::Split::Train, limit(cfg_.train_limit)));
  if (test_set_->n < 1) throw Error("train: the test split holds no images");
  if (cfg_.evaluate_only) cfg_.batch = std::min(cfg_.batch, train_set_->n);  // the loader is never drawn from
  if (train_set_->n < cfg_.batch)
    throw Error("train: batch " + std::to_string(cfg_.batch) + " is larger than the " + std::to_string(train_set_->n) +
                " training images");
  data::LoaderOptions lo;
  lo.batch_size = cfg_.batch;
  lo.shuffle = true;
  lo.drop_last = true;
  lo.seed = cfg_.seed;
  lo.crop_pad = cfg_.augment ? 2 : 0;
  lo.hflip = cfg_.augment;
  loader_ = std::make_unique<data::Loader>(train_set_, lo);
  if (!model_) model_ = make_classifier(cfg_.model, train_set_->num_classes, cfg_.seed);
  if (cfg_.optimizer == "sgd")
    opt_ = std::make_unique<optim::SGD>(model_->parameters(), cfg_.lr, cfg_.momentum, cfg_.weight_decay);
  else if (cfg_.optimizer == "adamw")
    opt_ = std::make_unique<optim::AdamW>(model_->parameters(), cfg_.lr, 0.9, 0.999, 1e-8, cfg_.weight_decay);
  else
    throw Error("train: unknown optimizer '" + cfg_.optimizer + "' (sgd, adamw)");
  opt_->set_clip_norm(cfg_.clip);
  if (cfg_.shards < 1 || cfg_.batch % cfg_.shards)
    throw Error("train: " + std::to_string(cfg_.shards) + " micro-shards do not divide the batch of " +
                std::to_string(cfg_.batch));
  if (!cfg_.evaluate_only) compile_step(step_fn_, dp_);  // evaluation compiles its own forward
}

void ClassifierTrainer::compile_step(std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp) {
  if (!dist::needs_data_parallel(cfg_.shards, cfg_.group.get())) {
    fused = std::make_unique<CompiledStep>(compile_classifier_train(*model_, *opt_, cfg_.batch));
    return;
  }
  model_->train();
  const int64_t b = cfg_.batch / cfg_.shards;
  dp = std::make_unique<dist::DataParallelStep>(
      [&](const std::vector<Tensor>& a) {
        Tensor logits = (*model_)(a[0]);
        return std::vector<Tensor>{cross_entropy(logits, a[1]), logits};
      },
      std::vector<std::pair<DType, Shape>>{{DType::F32, {b, 1, 28, 28}}, {DType::I64, {b}}}, *opt_, model_->buffers(),
      cfg_.shards, cfg_.group);
}

namespace {
// Rows [first, first + rows) of a batch.
HostTensor rows_of(const HostTensor& t, int64_t first, int64_t rows) {
  Shape s = t.shape;
  int64_t row = numel(s) / s[0];
  s[0] = rows;
  HostTensor out(t.dtype, s);
  size_t width = size_t(row) * dtype_size(t.dtype);
  std::memcpy(out.buffer->data(), static_cast<const char*>(t.buffer->data()) + size_t(first) * width,
              size_t(rows) * width);
  return out;
}
}  // namespace

ClassifierTrainer::~ClassifierTrainer() = default;

int64_t ClassifierTrainer::steps_per_epoch() const { return loader_->batches_per_epoch(); }

int64_t ClassifierTrainer::train_steps(int64_t n, const std::function<void(int64_t, double)>& on_step) {
  if (cfg_.evaluate_only) throw Error("train: this trainer evaluates only (it holds no training images)");
  int64_t spe = steps_per_epoch(), done = 0;
  for (; done < n && step_ < total_steps(); ++done) {
    uint64_t epoch = uint64_t(step_ / spe);
    loader_->fill_batch(epoch, step_ % spe, images_, labels_);
    double lr = cfg_.cosine ? optim::warmup_cosine(cfg_.lr, step_, cfg_.warmup_steps, total_steps())
                            : optim::warmup_cosine(cfg_.lr, step_, cfg_.warmup_steps, cfg_.warmup_steps);
    opt_->set_lr(lr);
    opt_->tick();
    double loss = 0;
    if (dp_) {  // micro-shard i: rows [i * b, (i + 1) * b) of the batch; per shard {mean loss, correct}
      const int64_t b = cfg_.batch / cfg_.shards;
      std::vector<double> v = dp_->run(
          [&](int64_t i) { return std::vector<HostTensor>{rows_of(images_, i * b, b), rows_of(labels_, i * b, b)}; },
          [&](int64_t i, const std::vector<HostTensor>& out) {
            return std::vector<double>{out[0].get(0), double(nn::count_correct(out[1], rows_of(labels_, i * b, b)))};
          },
          2);
      for (int64_t i = 0; i < cfg_.shards; ++i) loss += v[size_t(2 * i)], correct_ += int64_t(v[size_t(2 * i + 1)]);
      loss /= double(cfg_.shards);
    } else {
      std::vector<HostTensor> out = (*step_fn_)({images_, labels_});
      loss = out[0].get(0);
      correct_ += nn::count_correct(out[1], labels_);
    }
    check_finite_loss("train", loss, step_ + 1, total_steps(), non_finite_hint(cfg_.clip));
    loss_sum_ += loss * double(cfg_.batch);
    seen_ += cfg_.batch;
    ++step_;
    if (on_step) on_step(step_, loss);
  }
  return done;
}

std::pair<double, double> ClassifierTrainer::evaluate() {
  int64_t n = test_set_->n, eb = std::min(kEvalBatch, n);
  data::LoaderOptions lo;
  lo.batch_size = eb;
  lo.shuffle = false;
  data::Loader test(test_set_, lo);
  if (eval_fns_.empty()) {
    eval_fns_.push_back(std::make_unique<CompiledStep>(compile_classifier_eval(*model_, eb)));
    if (n % eb) eval_fns_.push_back(std::make_unique<CompiledStep>(compile_classifier_eval(*model_, n % eb)));
  }
  double loss = 0;
  int64_t correct = 0;
  HostTensor x, y;
  for (int64_t b = 0; b < test.batches_per_epoch(); ++b) {
    test.fill_batch(0, b, x, y);
    int64_t rows = test.batch_rows(b);
    CompiledStep& f = rows == eb ? *eval_fns_[0] : *eval_fns_.back();
    HostTensor logits = f({x})[0];
    loss += host_cross_entropy(logits, y, rows);
    correct += nn::count_correct(logits, y);
  }
  return {loss / double(n), double(correct) / double(n)};
}

// What decides the run's bits besides the weights: a resumed run must agree on all of it.
io::Metadata ClassifierTrainer::run_metadata() const {
  io::Metadata md{{"model", cfg_.model},
                  {"optimizer", cfg_.optimizer},
                  {"seed", std::to_string(cfg_.seed)},
                  {"batch", std::to_string(cfg_.batch)},
                  {"total_steps", std::to_string(total_steps())},
                  {"lr", io::metadata_real(cfg_.lr)},
                  {"momentum", cfg_.optimizer == "sgd" ? io::metadata_real(cfg_.momentum) : "-"},
                  {"weight_decay", io::metadata_real(cfg_.weight_decay)},
                  {"clip", io::metadata_real(cfg_.clip)},
                  {"warmup", std::to_string(cfg_.warmup_steps)},
                  {"augment", cfg_.augment ? "1" : "0"},
                  {"train_limit", std::to_string(cfg_.train_limit)},
                  {"shards", std::to_string(cfg_.shards)},
                  {"kernels", fast_mode() ? "fast" : "default"}};
  for (const auto& [k, v] : cfg_.extra) md[k] = v;
  return md;
}

void ClassifierTrainer::save(const std::string& path) {
  if (cfg_.evaluate_only) throw Error("train: this trainer evaluates only; it saves nothing");
  std::vector<std::pair<std::string, Tensor>> all;
  for (auto& [name, t] : model_->state_dict()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : opt_->state()) all.emplace_back("optim." + name, t);
  save_run_checkpoint(path, all, run_metadata(), step_);
}

void ClassifierTrainer::load(const std::string& path, bool resume) {
  io::Checkpoint head = io::load_safetensors(path);
  const io::Metadata& md = head.metadata;
  const std::string& model = io::metadata_text(md, "model", path);
  const std::string& optimizer = io::metadata_text(md, "optimizer", path);
  if (model != cfg_.model) throw Error("checkpoint '" + path + "' holds a " + model + ", not a " + cfg_.model);
  if (optimizer != cfg_.optimizer)
    throw Error("checkpoint '" + path + "' was trained with " + optimizer + ", not " + cfg_.optimizer);
  int64_t step = io::metadata_int(md, "step", path, 0, std::numeric_limits<int64_t>::max());
  if (resume) io::check_same_run(md, run_metadata(), path);
  std::unique_ptr<CompiledStep> replayed;
  std::unique_ptr<dist::DataParallelStep> replayed_dp;
  const bool replay = compile_replayed(
      md, path, [this](auto& fused, auto& dp) { compile_step(fused, dp); }, replayed, replayed_dp);
  std::vector<std::pair<std::string, Tensor>> all;
  for (auto& [name, t] : model_->state_dict()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : opt_->state()) all.emplace_back("optim." + name, t);
  io::load_into(path, all);
  step_ = step;
  opt_->restore_steps(step_);
  if (replay) {
    step_fn_ = std::move(replayed);
    dp_ = std::move(replayed_dp);
    eval_fns_.clear();
  }
}

}  // namespace synoros::train
