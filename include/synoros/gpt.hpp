// The GPT-2 family: token and learned position embeddings, pre-LayerNorm blocks of causal
// multi-head self-attention and a tanh-GELU MLP, a tied output head. Parameters carry the
// Hugging Face GPT-2 names and layouts (Conv1D weights are [in, out]), so GPT-2 safetensors files
// load as they are. Generation runs a prefill over the prompt, then decodes one token per step
// against a static key/value cache of the context length (one compiled plan for every step).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "synoros/nn.hpp"

namespace synoros::nn {

struct GptConfig {
  int64_t vocab = 256, context = 64, width = 128, heads = 4, layers = 2;
  // "gpt-tiny" (0.4M parameters, bytes), "gpt2-11m" (bytes), "gpt2-98m" (16,384 tokens) and
  // "gpt2-124m" (GPT-2 small: 50,257 tokens, context 1,024). Unknown names are an error.
  static GptConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // Throws naming the field when a size is out of range or heads do not divide the width.
  void check() const;
  std::string str() const;
  int64_t parameter_count() const;
};

struct LoraAdapter;

// Another operator in place of a projection's dense product x W: a module from [rows, in] to
// [rows, out] built for the projection `name` ("attn.c_attn", "attn.c_proj", "mlp.c_fc" or
// "mlp.c_proj") with its own parameters; null keeps the dense product. The projection keeps its bias.
using ProjectionFactory =
    std::function<std::shared_ptr<Module>(const std::string& name, int64_t in, int64_t out, uint64_t seed)>;

// GPT-2's projection: y = x W + b with W [in, out] (the transpose of Linear's layout), plus a
// LoRA adapter's term when one is attached (see lora.hpp; not one of the module's parameters).
// Built with a `product`, y = product(x) + b: the module is registered as "op" and `weight` is
// undefined.
class Conv1D : public Module {
 public:
  Conv1D(int64_t in, int64_t out, uint64_t seed, double std);
  Conv1D(int64_t in, int64_t out, std::shared_ptr<Module> product);
  Tensor forward(const Tensor& x) override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Tensor weight, bias;
  std::shared_ptr<Module> product;
  std::shared_ptr<LoraAdapter> lora;

 private:
  int64_t in_, out_;
};

class GptBlock : public Module {
 public:
  GptBlock(const GptConfig& c, uint64_t seed, const ProjectionFactory& projections = {});
  Tensor forward(const Tensor& x) override;
  // The three projections of the attention input, each [B, T, C].
  std::vector<Tensor> qkv(const Tensor& x);
  // The rest of the block given attention's output y [B, T, C] and the block input x.
  Tensor finish(const Tensor& x, const Tensor& y);
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<Conv1D> c_attn, attn_proj, c_fc, mlp_proj;
  int64_t width, heads;
};

// Causal attention over heads (the fused attention op, scale 1/sqrt(D)): q, k and v [B, H, T, D]
// -> [B, T, H * D].
Tensor gpt_attention(const Tensor& q, const Tensor& k, const Tensor& v);
// The same for queries at positions offset + i (offset: an i64 tensor of one element) over a
// key/value cache [B, H, context, D]: what decoding runs, with the full forward's bits.
Tensor gpt_attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offset);

class Gpt : public Module {
 public:
  // `projections` may put other operators in place of the blocks' dense products (operator search).
  Gpt(const GptConfig& c, uint64_t seed, const ProjectionFactory& projections = {});
  // tokens i64 [B, T <= context] -> logits [B, T, vocab].
  Tensor forward(const Tensor& tokens) override;
  // The same, embedding `positions` (i64 [B, T]) instead of 0..T-1, with attention given by
  // `attend(layer, q, k, v)` for q, k, v [B, H, T, D]; the result is logits [B, T, vocab].
  Tensor forward_with(const Tensor& tokens, const Tensor& positions,
                      const std::function<Tensor(size_t, const Tensor&, const Tensor&, const Tensor&)>& attend);
  // The pieces forward_with() is made of, for callers that run a block at a time (decoding):
  // token embeddings plus those of `positions` (i64 [B, T]; undefined: 0..T-1), and the final
  // LayerNorm with the tied head ([B, T, width] -> [B, T, vocab]).
  Tensor embed(const Tensor& tokens, const Tensor& positions);
  Tensor head(const Tensor& x);
  // Mean cross-entropy of next-token prediction (targets i64 [B, T]).
  Tensor loss(const Tensor& tokens, const Tensor& targets);

  // Hugging Face GPT-2 layout: "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...
  // Saves the parameters with the configuration in the metadata.
  void save(const std::string& path) const;
  // Loads a GPT-2 safetensors file: Hugging Face's (with or without the "transformer." prefix;
  // "lm_head.weight" must equal the embedding, the attention mask buffers are ignored), one
  // written by save(), or a training checkpoint of `synoros train` ("model." prefix). The
  // configuration comes from the file's metadata or from the tensor shapes. A file without the
  // head count takes `heads` (when > 0), otherwise width / 64 (GPT-2's head size); a file that
  // records it refuses any other `heads` (Error naming both).
  static std::shared_ptr<Gpt> load(const std::string& path, int64_t heads = 0);

  GptConfig cfg;
  // Activation checkpointing per block: a training step keeps each block's input, not its
  // activations, and computes them again in the backward pass (the same gradients, bit for bit).
  bool checkpoint_blocks = false;
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<GptBlock>> h;
  std::shared_ptr<LayerNorm> ln_f;
};

// One training step (forward, backward, gradients as outputs: loss first, then one per
// parameter in named_parameters() order, or of `params` when given, e.g. LoRA adapters) over
// (tokens, targets) of [batch, context].
CompiledStep compile_gpt_grad(Gpt& m, int64_t batch, const std::vector<Tensor>& params = {});
// One block's part of a training step: for x [batch, rows, width] (input 0) and the gradient of
// the block's output (input 1), the outputs are the block's output, x's gradient, then one per
// parameter in named_parameters() order.
CompiledStep compile_block_grad(GptBlock& b, int64_t batch, int64_t rows);

// How the next token is picked from a row of logits.
struct Sampling {
  double temperature = 1.0;  // 0: greedy (the first largest logit)
  int64_t top_k = 0;         // keep the k largest logits (0: all)
  double top_p = 1.0;        // keep the smallest set of largest-probability tokens reaching p
  uint64_t seed = 1;
};

// Seeded token picker: the same seed and logits give the same tokens on every machine.
class Sampler {
 public:
  explicit Sampler(const Sampling& s);
  int64_t pick(const float* logits, int64_t vocab);

 private:
  Sampling s_;
  uint64_t state_;
  std::vector<std::pair<float, int64_t>> order_;
  std::vector<double> prob_;
};

// Incremental decoding of `batch` sequences. The cache holds, per layer, the keys and the values
// as [batch, heads, context, D]; decode() reuses the same compiled plans (one per block boundary) for every
// position: nothing compiles after its first call, and calls after the second allocate no memory
// (with AVX-512 at batch 2 to 8, the second packs the weights, into copies the prefill plans
// share, unless a prefill plan packed them already: see packed_weights.hpp).
class GptGenerator {
 public:
  GptGenerator(Gpt& model, int64_t batch);
  ~GptGenerator();
  GptGenerator(const GptGenerator&) = delete;  // it owns compiled plans bound to its caches
  GptGenerator& operator=(const GptGenerator&) = delete;
  int64_t batch() const { return batch_; }
  int64_t position() const { return pos_; }
  int64_t vocab() const { return m_.cfg.vocab; }
  // Empties the cache.
  void reset();
  // Runs the prompts (one per row, all of one length between 1 and the context) from position 0
  // and returns the logits of their last position: [batch, vocab], row-major.
  const float* prefill(const std::vector<std::vector<int64_t>>& prompts);
  // Feeds one token per row at the current position; returns the next logits [batch, vocab].
  const float* decode(const std::vector<int64_t>& tokens);
  // Drops the cached positions from `position` on (1 <= position <= position()): the next decode
  // writes at `position` and returns the logits of a full forward over the first `position`
  // tokens followed by the new one, bit for bit. Takes back rejected draft tokens (speculative
  // decoding) or a branch of a search without a new prefill. A generator serves one thread at a
  // time.
  void rewind(int64_t position);
  // The decode step's plans, in order (empty before the first decode), for profiling: the
  // embedding and block 0's projections; then for each block its attention and MLP followed by
  // the next block's projections, or by the head.
  std::vector<Plan*> decode_plans() {
    std::vector<Plan*> out;
    for (auto& s : decode_) out.push_back(&s->plan());
    return out;
  }
  // Prefill, then `n` tokens per row picked by `sampling` (one sampler per row, seeds seed,
  // seed+1, ...); `on_token(step, tokens)` sees each step's tokens as they come. When the context
  // is full, the newest half of every row is prefilled again (a context shift) and decoding goes on.
  std::vector<std::vector<int64_t>> generate(
      const std::vector<std::vector<int64_t>>& prompts, int64_t n, const Sampling& sampling,
      const std::function<void(int64_t, const std::vector<int64_t>&)>& on_token = {});

 private:
  void write_cache_layer(size_t layer, const float* k, const float* v, int64_t first, int64_t count);
  void compile_decode();
  Gpt& m_;
  int64_t batch_, pos_ = 0;
  std::vector<Tensor> k_, v_;            // per layer, stateful leaves
  std::vector<HostTensor> k_host_, v_host_;  // the same storage, written between steps
  Tensor offset_;                            // i64 [1]: the position decoding writes
  HostTensor offset_host_;
  std::map<int64_t, std::unique_ptr<CompiledStep>> prefill_;
  std::vector<std::unique_ptr<CompiledStep>> decode_;
  std::vector<float> last_;
};

}  // namespace synoros::nn
