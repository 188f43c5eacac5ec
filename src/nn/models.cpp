// The models of the training stack: MLP, LeNet and a small ResNet (the GPT family: gpt.cpp).
#include "synoros/nn.hpp"

namespace synoros::nn {

std::shared_ptr<Sequential> make_mlp(int64_t in, int64_t hidden, int64_t classes, uint64_t seed) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(in, hidden, true, seed));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(hidden, hidden, true, seed + 1));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(hidden, classes, true, seed + 2));
  return m;
}

std::shared_ptr<Sequential> make_lenet(int64_t classes, uint64_t seed) {
  auto m = std::make_shared<Sequential>();
  m->add(std::make_shared<Conv2d>(1, 6, 5, seed, 1, 2));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2, 2));
  m->add(std::make_shared<Conv2d>(6, 16, 5, seed + 1));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<MaxPool2d>(2, 2));
  m->add(std::make_shared<Flatten>());
  m->add(std::make_shared<Linear>(16 * 5 * 5, 120, true, seed + 2));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(120, 84, true, seed + 3));
  m->add(std::make_shared<ReLU>());
  m->add(std::make_shared<Linear>(84, classes, true, seed + 4));
  return m;
}

ResNetMini::ResNetMini(int64_t classes, int64_t w, int64_t blocks, uint64_t seed, const ConvFactory& f) {
  if (w < 1 || blocks < 1) throw Error("ResNetMini: width and blocks per stage must be >= 1");
  conv1 = register_module("conv1", std::make_shared<Conv2d>(1, w, 3, seed++, 1, 1, 1, 1, false));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(w));
  auto stage = [&](int64_t in, int64_t out, int64_t stride, int64_t size) {
    auto s = std::make_shared<Sequential>();
    for (int64_t b = 0; b < blocks; ++b) {
      s->add(std::make_shared<BasicBlock>(b == 0 ? in : out, out, b == 0 ? stride : 1, seed, size, f));
      seed += 3;
    }
    return s;
  };
  layer1 = register_module("layer1", stage(w, w, 1, 28));
  layer2 = register_module("layer2", stage(w, 2 * w, 2, 14));
  layer3 = register_module("layer3", stage(2 * w, 4 * w, 2, 7));
  fc = register_module("fc", std::make_shared<Linear>(4 * w, classes, true, seed));
}

Tensor ResNetMini::forward(const Tensor& x) {
  Tensor y = bn1->forward(conv1->forward(x)).relu();
  y = layer3->forward(layer2->forward(layer1->forward(y)));
  return fc->forward(flatten(adaptive_avg_pool2d(y, 1, 1), 1));
}

}  // namespace synoros::nn
