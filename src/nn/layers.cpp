// Layers with PyTorch's parameter names, layouts and default initialisation.
#include <cmath>

#include "synoros/gpt.hpp"
#include "synoros/nn.hpp"

namespace synoros::nn {

namespace {
Tensor filled(Shape s, double v, DType t = DType::F32) {
  HostTensor h(t, std::move(s));
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, v);
  return Tensor::from(h);
}
// "...k,nk->...n" for an input of rank r.
std::string linear_spec(size_t r) {
  std::string lead;
  for (size_t i = 0; i + 1 < r; ++i) lead += char('a' + i);
  return lead + "k,nk->" + lead + "n";
}
}  // namespace

Linear::Linear(int64_t in, int64_t out, bool has_bias, uint64_t seed) {
  if (in < 1 || out < 1) throw Error("Linear: features must be >= 1, got " + std::to_string(in) + " -> " + std::to_string(out));
  double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", Tensor::uniform({out, in}, seed, bound));
  if (has_bias) bias = register_parameter("bias", Tensor::uniform({out}, seed + 0x9e37, bound));
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Shape& s = x.shape();
  if (weight.shape().size() != 2) throw Error("linear: weight must be [out, in], got " + shape_str(weight.shape()));
  if (s.empty() || s.back() != weight.shape()[1])
    throw Error("linear: input " + shape_str(s) + " does not end in " + std::to_string(weight.shape()[1]) + " features");
  if (s.size() > 8) throw Error("linear: input rank " + std::to_string(s.size()) + " is above 8");
  // The engine's einsum directly: its labels are distinct and its operands' sizes checked above,
  // so torch's notation (parsed by einsum()) would give this same op.
  Tensor y = Tensor::apply(Op::Einsum, {x, weight}, attr::Einsum{linear_spec(s.size())});
  return bias.defined() ? y + bias : y;
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, uint64_t seed, int64_t s, int64_t p, int64_t d, int64_t g, bool has_bias)
    : stride(s), padding(p), dilation(d), groups(g) {
  if (in < 1 || out < 1 || k < 1 || g < 1 || in % g != 0 || out % g != 0)
    throw Error("Conv2d: bad configuration in=" + std::to_string(in) + " out=" + std::to_string(out) + " kernel=" +
                std::to_string(k) + " groups=" + std::to_string(g));
  double bound = 1.0 / std::sqrt(double(in / g * k * k));
  weight = register_parameter("weight", Tensor::uniform({out, in / g, k, k}, seed, bound));
  if (has_bias) bias = register_parameter("bias", Tensor::uniform({out}, seed + 0x9e37, bound));
}

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, stride, padding, dilation, groups); }

BatchNorm2d::BatchNorm2d(int64_t c, double e, double m) : eps(e), momentum(m) {
  if (c < 1) throw Error("BatchNorm2d: channels must be >= 1");
  weight = register_parameter("weight", filled({c}, 1));
  bias = register_parameter("bias", filled({c}, 0));
  running_mean = register_buffer("running_mean", filled({c}, 0));
  running_var = register_buffer("running_var", filled({c}, 1));
  num_batches_tracked = register_buffer("num_batches_tracked", filled({}, 0, DType::I64));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  int64_t C = weight.shape()[0];
  if (x.shape().size() != 4 || x.shape()[1] != C)
    throw Error("BatchNorm2d: input must be [N, " + std::to_string(C) + ", H, W], got " + shape_str(x.shape()));
  return batch_norm(x, running_mean, running_var, weight, bias, training(), momentum, eps);
}

LayerNorm::LayerNorm(int64_t dim, double e) : eps(e) {
  weight = register_parameter("weight", filled({dim}, 1));
  bias = register_parameter("bias", filled({dim}, 0));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

Embedding::Embedding(int64_t count, int64_t dim, uint64_t seed, double std) {
  weight = register_parameter("weight", Tensor::randn({count, dim}, seed, std));
}

Tensor Embedding::forward(const Tensor& idx) { return embedding(weight, idx); }

Tensor Dropout::forward(const Tensor& x) {
  if (!training() || p == 0.0) return x;
  return x.dropout(p, seed++);
}

CausalSelfAttention::CausalSelfAttention(int64_t w, int64_t h, uint64_t seed) : width(w), heads(h) {
  if (h < 1 || w % h != 0) throw Error("CausalSelfAttention: heads " + std::to_string(h) + " must divide width " + std::to_string(w));
  qkv = register_module("qkv", std::make_shared<Linear>(w, 3 * w, true, seed));
  proj = register_module("proj", std::make_shared<Linear>(w, w, true, seed + 1));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  if (x.shape().size() != 3 || x.shape()[2] != width)
    throw Error("CausalSelfAttention: input must be [B, T, " + std::to_string(width) + "], got " + shape_str(x.shape()));
  int64_t B = x.shape()[0], T = x.shape()[1], C = width, H = heads, D = C / H;
  Tensor q3 = qkv->forward(x);
  auto part = [&](int64_t k) { return q3.slice(2, k * C, (k + 1) * C).reshape({B, T, H, D}).permute({0, 2, 1, 3}); };
  Tensor y = scaled_dot_product_attention(part(0), part(1), part(2), true).permute({0, 2, 1, 3}).reshape({B, T, C});
  return proj->forward(y);
}

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t s, uint64_t seed, int64_t size, const ConvFactory& f) {
  auto conv = [&](int64_t ci, int64_t stride, uint64_t sd) -> std::shared_ptr<Module> {
    if (f && stride == 1 && ci == out) {
      if (auto m = f(out, size, sd)) return m;
    }
    return std::make_shared<Conv2d>(ci, out, 3, sd, stride, 1, 1, 1, false);
  };
  conv1 = register_module("conv1", conv(in, s, seed));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out));
  conv2 = register_module("conv2", conv(out, 1, seed + 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out));
  if (s != 1 || in != out) {
    shortcut = std::make_shared<Sequential>();
    shortcut->add(std::make_shared<Conv2d>(in, out, 1, seed + 2, s, 0, 1, 1, false));
    shortcut->add(std::make_shared<BatchNorm2d>(out));
    register_module("shortcut", shortcut);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = bn2->forward(conv2->forward(bn1->forward(conv1->forward(x)).relu()));
  return (y + (shortcut ? shortcut->forward(x) : x)).relu();
}

}  // namespace synoros::nn
