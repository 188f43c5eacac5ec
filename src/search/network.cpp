// Synthesized operators as layers of ResNetMini, and in-engine latency of compiled plans.
#include <algorithm>
#include <chrono>

#include "synoros/search.hpp"

namespace synoros::search {

synth::Spec resnet_conv_spec(int64_t w) {
  std::string t = "input: N, C, H, W; output: N, C, H, W; coef: k=3:4, g=4:3, s=2:1;";
  for (auto [c, h] : resnet_layer_classes(w))
    t += " bind: N=2, C=" + std::to_string(c) + ", H=" + std::to_string(h) + ", W=" + std::to_string(h) + ";";
  t += " cap: C=3, H=0, W=0; fixed: N";
  return synth::parse_spec(t);
}

std::vector<std::pair<int64_t, int64_t>> resnet_layer_classes(int64_t w) { return {{w, 28}, {2 * w, 14}, {4 * w, 7}}; }

namespace {
synth::Binding binding_for(const synth::Spec& spec, const Shape& x) {
  if (x.size() != 4) throw Error("synthesized layer: input must be [N, C, H, W], got " + shape_str(x));
  synth::Binding b;
  for (const synth::Var& v : spec.primary) {
    if (v.name == "N") b.primary.push_back(x[0]);
    else if (v.name == "C") b.primary.push_back(x[1]);
    else if (v.name == "H") b.primary.push_back(x[2]);
    else if (v.name == "W") b.primary.push_back(x[3]);
    else throw Error("synthesized layer: the spec's variable '" + v.name + "' is not one of N, C, H, W");
  }
  return b;
}
}  // namespace

SynthLayer::SynthLayer(const synth::Spec& spec, const synth::Operator& op, int64_t c, int64_t size, uint64_t seed)
    : spec_(spec), op_(op) {
  synth::Binding b = binding_for(spec, {2, c, size, size});
  std::vector<Tensor> w = synth::init_weights(spec, op, b, seed);
  for (size_t i = 0; i < w.size(); ++i) weights_.push_back(register_parameter("w" + std::to_string(i), w[i]));
}

Tensor SynthLayer::forward(const Tensor& x) { return synth::apply(spec_, op_, binding_for(spec_, x.shape()), x, weights_); }

std::shared_ptr<nn::ResNetMini> make_network(const synth::Spec& spec, const synth::Operator* op, unsigned mask,
                                             uint64_t seed, int64_t width) {
  auto classes = resnet_layer_classes(width);
  nn::ConvFactory f;
  if (op)
    f = [&spec, op, mask, classes](int64_t c, int64_t size, uint64_t sd) -> std::shared_ptr<nn::Module> {
      for (size_t i = 0; i < classes.size(); ++i)
        if (classes[i] == std::pair<int64_t, int64_t>{c, size} && (mask >> i & 1u))
          return std::make_shared<SynthLayer>(spec, *op, c, size, sd);
      return nullptr;
    };
  return std::make_shared<nn::ResNetMini>(10, width, 1, seed, f);
}

namespace {
double time_ms(CompiledStep& step, ThreadPool* pool, int repeats) {
  step.plan().set_pool(pool);
  step.run();  // warm up (pinned weights, first-touch pages)
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    step.run();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  step.plan().set_pool(nullptr);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

CompiledStep forward_step(nn::Module& m, Shape in) {
  m.eval();
  CompiledStep s = compile([&m](const std::vector<Tensor>& a) { return std::vector<Tensor>{m(a[0])}; },
                           {{DType::F32, in}});
  s.plan().set_input("arg0", Tensor::randn(in, 7).value());
  return s;
}
}  // namespace

Latency measure_latency(nn::Module& net, int repeats) {
  ThreadPool one(1), two(2);
  Latency l;
  CompiledStep b1 = forward_step(net, {1, 1, 28, 28}), b64 = forward_step(net, {64, 1, 28, 28});
  l.b1_t1 = time_ms(b1, &one, repeats * 4);
  l.b64_t1 = time_ms(b64, &one, repeats);
  l.b1_t2 = time_ms(b1, &two, repeats * 4);
  l.b64_t2 = time_ms(b64, &two, repeats);
  return l;
}

std::vector<double> layer_latency(const synth::Spec& spec, const synth::Operator* op, int repeats, int64_t batch) {
  ThreadPool one(1);
  std::vector<double> out;
  for (size_t b = 0; b < spec.bindings.size(); ++b) {
    synth::Binding bd = synth::binding(spec, b);
    int64_t c = 0, h = 0;
    for (size_t i = 0; i < spec.primary.size(); ++i) {
      if (spec.primary[i].name == "C") c = bd.primary[i];
      if (spec.primary[i].name == "H") h = bd.primary[i];
    }
    std::shared_ptr<nn::Module> layer;
    if (op) layer = std::make_shared<SynthLayer>(spec, *op, c, h, 1);
    else layer = std::make_shared<nn::Conv2d>(c, c, 3, 1, 1, 1, 1, 1, false);
    CompiledStep s = forward_step(*layer, {batch, c, h, h});
    out.push_back(time_ms(s, &one, repeats));
  }
  return out;
}

}  // namespace synoros::search
