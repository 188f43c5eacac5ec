// The tiny MLP of the first benchmark: x[8,16] -> Linear(16,32) -> ReLU -> Linear(32,8) -> MSE.
#pragma once

#include <vector>

#include "synoros/nn.hpp"
#include "synoros/tensor.hpp"

namespace synoros::nn {

struct TinyMLP {
  static constexpr int64_t kBatch = 8, kIn = 16, kHidden = 32, kOut = 8;
  Tensor w1, b1, w2, b2;
  // PyTorch's nn.Linear default init (U(+-1/sqrt(fan_in))) from a seeded generator.
  explicit TinyMLP(uint64_t seed);
  Tensor forward(const Tensor& x) const;
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
};

// The same network as the engine's modules (Linear seeded 1 and 2, the Python package's
// spelling of it), for the eager-loop and module benchmarks.
std::shared_ptr<Sequential> tiny_mlp_modules();

// Compiled steps over (x, target): forward+backward returning {loss, dw1, db1, dw2, db2}, or a
// full SGD step returning {loss}.
CompiledStep compile_tiny_mlp_grad(TinyMLP& m);
CompiledStep compile_tiny_mlp_sgd(TinyMLP& m, double lr);

// A fixed synthetic regression task: inputs and the targets of a hidden teacher network.
struct TinyTask {
  HostTensor x, target;
  explicit TinyTask(uint64_t seed);
};

}  // namespace synoros::nn
