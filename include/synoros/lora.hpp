// LoRA (low-rank adaptation) for the GPT-2 family, in PEFT's terms: a projection y = x W + b
// gains (x A^T) B^T * alpha / r with A [r, in] (kaiming-uniform, as PEFT) and B [out, r] (zeros,
// so a fresh adapter changes nothing). The base parameters are frozen and pinned (plans read them
// in place, no copy per plan); only the adapters train. Files use PEFT's adapter names
// ("base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"), and save_pretrained() writes the
// directory PEFT's PeftModel.from_pretrained() reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "synoros/gpt.hpp"

namespace synoros::nn {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;  // PEFT's lora_alpha: the update is scaled by alpha / rank
  // PEFT's target_modules: a projection is adapted when its name is a target or ends with
  // "." + target. "c_proj" names both attention's and the MLP's output projection;
  // "attn.c_proj" and "mlp.c_proj" name one.
  std::vector<std::string> targets = {"c_attn", "c_proj", "c_fc"};
  double scaling() const { return alpha / double(rank); }
  // Throws naming the field (rank < 1, alpha not finite and > 0, no targets).
  void check() const;
  // "c_attn,c_proj,c_fc" and back.
  std::string targets_str() const;
  static std::vector<std::string> parse_targets(const std::string& list);
};

// One adapted projection's extra term.
struct LoraAdapter {
  Tensor A, B;  // [r, in], [out, r]
  double scaling = 1;
  bool merged = false;  // folded into the base weight: forward adds nothing
  Tensor delta(const Tensor& x) const;  // x [B, T, in] -> [B, T, out]
};

// The adapters of a model, as a Module whose parameters are the adapters (PEFT's names, in the
// model's order: for each adapted projection lora_A then lora_B) and whose forward is the adapted
// model's.
class GptLora : public Module {
 public:
  // Attaches adapters to every targeted projection of `model` (seeded A, zero B) and freezes the
  // model's parameters. A target that matches no projection is an error.
  GptLora(Gpt& model, LoraConfig cfg, uint64_t seed);
  // Unmerges if merged, detaches the adapters and unfreezes the model.
  ~GptLora();
  GptLora(const GptLora&) = delete;
  GptLora& operator=(const GptLora&) = delete;

  const LoraConfig& config() const { return cfg_; }
  // tokens i64 [B, T] -> the adapted model's logits.
  Tensor forward(const Tensor& tokens) override;

  // Folds scaling * (B A)^T into each adapted base weight (forward then runs the plain model);
  // unmerge() restores the base weights bit for bit (merge keeps their values).
  void merge();
  void unmerge();
  bool merged() const { return sites_.front().adapter->merged; }

  // The adapters as safetensors with PEFT's names; the rank, alpha and targets in the metadata.
  void save(const std::string& path) const;
  // PEFT's directory: adapter_model.safetensors and adapter_config.json.
  void save_pretrained(const std::string& dir, const std::string& base_name = "") const;
  // Reads adapters written by save(), save_pretrained() or PEFT (names with or without
  // "base_model.model." and "transformer.", PEFT's ".default" adapter name allowed). Every
  // adapter must be present with this configuration's rank and the base's sizes; nothing is
  // written unless every check passes.
  void load(const std::string& path);
  // The configuration of a saved adapter: from the file's metadata, else from the
  // adapter_config.json beside it.
  static LoraConfig read_config(const std::string& path);

 private:
  struct Site {
    std::string name;  // "transformer.h.0.attn.c_attn"
    std::shared_ptr<Conv1D> layer;
    std::shared_ptr<LoraAdapter> adapter;
    HostTensor base;  // while merged: the base weight's values before merging
  };
  Gpt& m_;
  LoraConfig cfg_;
  std::vector<Site> sites_;
  std::vector<std::pair<Tensor, bool>> frozen_;  // each model parameter and its requires_grad
};

}  // namespace synoros::nn
