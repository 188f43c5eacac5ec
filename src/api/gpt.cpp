#include "synoros/gpt.hpp"

#include <cmath>

namespace synoros {

namespace {
Tensor affine_layernorm(const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b); }
// x [.., in] @ w^T + b with w [out, in] (PyTorch's Linear layout).
Tensor linear3(const Tensor& x, const Tensor& w, const Tensor& b) { return einsum("btk,nk->btn", {x, w}) + b; }
Tensor param(Shape s, uint64_t seed, double std) { return Tensor::randn(std::move(s), seed, std).requires_grad(); }
Tensor filled(Shape s, double v) {
  HostTensor h(DType::F32, std::move(s));
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, v);
  return Tensor::from(h).requires_grad();
}
}  // namespace

Gpt::Gpt(const GptConfig& c, uint64_t seed) : cfg(c) {
  int64_t C = c.width;
  double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * double(c.layers));
  tok_emb = param({c.vocab, C}, seed++, std);
  pos_emb = param({c.context, C}, seed++, std);
  for (int64_t l = 0; l < c.layers; ++l) {
    Block b;
    b.ln1_w = filled({C}, 1), b.ln1_b = filled({C}, 0);
    b.qkv_w = param({3 * C, C}, seed++, std), b.qkv_b = filled({3 * C}, 0);
    b.proj_w = param({C, C}, seed++, proj_std), b.proj_b = filled({C}, 0);
    b.ln2_w = filled({C}, 1), b.ln2_b = filled({C}, 0);
    b.fc_w = param({4 * C, C}, seed++, std), b.fc_b = filled({4 * C}, 0);
    b.out_w = param({C, 4 * C}, seed++, proj_std), b.out_b = filled({C}, 0);
    blocks.push_back(b);
  }
  lnf_w = filled({C}, 1), lnf_b = filled({C}, 0);
}

Tensor Gpt::forward(const Tensor& tokens) const {
  int64_t B = cfg.batch, T = cfg.context, C = cfg.width, H = cfg.heads, D = C / H;
  if (tokens.shape() != Shape{B, T})
    throw Error("gpt: tokens must be [" + std::to_string(B) + ", " + std::to_string(T) + "], got " +
                shape_str(tokens.shape()));
  // Causal mask: 0 on and below the diagonal, -1e9 above (added before the softmax).
  HostTensor mask(DType::F32, {T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask.set(i * T + j, j > i ? -1e9 : 0.0);
  Tensor causal = Tensor::constant(mask);
  Tensor x = embedding(tok_emb, tokens) + pos_emb;
  for (const Block& b : blocks) {
    Tensor h = affine_layernorm(x, b.ln1_w, b.ln1_b);
    Tensor qkv = linear3(h, b.qkv_w, b.qkv_b);  // [B, T, 3C]
    auto heads = [&](int64_t part) {
      return qkv.slice(2, part * C, (part + 1) * C).reshape({B, T, H, D}).permute({0, 2, 1, 3});
    };
    Tensor q = heads(0), k = heads(1), v = heads(2);
    Tensor att = einsum("bhtd,bhsd->bhts", {q, k}) * (1.0 / std::sqrt(double(D))) + causal;
    Tensor y = einsum("bhts,bhsd->bthd", {att.softmax(-1), v}).reshape({B, T, C});
    x = x + linear3(y, b.proj_w, b.proj_b);
    h = affine_layernorm(x, b.ln2_w, b.ln2_b);
    x = x + linear3(linear3(h, b.fc_w, b.fc_b).gelu(), b.out_w, b.out_b);
  }
  x = affine_layernorm(x, lnf_w, lnf_b);
  return einsum("btc,vc->btv", {x, tok_emb});  // tied head
}

Tensor Gpt::loss(const Tensor& tokens, const Tensor& targets) const {
  int64_t N = cfg.batch * cfg.context;
  return cross_entropy(forward(tokens).reshape({N, cfg.vocab}), targets.reshape({N}));
}

std::vector<Tensor> Gpt::params() const {
  std::vector<Tensor> p = {tok_emb, pos_emb};
  for (const Block& b : blocks)
    for (const Tensor& t : {b.ln1_w, b.ln1_b, b.qkv_w, b.qkv_b, b.proj_w, b.proj_b, b.ln2_w, b.ln2_b,
                            b.fc_w, b.fc_b, b.out_w, b.out_b})
      p.push_back(t);
  p.push_back(lnf_w);
  p.push_back(lnf_b);
  return p;
}

CompiledStep compile_gpt_grad(Gpt& m) {
  Shape s = {m.cfg.batch, m.cfg.context};
  return compile(
      [&m](const std::vector<Tensor>& a) {
        Tensor loss = m.loss(a[0], a[1]);
        loss.backward();
        std::vector<Tensor> out = {loss};
        for (const Tensor& p : m.params()) out.push_back(p.grad());
        return out;
      },
      {{DType::I64, s}, {DType::I64, s}});
}

}  // namespace synoros
