// Modules in PyTorch's shape: named parameters and buffers with PyTorch's names and layouts, so a
// state_dict maps one to one onto the same model written with torch.nn.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "synoros/tensor.hpp"

namespace synoros::nn {

using Named = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Recursive, in PyTorch's order: own parameters, own buffers, then each child in turn.
  Named named_parameters() const;
  Named named_buffers() const;
  Named state_dict() const;
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> buffers() const;
  int64_t parameter_count() const;

  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

 protected:
  Tensor& register_parameter(std::string name, Tensor t);
  Tensor& register_buffer(std::string name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    children_.emplace_back(std::move(name), m);
    return m;
  }

 private:
  void collect(const std::string& prefix, bool params, bool buffers, Named& out) const;
  Named params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

// ---- functional forms (also under nn::functional, PyTorch's torch.nn.functional)
// x [..., in] @ weight[out, in]^T + bias [out] (bias may be undefined), as torch's F.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// x [N, C, H, W], w [O, C/groups, kh, kw], bias [O] or undefined. A float32 3x3 convolution with
// stride 1, dilation 1, one group, padding at most 2 and at least 8 input and output channels is
// the conv3x3 op (Winograd's F(4x4, 3x3), whose rounding is part of its definition); every other
// is a contraction over the input's windows (one FMA chain per output).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1, int64_t groups = 1);
// Whether conv2d builds conv3x3 ops where they apply (on by default). Off, those convolutions are
// contractions too, which round differently.
bool winograd_convolutions();
void set_winograd_convolutions(bool on);
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding = 0);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor silu(const Tensor& x);
// torch.nn.functional.batch_norm over x [N, C, ...]. Training: normalises with the batch's
// statistics and, where running_mean/running_var are given (realized leaves), updates them in
// place (momentum, unbiased variance); the gradient is batch norm's own. Otherwise: normalises
// with the running statistics. weight and bias [C] may be undefined (1 and 0).
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5);
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
// Activation checkpointing (torch.utils.checkpoint.checkpoint): runs fn now, but backward()
// keeps none of the values it computes except its results; what the gradients need of them is
// computed again from the inputs just before it is needed. Memory for a second forward pass of
// fn; the gradients are the same bits. Works eagerly and inside compile().
std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x);
namespace functional {
using nn::adaptive_avg_pool2d;
using nn::avg_pool2d;
using nn::batch_norm;
using nn::conv2d;
using nn::flatten;
using nn::linear;
using nn::max_pool2d;
using nn::silu;
}  // namespace functional
// Fraction-free accuracy helper: number of rows whose largest logit is at the label (ties count
// for the first maximum, as torch.argmax).
int64_t count_correct(const HostTensor& logits, const HostTensor& labels);

// ---- layers
// Parameters are initialised as PyTorch does (kaiming-uniform weights, U(+-1/sqrt(fan_in))
// biases), from a seeded generator: the same seed gives the same bits everywhere.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in, int64_t out, int64_t kernel, uint64_t seed, int64_t stride = 1, int64_t padding = 0,
         int64_t dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t stride, padding, dilation, groups;
};

// Training: normalises with batch statistics and updates the running ones (momentum 0.1,
// unbiased variance) as part of the step; eval: uses the running statistics.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  double eps, momentum;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  double eps;
};

class Embedding : public Module {
 public:
  Embedding(int64_t count, int64_t dim, uint64_t seed, double std = 1.0);
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
};

// Inverted dropout from a counter-based generator. Each call draws a fresh stream (the seed
// advances per forward); a compiled step replays the stream it was traced with.
class Dropout : public Module {
 public:
  Dropout(double prob, uint64_t seed0) : p(prob), seed(seed0) {}
  Tensor forward(const Tensor& x) override;
  double p;
  uint64_t seed;
};

class MaxPool2d : public Module {
 public:
  MaxPool2d(int64_t kernel, int64_t stride_, int64_t padding = 0) : k(kernel), s(stride_), p(padding) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, k, s, p); }
  int64_t k, s, p;
};
class AvgPool2d : public Module {
 public:
  AvgPool2d(int64_t kernel, int64_t stride, int64_t padding = 0) : k(kernel), s(stride), p(padding) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, k, s, p); }
  int64_t k, s, p;
};
class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : h(out_h), w(out_w) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, h, w); }
  int64_t h, w;
};
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.relu(); }
};
// PyTorch's nn.GELU: approximate "none" (the erf form) or "tanh" (GPT-2's).
class GELU : public Module {
 public:
  explicit GELU(const std::string& approximate = "none") : tanh_(approximate == "tanh") {
    if (approximate != "none" && approximate != "tanh")
      throw Error("GELU: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
  }
  Tensor forward(const Tensor& x) override { return tanh_ ? x.gelu_tanh() : x.gelu(); }

 private:
  bool tanh_;
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x, 1); }
};

// Children named "0", "1", ... as torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(ModulePtr m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<ModulePtr> layers_;
};

// Causal multi-head self-attention over x [B, T, C]: qkv = Linear(C, 3C), proj = Linear(C, C);
// the heads run through the fused attention op (scaled_dot_product_attention).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t width, int64_t heads, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Linear> qkv, proj;
  int64_t width, heads;
};

// Makes the layer that stands in for a stride-1 3x3 convolution with `channels` in and out at
// `size` x `size` pixels (the operator synthesizer plugs its candidates in here); null: a Conv2d.
using ConvFactory = std::function<std::shared_ptr<Module>(int64_t channels, int64_t size, uint64_t seed)>;

// ResNet basic block: conv3x3-BN-ReLU-conv3x3-BN plus the (projected when the shape changes)
// input, then ReLU.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, uint64_t seed, int64_t size = 0, const ConvFactory& f = {});
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Module> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> shortcut;  // empty when the input passes through unchanged
};

// ---- models
// [N, 1, 28, 28] -> 784 -> hidden -> hidden -> classes.
std::shared_ptr<Sequential> make_mlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed);
// LeNet-5 style: conv5x5(6, pad 2)-ReLU-maxpool2, conv5x5(16)-ReLU-maxpool2, 120-84-classes.
std::shared_ptr<Sequential> make_lenet(int64_t classes, uint64_t seed);

// A small ResNet for 28x28 inputs: stem conv3x3(width)-BN-ReLU, three stages of basic blocks
// (width, 2 width stride 2, 4 width stride 2), global average pooling, Linear.
class ResNetMini : public Module {
 public:
  ResNetMini(int64_t classes, int64_t width, int64_t blocks_per_stage, uint64_t seed, const ConvFactory& f = {});
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<Sequential> layer1, layer2, layer3;
  std::shared_ptr<Linear> fc;
};

}  // namespace synoros::nn
