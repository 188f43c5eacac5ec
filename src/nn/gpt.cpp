// The GPT-2 model family: configuration presets, the model, and its safetensors layout.
#include "synoros/gpt.hpp"

#include <cmath>
#include <cstring>
#include <set>

#include "synoros/checkpoint.hpp"
#include "synoros/lora.hpp"

namespace synoros::nn {

GptConfig GptConfig::preset(const std::string& name) {
  if (name == "gpt-tiny") return {256, 64, 128, 4, 2};
  if (name == "gpt2-11m") return {256, 512, 384, 6, 6};
  if (name == "gpt2-98m") return {16384, 1024, 768, 12, 12};
  if (name == "gpt2-124m") return {50257, 1024, 768, 12, 12};
  std::string known;
  for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("gpt: unknown configuration '" + name + "' (known: " + known + ")");
}

std::vector<std::string> GptConfig::preset_names() { return {"gpt-tiny", "gpt2-11m", "gpt2-98m", "gpt2-124m"}; }

void GptConfig::check() const {
  auto need = [](int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi)
      throw Error(std::string("gpt: ") + what + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                  "], got " + std::to_string(v));
  };
  need(vocab, 1, int64_t(1) << 24, "vocab");
  need(context, 1, int64_t(1) << 16, "context");
  need(width, 1, int64_t(1) << 16, "width");
  need(heads, 1, width, "heads");
  need(layers, 1, 1024, "layers");
  if (width % heads != 0)
    throw Error("gpt: heads " + std::to_string(heads) + " must divide the width " + std::to_string(width));
}

std::string GptConfig::str() const {
  return "vocab " + std::to_string(vocab) + ", context " + std::to_string(context) + ", width " + std::to_string(width) +
         ", heads " + std::to_string(heads) + ", layers " + std::to_string(layers);
}

int64_t GptConfig::parameter_count() const {
  int64_t C = width;
  int64_t block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  return vocab * C + context * C + layers * block + 2 * C;
}

namespace {
Tensor filled(Shape s, double v) {
  HostTensor h(DType::F32, std::move(s));
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, v);
  return Tensor::from(h);
}
}  // namespace

Conv1D::Conv1D(int64_t in, int64_t out, uint64_t seed, double std) : in_(in), out_(out) {
  weight = register_parameter("weight", Tensor::randn({in, out}, seed, std));
  bias = register_parameter("bias", filled({out}, 0));
}

Conv1D::Conv1D(int64_t in, int64_t out, std::shared_ptr<Module> op) : product(std::move(op)), in_(in), out_(out) {
  if (!product) throw Error("Conv1D: the product module is null");
  register_module("op", product);
  bias = register_parameter("bias", filled({out}, 0));
}

Tensor Conv1D::forward(const Tensor& x) {
  const Shape& s = x.shape();
  if (s.size() != 3 || s[2] != in_)
    throw Error("Conv1D: input must be [B, T, " + std::to_string(in_) + "], got " + shape_str(s));
  if (product) {
    if (lora && !lora->merged)
      throw Error("Conv1D: a LoRA adapter needs the dense product, this one has another operator");
    Tensor p = product->forward(x.reshape({s[0] * s[1], in_}));
    if (p.shape() != Shape{s[0] * s[1], out_})
      throw Error("Conv1D: the product module gave " + shape_str(p.shape()) + ", expected [" +
                  std::to_string(s[0] * s[1]) + ", " + std::to_string(out_) + "]");
    return p.reshape({s[0], s[1], out_}) + bias;
  }
  Tensor y = einsum("btk,kn->btn", {x, weight}) + bias;
  return lora && !lora->merged ? y + lora->delta(x) : y;
}

GptBlock::GptBlock(const GptConfig& c, uint64_t seed, const ProjectionFactory& projections)
    : width(c.width), heads(c.heads) {
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * double(c.layers));
  int64_t C = c.width;
  auto projection = [&](const std::string& name, int64_t in, int64_t out, uint64_t sd, double sdev) {
    std::shared_ptr<Module> op = projections ? projections(name, in, out, sd) : nullptr;
    return register_module(name, op ? std::make_shared<Conv1D>(in, out, std::move(op))
                                    : std::make_shared<Conv1D>(in, out, sd, sdev));
  };
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(C));
  c_attn = projection("attn.c_attn", C, 3 * C, seed, std);
  attn_proj = projection("attn.c_proj", C, C, seed + 1, proj_std);
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(C));
  c_fc = projection("mlp.c_fc", C, 4 * C, seed + 2, std);
  mlp_proj = projection("mlp.c_proj", 4 * C, C, seed + 3, proj_std);
}

std::vector<Tensor> GptBlock::qkv(const Tensor& x) {
  Tensor a = c_attn->forward(ln_1->forward(x));
  return {a.slice(2, 0, width), a.slice(2, width, 2 * width), a.slice(2, 2 * width, 3 * width)};
}

Tensor GptBlock::finish(const Tensor& x, const Tensor& y) {
  Tensor r = x + attn_proj->forward(y);
  return r + mlp_proj->forward(c_fc->forward(ln_2->forward(r)).gelu_tanh());
}

Tensor GptBlock::forward(const Tensor& x) {
  int64_t B = x.shape()[0], T = x.shape()[1], D = width / heads;
  std::vector<Tensor> p = qkv(x);
  auto split = [&](const Tensor& t) { return t.reshape({B, T, heads, D}).permute({0, 2, 1, 3}); };
  return finish(x, gpt_attention(split(p[0]), split(p[1]), split(p[2])));
}

namespace {
Tensor merge_heads(const Tensor& y) {  // [B, H, T, D] -> [B, T, H * D]
  const Shape& s = y.shape();
  return y.permute({0, 2, 1, 3}).reshape({s[0], s[2], s[1] * s[3]});
}
}  // namespace

Tensor gpt_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  return merge_heads(scaled_dot_product_attention(q, k, v, true));
}

Tensor gpt_attention_at(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offset) {
  return merge_heads(scaled_dot_product_attention_at(q, k, v, offset));
}

Gpt::Gpt(const GptConfig& c, uint64_t seed, const ProjectionFactory& projections) : cfg(c) {
  c.check();
  wte = register_module("transformer.wte", std::make_shared<Embedding>(c.vocab, c.width, seed, 0.02));
  wpe = register_module("transformer.wpe", std::make_shared<Embedding>(c.context, c.width, seed + 1, 0.02));
  for (int64_t l = 0; l < c.layers; ++l)
    h.push_back(register_module("transformer.h." + std::to_string(l),
                                std::make_shared<GptBlock>(c, seed + 10 + 4 * uint64_t(l), projections)));
  ln_f = register_module("transformer.ln_f", std::make_shared<LayerNorm>(c.width));
}

Tensor Gpt::forward_with(const Tensor& tokens, const Tensor& positions,
                         const std::function<Tensor(size_t, const Tensor&, const Tensor&, const Tensor&)>& attend) {
  const Shape& s = tokens.shape();
  if (tokens.dtype() != DType::I64 || s.size() != 2 || s[1] < 1 || s[1] > cfg.context)
    throw Error("gpt: tokens must be i64 [B, T] with 1 <= T <= " + std::to_string(cfg.context) + ", got " +
                shape_str(s));
  int64_t B = s[0], T = s[1], D = cfg.width / cfg.heads;
  Tensor x = embed(tokens, positions);
  auto split = [&](const Tensor& t) { return t.reshape({B, T, cfg.heads, D}).permute({0, 2, 1, 3}); };
  for (size_t l = 0; l < h.size(); ++l) {
    auto block = [&](const Tensor& in) {
      std::vector<Tensor> p = h[l]->qkv(in);
      return h[l]->finish(in, attend(l, split(p[0]), split(p[1]), split(p[2])));
    };
    x = checkpoint_blocks ? checkpoint(block, x) : block(x);
  }
  return head(x);
}

Tensor Gpt::embed(const Tensor& tokens, const Tensor& positions) {
  return wte->forward(tokens) +
         (positions.defined() ? wpe->forward(positions) : wpe->weight.slice(0, 0, tokens.shape()[1]));
}

Tensor Gpt::head(const Tensor& x) { return einsum("btc,vc->btv", {ln_f->forward(x), wte->weight}); }  // tied

Tensor Gpt::forward(const Tensor& tokens) {
  if (tokens.shape().size() != 2) return forward_with(tokens, {}, {});  // the error message
  return forward_with(tokens, {}, [&](size_t, const Tensor& q, const Tensor& k, const Tensor& v) {
    return gpt_attention(q, k, v);
  });
}

Tensor Gpt::loss(const Tensor& tokens, const Tensor& targets) {
  if (targets.shape() != tokens.shape())
    throw Error("gpt: targets " + shape_str(targets.shape()) + " must have the tokens' shape " + shape_str(tokens.shape()));
  int64_t N = numel(tokens.shape());
  return cross_entropy(forward(tokens).reshape({N, cfg.vocab}), targets.reshape({N}));
}

void Gpt::save(const std::string& path) const {
  io::Metadata md = {{"model", "gpt2"},
                     {"vocab", std::to_string(cfg.vocab)},
                     {"context", std::to_string(cfg.context)},
                     {"width", std::to_string(cfg.width)},
                     {"heads", std::to_string(cfg.heads)},
                     {"layers", std::to_string(cfg.layers)}};
  io::save_safetensors(path, named_parameters(), md);
}

std::shared_ptr<Gpt> Gpt::load(const std::string& path, int64_t heads) {
  io::Checkpoint ck = io::load_safetensors(path);
  auto fail = [&](const std::string& why) -> Error { return Error("gpt: '" + path + "': " + why); };
  // Canonical names: "transformer." + the Hugging Face name.
  std::map<std::string, HostTensor> t;
  const HostTensor* lm_head = nullptr;
  bool trainer = ck.metadata.count("model") && ck.metadata.at("model") != "gpt2";
  if (trainer && ck.metadata.count("operator") && !ck.metadata.at("operator").empty())
    throw fail("its projections are a synthesized operator ('" + ck.metadata.at("operator") +
               "'), not dense: evaluate it with `synoros eval`, or continue it with `synoros train --resume`");
  for (auto& [name, value] : ck.tensors) {
    std::string n = name;
    if (trainer) {
      if (n.rfind("lora.", 0) == 0)
        throw fail("a LoRA fine-tuning checkpoint: load its base" +
                   (ck.metadata.count("base") ? " ('" + ck.metadata.at("base") + "')" : std::string()) +
                   " with the adapters (the run's adapter/ directory)");
      if (n.rfind("optim.", 0) == 0) continue;
      if (n.rfind("model.", 0) == 0) n = n.substr(6);
    }
    if (n == "lm_head.weight") {
      lm_head = &value;
      continue;
    }
    if (n.size() > 10 && (n.compare(n.size() - 10, 10, ".attn.bias") == 0 ||
                          (n.size() > 17 && n.compare(n.size() - 17, 17, ".attn.masked_bias") == 0)))
      continue;  // Hugging Face's causal-mask buffers
    if (n.rfind("transformer.", 0) != 0) n = "transformer." + n;
    t[n] = value;
  }
  auto find = [&](const std::string& n) -> const HostTensor& {
    auto it = t.find(n);
    if (it == t.end()) throw fail("no tensor '" + n + "' (nor without the 'transformer.' prefix)");
    return it->second;
  };
  const HostTensor& wte = find("transformer.wte.weight");
  const HostTensor& wpe = find("transformer.wpe.weight");
  if (wte.shape.size() != 2 || wpe.shape.size() != 2 || wte.shape[1] != wpe.shape[1])
    throw fail("wte " + shape_str(wte.shape) + " and wpe " + shape_str(wpe.shape) + " must be [vocab, width] and [context, width]");
  GptConfig c;
  c.vocab = wte.shape[0], c.context = wpe.shape[0], c.width = wte.shape[1];
  c.layers = 0;
  while (t.count("transformer.h." + std::to_string(c.layers) + ".ln_1.weight")) ++c.layers;
  if (ck.metadata.count("heads")) {
    c.heads = io::metadata_int(ck.metadata, "heads", path, 1, c.width);
    // The weights were trained with the recorded count: another one computes another function.
    if (heads > 0 && heads != c.heads)
      throw fail("the file records " + std::to_string(c.heads) + " attention heads, not the " + std::to_string(heads) +
                 " asked for (leave the count out to use the file's)");
  } else if (heads > 0)
    c.heads = heads;
  else if (c.width % 64 == 0)
    c.heads = c.width / 64;
  else
    throw fail("the file does not say how many attention heads; give the count (width " + std::to_string(c.width) + ")");
  if (c.layers == 0) throw fail("no transformer blocks ('transformer.h.0.ln_1.weight' is missing)");
  c.check();
  auto m = std::make_shared<Gpt>(c, 0);
  std::set<std::string> used;
  for (auto& [name, p] : m->named_parameters()) {
    const HostTensor& src = find(name);
    HostTensor dst = p.value();  // shares the parameter's buffer
    if (src.dtype != DType::F32 || src.shape != dst.shape)
      throw fail("'" + name + "' is " + std::string(io::safetensors_dtype(src.dtype)) + " " + shape_str(src.shape) +
                 ", expected F32 " + shape_str(dst.shape));
    std::memcpy(dst.buffer->data(), src.buffer->data(), dst.bytes());
    dst.buffer->mark_modified();
    used.insert(name);
  }
  for (auto& [name, value] : t)
    if (!used.count(name)) throw fail("unexpected tensor '" + name + "'");
  if (lm_head) {
    HostTensor e = m->wte->weight.value();
    if (lm_head->shape != e.shape || lm_head->dtype != DType::F32 ||
        std::memcmp(lm_head->buffer->data(), e.buffer->data(), e.bytes()) != 0)
      throw fail("'lm_head.weight' differs from the token embedding: only tied heads are supported");
  }
  return m;
}

CompiledStep compile_gpt_grad(Gpt& m, int64_t batch, const std::vector<Tensor>& params) {
  Shape s = {batch, m.cfg.context};
  return compile(
      [&m, &params](const std::vector<Tensor>& a) {
        Tensor loss = m.loss(a[0], a[1]);
        loss.backward();
        std::vector<Tensor> out = {loss};
        for (const Tensor& p : params.empty() ? m.parameters() : params) out.push_back(p.grad());
        return out;
      },
      {{DType::I64, s}, {DType::I64, s}});
}

CompiledStep compile_block_grad(GptBlock& b, int64_t batch, int64_t rows) {
  Shape s = {batch, rows, b.width};
  return compile(
      [&b](const std::vector<Tensor>& a) {
        Tensor x = a[0];
        x.requires_grad();
        Tensor y = b.forward(x);
        (y * a[1]).sum().backward();
        std::vector<Tensor> out = {y, x.grad()};
        for (const Tensor& p : b.parameters()) out.push_back(p.grad());
        return out;
      },
      {{DType::F32, s}, {DType::F32, s}});
}

}  // namespace synoros::nn
