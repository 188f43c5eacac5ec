// Convolution, pooling and friends expressed as views + contraction: the engine folds the
// padded, unfolded, strided input straight into the GEMM's operand gather.
#include <atomic>
#include <cmath>
#include <limits>

#include "synoros/nn.hpp"

namespace synoros::nn {

std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs) {
  RecomputeScope segment;
  return fn(inputs);
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x) {
  RecomputeScope segment;
  return fn(x);
}

namespace {
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

void check4(const char* op, const Tensor& x) {
  if (x.shape().size() != 4) throw Error(std::string(op) + ": input must be [N, C, H, W], got " + shape_str(x.shape()));
}

// Windows of x [.., H, W] (last two axes): [.., Ho, Wo, kh, kw], zero outside the input.
Tensor windows(const Tensor& x, int64_t kh, int64_t kw, int64_t s, int64_t p, int64_t d, const char* op) {
  size_t r = x.shape().size();
  int64_t ah = int64_t(r) - 2, aw = int64_t(r) - 1;
  int64_t H = x.shape()[r - 2], W = x.shape()[r - 1];
  if (kh < 1 || kw < 1 || s < 1 || p < 0 || d < 1)
    throw Error(std::string(op) + ": kernel, stride and dilation must be >= 1 and padding >= 0");
  int64_t Ho = out_size(H, kh, s, p, d), Wo = out_size(W, kw, s, p, d);
  if (Ho < 1 || Wo < 1)
    throw Error(std::string(op) + ": input " + shape_str(x.shape()) + " is smaller than the " + std::to_string(kh) + "x" +
                std::to_string(kw) + " window");
  // Unfold zero-pads around a window centred at c = (k-1)/2: with stride s, position i reads
  // i*s + (j - c)*d. Output row ho must read ho*s + j*d - p, i.e. i*s = ho*s + (c*d - p):
  // padding beyond c*d is an explicit pad, less is a cut of the unfolded rows. A "same"
  // convolution is just two (strided) unfolds, whose adjoints are two (strided) folds.
  auto axis_windows = [&](Tensor u, int64_t axis, int64_t k, int64_t out) {
    int64_t shift = (k - 1) / 2 * d - p;
    if (shift < 0) u = u.pad(axis, -shift, -shift), shift = 0;
    if (shift % s == 0) {
      u = u.unfold(axis, k, d, s);
      int64_t start = shift / s;
      if (start != 0 || u.shape()[size_t(axis)] != out) u = u.slice(axis, start, start + out);
      return u;
    }
    return u.unfold(axis, k, d).slice(axis, shift, shift + (out - 1) * s + 1).stride(axis, s);
  };
  // Each unfold appends its window axis; the h window must end up before the w window.
  Tensor u = axis_windows(x, ah, kh, Ho);  // [.., Ho, W, kh]
  u = axis_windows(u, aw, kw, Wo);         // [.., Ho, Wo, kh, kw]
  return u;
}
}  // namespace

namespace {
std::atomic<bool> winograd_on{true};
}  // namespace
bool winograd_convolutions() { return winograd_on.load(); }
void set_winograd_convolutions(bool on) { winograd_on.store(on); }

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t s, int64_t p, int64_t d, int64_t groups) {
  check4("conv2d", x);
  if (w.shape().size() != 4) throw Error("conv2d: weight must be [O, C/groups, kh, kw], got " + shape_str(w.shape()));
  int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  int64_t O = w.shape()[0], kh = w.shape()[2], kw = w.shape()[3];
  if (groups < 1 || C % groups != 0 || O % groups != 0)
    throw Error("conv2d: groups " + std::to_string(groups) + " must divide input channels " + std::to_string(C) +
                " and output channels " + std::to_string(O));
  if (w.shape()[1] != C / groups)
    throw Error("conv2d: weight " + shape_str(w.shape()) + " does not match input " + shape_str(x.shape()) +
                " with groups " + std::to_string(groups));
  Tensor y;
  if (groups == 1 && kh == 3 && kw == 3 && s == 1 && d == 1 && p >= 0 && p <= 2 && C >= 8 && O >= 8 &&
      H + 2 * p > 2 && W + 2 * p > 2 && x.dtype() == DType::F32 && w.dtype() == DType::F32 && winograd_convolutions()) {
    y = Tensor::apply(Op::Conv3x3, {x, w}, attr::Conv3x3{p, false});
  } else if (groups == 1) {
    y = einsum("nchwxy,ocxy->nohw", {windows(x, kh, kw, s, p, d, "conv2d"), w});
  } else {
    int64_t G = groups;
    Tensor u = windows(x.reshape({N, G, C / G, H, W}), kh, kw, s, p, d, "conv2d");
    y = einsum("ngchwxy,gocxy->ngohw", {u, w.reshape({G, O / G, C / G, kh, kw})});
    y = y.reshape({N, O, y.shape()[3], y.shape()[4]});
  }
  if (bias.defined()) {
    if (bias.shape() != Shape{O}) throw Error("conv2d: bias must be [" + std::to_string(O) + "], got " + shape_str(bias.shape()));
    y = y + bias.reshape({O, 1, 1});
  }
  return y;
}

Tensor max_pool2d(const Tensor& x, int64_t k, int64_t s, int64_t p) {
  check4("max_pool2d", x);
  int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (p == 0 && k == s && k >= 1 && H % k == 0 && W % k == 0)  // tiles: a reshape and a max
    return x.reshape({N, C, H / k, k, W / k, k}).max({3, 5});
  if (p > k / 2) throw Error("max_pool2d: padding must be at most half the kernel");
  if (p == 0) return windows(x, k, k, s, 0, 1, "max_pool2d").max({4, 5});
  // Padding must never win the max: padded positions are pushed to -1e30 through a 0/1 mask.
  Tensor ones = Tensor::constant(Tensor::zeros({1, 1, H, W}).value()) + 1.0;
  Tensor mask = windows(ones, k, k, s, p, 1, "max_pool2d");
  return (windows(x, k, k, s, p, 1, "max_pool2d") + (mask - 1.0) * 1e30).max({4, 5});
}

Tensor avg_pool2d(const Tensor& x, int64_t k, int64_t s, int64_t p) {
  check4("avg_pool2d", x);
  int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (p == 0 && k == s && k >= 1 && H % k == 0 && W % k == 0)
    return x.reshape({N, C, H / k, k, W / k, k}).mean({3, 5});
  return windows(x, k, k, s, p, 1, "avg_pool2d").mean({4, 5});  // zero padding counts (PyTorch's default)
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t oh, int64_t ow) {
  check4("adaptive_avg_pool2d", x);
  int64_t H = x.shape()[2], W = x.shape()[3];
  if (oh == 1 && ow == 1) return x.mean({2, 3}, true);
  if (oh < 1 || ow < 1 || H % oh != 0 || W % ow != 0)
    throw Error("adaptive_avg_pool2d: output " + std::to_string(oh) + "x" + std::to_string(ow) +
                " must divide the input's " + std::to_string(H) + "x" + std::to_string(W));
  int64_t N = x.shape()[0], C = x.shape()[1];
  return x.reshape({N, C, oh, H / oh, ow, W / ow}).mean({3, 5});
}

Tensor silu(const Tensor& x) { return x * x.sigmoid(); }

Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps) {
  const Shape& s = x.shape();
  if (s.size() < 2) throw Error("batch_norm: input must be [N, C, ...], got " + shape_str(s));
  int64_t C = s[1];
  for (const Tensor* p : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (p->defined() && p->shape() != Shape{C})
      throw Error("batch_norm: statistics, weight and bias must be [" + std::to_string(C) + "], got " + shape_str(p->shape()));
  Shape per_channel(s.size() - 1, 1);  // [C, 1, ...] broadcasts over [N, C, ...]
  per_channel[0] = C;
  Tensor w = weight.defined() ? weight : Tensor::ones({C}, x.dtype());
  Tensor b = bias.defined() ? bias : Tensor::zeros({C}, x.dtype());
  if (!training) {
    if (!running_mean.defined() || !running_var.defined())
      throw Error("batch_norm: evaluation needs running_mean and running_var");
    Tensor inv = Tensor::apply(Op::Rsqrt, {running_var + eps});
    return (x - running_mean.reshape(per_channel)) * (inv.reshape(per_channel) * w.reshape(per_channel)) +
           b.reshape(per_channel);
  }
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < int64_t(s.size()); ++d) axes.push_back(d);
  int64_t n = x.numel() / std::max<int64_t>(1, C);
  if (n <= 1) throw Error("batch_norm: training needs more than one value per channel, got input " + shape_str(s));
  Tensor mean = x.mean(axes, true);
  Tensor centered = x - mean;
  Tensor var = (centered * centered).mean(axes, true);
  // The normalisation as one op whose gradient is batch norm's own (two reductions and one
  // pass; see vjp_batchnorm) rather than the derivative of the statistics' graph. The forward
  // bits are those of centered * (rsqrt(var + eps) * w) + b.
  // batch_stats: mean and var are x's batch statistics, so the gradient to x goes through them.
  Tensor y = Tensor::apply(Op::BatchNorm, {x, mean.reshape({C}), var.reshape({C}), w, b}, attr::BatchNorm{eps, true});
  double unbias = double(n) / double(n - 1);
  if (running_mean.defined()) running_mean.assign(running_mean * (1 - momentum) + mean.reshape({C}) * momentum);
  if (running_var.defined()) running_var.assign(running_var * (1 - momentum) + var.reshape({C}) * (momentum * unbias));
  return y;
}

Tensor flatten(const Tensor& x, int64_t start) {
  const Shape& s = x.shape();
  if (start < 0 || size_t(start) > s.size()) throw Error("flatten: start dim " + std::to_string(start) + " out of range for " + shape_str(s));
  Shape o(s.begin(), s.begin() + start);
  int64_t rest = 1;
  for (size_t i = size_t(start); i < s.size(); ++i) rest *= s[i];
  o.push_back(rest);
  return x.reshape(o);
}

int64_t count_correct(const HostTensor& logits, const HostTensor& labels) {
  if (logits.shape.size() != 2 || labels.shape.size() != 1 || labels.shape[0] != logits.shape[0])
    throw Error("count_correct: logits " + shape_str(logits.shape) + " and labels " + shape_str(labels.shape) + " do not match");
  int64_t n = logits.shape[0], k = logits.shape[1], correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (logits.get(i * k + j) > logits.get(i * k + best)) best = j;
    correct += int64_t(labels.get(i)) == best;
  }
  return correct;
}

}  // namespace synoros::nn
