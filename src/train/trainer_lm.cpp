// The byte-level language-model trainer over the fortunes corpus.
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
// FNV-1a over the parameters' bytes, in order: names the frozen base a fine-tuning run started from.
std::string parameter_hash(const nn::Module& m) {
  uint64_t h = 1469598103934665603ull;
  for (auto& [name, p] : m.named_parameters()) {
    HostTensor v = p.value();
    const auto* b = static_cast<const unsigned char*>(v.buffer->data());
    for (size_t i = 0; i < v.bytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", (unsigned long long)h);
  return out;
}
}  // namespace

LmTrainer::LmTrainer(LmConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.batch < 1 || cfg_.steps < 1 || cfg_.lr <= 0) throw Error("train: batch, steps and lr must be positive");
  if (cfg_.accum < 1) throw Error("train: gradient accumulation needs at least 1 micro-batch per step");
  if (!cfg_.base.empty()) {
    model_ = nn::Gpt::load(cfg_.base);
    cfg_.model = model_->cfg;
  } else if (cfg_.lora) {
    throw Error("train: LoRA adapts a base model; give its file");
  }
  if (cfg_.model.vocab < 256) throw Error("train: the model's vocabulary must hold the 256 byte values");
  if (cfg_.sequence < 0 || cfg_.seq() > cfg_.model.context)
    throw Error("train: the sequence length " + std::to_string(cfg_.seq()) + " must be in [1, the context " +
                std::to_string(cfg_.model.context) + "]");
  data::TextCorpus corpus =
      cfg_.text_file.empty() ? data::load_fortunes(cfg_.data_dir) : data::load_text_file(cfg_.text_file);
  const int64_t need = cfg_.seq() + 1;
  if (int64_t(corpus.train.size()) < need || int64_t(corpus.val.size()) < need)
    throw Error("train: " + (cfg_.text_file.empty() ? std::string("the fortunes") : "'" + cfg_.text_file + "'") +
                " split into " + std::to_string(corpus.train.size()) + " training and " +
                std::to_string(corpus.val.size()) + " validation bytes; each needs at least the sequence + 1 = " +
                std::to_string(need));
  train_ = std::make_shared<const std::vector<uint8_t>>(std::move(corpus.train));
  val_ = std::make_shared<const std::vector<uint8_t>>(std::move(corpus.val));
  unigram_ = data::unigram_entropy(*train_);
  if (model_ && cfg_.projections)
    throw Error("train: synthesized projections need a model trained from scratch, not a base");
  if (!model_) model_ = std::make_shared<nn::Gpt>(cfg_.model, cfg_.seed, cfg_.projections);
  if (!cfg_.base.empty()) base_hash_ = parameter_hash(*model_);
  model_->checkpoint_blocks = cfg_.checkpoint_activations;
  std::vector<Tensor> params = model_->parameters();
  if (cfg_.lora) {
    lora_ = std::make_unique<nn::GptLora>(*model_, *cfg_.lora, cfg_.seed);
    params = lora_->parameters();
  }
  opt_ = std::make_unique<optim::AdamW>(params, cfg_.lr, 0.9, 0.95, 1e-8, cfg_.weight_decay);
  opt_->set_clip_norm(cfg_.clip);
  compile_step(step_fn_, dp_);
}

void LmTrainer::compile_step(std::unique_ptr<CompiledStep>& fused, std::unique_ptr<dist::DataParallelStep>& dp) {
  if (!dist::needs_data_parallel(cfg_.accum, cfg_.group.get())) {
    fused = std::make_unique<CompiledStep>(compile_lm_train(*model_, *opt_, cfg_.batch, cfg_.seq()));
    return;
  }
  model_->train();
  const Shape window{cfg_.batch, cfg_.seq()};
  dp = std::make_unique<dist::DataParallelStep>(
      [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{lm_loss(*model_, a[0], a[1])}; },
      std::vector<std::pair<DType, Shape>>{{DType::I64, window}, {DType::I64, window}}, *opt_, model_->buffers(), cfg_.accum,
      cfg_.group);
}

LmTrainer::~LmTrainer() = default;

int64_t LmTrainer::train_steps(int64_t n, const std::function<void(int64_t, double)>& on_step) {
  data::TextWindows windows(train_, cfg_.seq(), cfg_.seed);
  int64_t done = 0;
  for (; done < n && step_ < cfg_.steps; ++done) {
    opt_->set_lr(optim::warmup_cosine(cfg_.lr, step_, cfg_.warmup_steps, cfg_.steps, 0.1));
    opt_->tick();
    double loss = 0;
    if (dp_) {  // micro-batch i: rows [i * batch, (i + 1) * batch) of the step's windows
      std::vector<double> losses = dp_->run(
          [&](int64_t i) {
            windows.fill_random(uint64_t(step_), cfg_.batch, x_, y_, i * cfg_.batch);
            return std::vector<HostTensor>{x_, y_};
          },
          [](int64_t, const std::vector<HostTensor>& out) { return std::vector<double>{out[0].get(0)}; }, 1);
      for (double l : losses) loss += l;
      loss /= double(cfg_.accum);
    } else {
      windows.fill_random(uint64_t(step_), cfg_.batch, x_, y_);
      loss = (*step_fn_)({x_, y_})[0].get(0);
    }
    check_finite_loss("train", loss, step_ + 1, cfg_.steps, non_finite_hint(cfg_.clip));
    ++step_;
    if (on_step) on_step(step_, loss);
  }
  return done;
}

double LmTrainer::validation_loss(int64_t max_batches) {
  data::TextWindows windows(val_, cfg_.seq(), cfg_.seed);
  if (!val_fn_) val_fn_ = std::make_unique<CompiledStep>(compile_lm_eval(*model_, cfg_.batch, cfg_.seq()));
  int64_t batches = std::min(max_batches, windows.sequential_windows() / cfg_.batch);
  if (batches < 1) throw Error("train: the validation split is shorter than one batch of windows");
  double total = 0;
  HostTensor x, y;
  for (int64_t b = 0; b < batches; ++b) {
    windows.fill_sequential(b, cfg_.batch, x, y);
    total += (*val_fn_)({x, y})[1].get(0);
  }
  return total / double(batches);
}

std::string LmTrainer::generate(const std::string& prompt, int64_t n, double temperature, uint64_t seed) {
  if (temperature <= 0) throw Error("generate: temperature must be > 0");
  if (!gen_) gen_ = std::make_unique<nn::GptGenerator>(*model_, 1);
  std::string text = prompt.empty() ? std::string("\n") : prompt;
  int64_t len = std::min<int64_t>(cfg_.model.context, int64_t(text.size()));
  std::vector<int64_t> start;
  for (size_t i = text.size() - size_t(len); i < text.size(); ++i) start.push_back(uint8_t(text[i]));
  nn::Sampling s;
  s.temperature = temperature, s.seed = seed;
  std::string out;
  std::vector<std::vector<int64_t>> rows = gen_->generate({start}, n, s);
  for (int64_t tok : rows[0]) out.push_back(char(uint8_t(tok)));
  return out;
}

std::map<std::string, std::string> LmTrainer::run_metadata() const {
  const nn::GptConfig& m = cfg_.model;
  io::Metadata md = {{"model", cfg_.name},
          {"vocab", std::to_string(m.vocab)},
          {"data", cfg_.text_file.empty() ? "fortunes" : cfg_.text_file},
          {"context", std::to_string(m.context)},
          {"width", std::to_string(m.width)},
          {"heads", std::to_string(m.heads)},
          {"layers", std::to_string(m.layers)},
          {"batch", std::to_string(cfg_.batch)},
          {"seed", std::to_string(cfg_.seed)},
          {"total_steps", std::to_string(cfg_.steps)},
          {"lr", io::metadata_real(cfg_.lr)},
          {"weight_decay", io::metadata_real(cfg_.weight_decay)},
          {"clip", io::metadata_real(cfg_.clip)},
          {"warmup", std::to_string(cfg_.warmup_steps)},
          {"kernels", fast_mode() ? "fast" : "default"}};
  if (cfg_.sequence > 0) md["sequence"] = std::to_string(cfg_.sequence);
  md["accum"] = std::to_string(cfg_.accum);
  for (const auto& [k, v] : cfg_.extra) md[k] = v;
  if (!cfg_.base.empty()) md["base"] = cfg_.base, md["base_hash"] = base_hash_;
  if (cfg_.lora) {
    md["lora_rank"] = std::to_string(cfg_.lora->rank);
    md["lora_alpha"] = io::metadata_real(cfg_.lora->alpha);
    md["lora_targets"] = cfg_.lora->targets_str();
  }
  return md;
}

std::vector<std::pair<std::string, Tensor>> LmTrainer::state() const {
  std::vector<std::pair<std::string, Tensor>> all;
  if (lora_) {
    for (auto& [name, t] : lora_->named_parameters()) all.emplace_back("lora." + name, t);
  } else {
    for (auto& [name, t] : model_->state_dict()) all.emplace_back("model." + name, t);
  }
  for (auto& [name, t] : opt_->state()) all.emplace_back("optim." + name, t);
  return all;
}

void LmTrainer::save(const std::string& path) {
  save_run_checkpoint(path, state(), run_metadata(), step_);
}

void LmTrainer::load(const std::string& path, bool resume) {
  io::Checkpoint head = io::load_safetensors(path);
  const io::Metadata& md = head.metadata;
  if (io::metadata_text(md, "model", path) != cfg_.name)
    throw Error("checkpoint '" + path + "' holds a " + md.at("model") + ", not a " + cfg_.name);
  int64_t step = io::metadata_int(md, "step", path, 0, std::numeric_limits<int64_t>::max());
  io::Metadata expected = run_metadata();
  if (!resume)  // evaluation: only the model's shape must agree
    for (const char* k : {"batch", "seed", "total_steps", "lr", "weight_decay", "clip", "warmup", "kernels", "accum"})
      expected.erase(k);
  io::check_same_run(md, expected, path);
  std::unique_ptr<CompiledStep> replayed;
  std::unique_ptr<dist::DataParallelStep> replayed_dp;
  const bool replay = compile_replayed(
      md, path, [this](auto& fused, auto& dp) { compile_step(fused, dp); }, replayed, replayed_dp);
  io::load_into(path, state());
  step_ = step;
  opt_->restore_steps(step_);
  if (replay) {
    step_fn_ = std::move(replayed);
    dp_ = std::move(replayed_dp);
    val_fn_.reset();
    gen_.reset();
  }
}

}  // namespace synoros::train
