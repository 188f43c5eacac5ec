#include "synoros/tiny_mlp.hpp"

#include "synoros/nn.hpp"
#include "synoros/optim.hpp"

#include <cmath>

namespace synoros::nn {

TinyMLP::TinyMLP(uint64_t seed) {
  w1 = Tensor::uniform({kHidden, kIn}, seed, 1.0 / std::sqrt(double(kIn)));
  b1 = Tensor::uniform({kHidden}, seed + 1, 1.0 / std::sqrt(double(kIn)));
  w2 = Tensor::uniform({kOut, kHidden}, seed + 2, 1.0 / std::sqrt(double(kHidden)));
  b2 = Tensor::uniform({kOut}, seed + 3, 1.0 / std::sqrt(double(kHidden)));
  for (Tensor* p : {&w1, &b1, &w2, &b2}) p->requires_grad();
}

Tensor TinyMLP::forward(const Tensor& x) const { return nn::linear(nn::linear(x, w1, b1).relu(), w2, b2); }

namespace {
std::vector<std::pair<DType, Shape>> tiny_args() {
  return {{DType::F32, {TinyMLP::kBatch, TinyMLP::kIn}}, {DType::F32, {TinyMLP::kBatch, TinyMLP::kOut}}};
}
}  // namespace

CompiledStep compile_tiny_mlp_grad(TinyMLP& m) {
  return compile(
      [&m](const std::vector<Tensor>& a) {
        Tensor loss = mse_loss(m.forward(a[0]), a[1]);
        loss.backward();
        std::vector<Tensor> out = {loss};
        for (const Tensor& p : m.params()) out.push_back(p.grad());
        return out;
      },
      tiny_args());
}

CompiledStep compile_tiny_mlp_sgd(TinyMLP& m, double lr) {
  return compile(
      [&m, lr](const std::vector<Tensor>& a) {
        Tensor loss = mse_loss(m.forward(a[0]), a[1]);
        loss.backward();
        optim::SGD opt(m.params(), lr);
        opt.step();
        return std::vector<Tensor>{loss};
      },
      tiny_args());
}

TinyTask::TinyTask(uint64_t seed) {
  x = Tensor::randn({TinyMLP::kBatch, TinyMLP::kIn}, seed).value();
  Tensor teacher = Tensor::randn({TinyMLP::kOut, TinyMLP::kIn}, seed + 7, 0.5);
  target = Tensor::from(x).matmul(teacher.transpose()).tanh().value();
}

std::shared_ptr<Sequential> tiny_mlp_modules() {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Linear>(TinyMLP::kIn, TinyMLP::kHidden, true, 1));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(TinyMLP::kHidden, TinyMLP::kOut, true, 2));
  return m;
}

}  // namespace synoros::nn
