// The README's quick start, built by an outside project against the installed tree.
#include <cstdio>

#include "synoros/synoros.hpp"
using namespace synoros;

int main() {
  // A model from nn modules (PyTorch's names, layouts and initialisation).
  nn::Sequential model;
  model.add(std::make_shared<nn::Linear>(16, 32, /*bias=*/true, /*seed=*/1));
  model.add(std::make_shared<nn::ReLU>());
  model.add(std::make_shared<nn::Linear>(32, 4, true, 2));
  optim::SGD opt(model.parameters(), /*lr=*/0.02, /*momentum=*/0.9);

  Tensor x = Tensor::randn({8, 16}, 3), y = Tensor::randn({8, 4}, 4);
  // Eager: operations are recorded lazily and run as one planned, fused graph when read.
  Tensor loss = mse_loss(model(x), y);
  loss.backward();
  opt.step();
  std::printf("eager loss %.4f\n", loss.item());

  // Compiled: trace the whole step (forward, backward, update) once, replay it.
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor l = mse_loss(model(a[0]), a[1]);
        l.backward();
        opt.step();
        return std::vector<Tensor>{l};
      },
      {{DType::F32, {8, 16}}, {DType::F32, {8, 4}}});
  for (int i = 0; i < 100; ++i) {
    opt.tick();
    double l = step({x.value(), y.value()})[0].get(0);
    if (i % 25 == 0) std::printf("step %d loss %.4f\n", i, l);
  }
}
