// A GPT-2-style byte-level transformer built from core ops: token + position embeddings,
// pre-LayerNorm blocks of causal multi-head self-attention and a GELU MLP, tied output head.
#pragma once

#include <vector>

#include "synoros/tensor.hpp"

namespace synoros {

struct GptConfig {
  int64_t vocab = 256, context = 128, width = 256, heads = 4, layers = 4, batch = 8;
};

struct Gpt {
  GptConfig cfg;
  Tensor tok_emb, pos_emb, lnf_w, lnf_b;
  struct Block {
    Tensor ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, out_w, out_b;
  };
  std::vector<Block> blocks;

  Gpt(const GptConfig& c, uint64_t seed);
  // tokens: i64 [batch, context] -> logits [batch, context, vocab]
  Tensor forward(const Tensor& tokens) const;
  Tensor loss(const Tensor& tokens, const Tensor& targets) const;
  std::vector<Tensor> params() const;
};

// One training step (forward, backward, gradients as outputs) captured as a compiled step over
// (tokens, targets).
CompiledStep compile_gpt_grad(Gpt& m);

}  // namespace synoros
