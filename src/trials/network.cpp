// Synthesized operators as layers of ResNetMini, and in-engine latency of compiled plans.
#include <algorithm>
#include <chrono>

#include "synoros/trials.hpp"

namespace synoros::trials {

synth::Spec resnet_conv_spec(int64_t w) {
  std::string t = "input: N, C, H, W; output: N, C, H, W; coef: k=3:2, g=4:3, s=2:2;";
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

std::shared_ptr<nn::ResNetMini> network_from_actions(const std::string& actions, unsigned mask, uint64_t seed,
                                                     int64_t width, int max_depth) {
  synth::Spec spec = resnet_conv_spec(width);
  synth::Options so;
  so.max_depth = max_depth;
  synth::Synthesizer syn(spec, so);
  synth::Operator op = synth::build_from_actions(syn, parse_actions(actions));
  return make_network(spec, &op, mask, seed, width);  // the layers keep their own copies
}

void check_class_mask(unsigned mask) {
  const size_t n = resnet_layer_classes(1).size();
  if (mask == 0 || mask >> n != 0)
    throw Error("--mask " + std::to_string(mask) + " names no layer class, or one resnet-mini does not have (its " +
                std::to_string(n) + " classes are bits 0 to " + std::to_string(n - 1) + ": a mask of 1 to " +
                std::to_string((1u << n) - 1) + ")");
}

int64_t spatial_footprint(const synth::Spec& spec, const synth::Operator& op) {
  synth::Binding b = synth::binding(spec, 0);
  Shape xs = spec.shape(spec.input, 0);
  if (xs.size() != 4) throw Error("spatial_footprint: the spec's input must be [N, C, H, W]");
  HostTensor x(DType::F32, xs);
  int64_t C = xs[1], H = xs[2], W = xs[3];
  for (int64_t c = 0; c < C; ++c) x.set((c * H + H / 2) * W + W / 2, 1.0);  // image 0, every channel
  std::vector<Tensor> w;
  for (const Shape& s : synth::weight_shapes(spec, op, b)) {
    HostTensor t(DType::F32, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 0.5 + double((i * 7919) % 13) / 13.0);
    w.push_back(Tensor::from(t));
  }
  HostTensor y = synth::apply(spec, op, b, Tensor::from(x), w).value();
  if (y.shape.size() != 4) return 0;
  int64_t count = 0, OC = y.shape[1], OH = y.shape[2], OW = y.shape[3];
  for (int64_t h = 0; h < OH; ++h)
    for (int64_t v = 0; v < OW; ++v) {
      bool any = false;
      for (int64_t c = 0; c < OC && !any; ++c) any = y.get((c * OH + h) * OW + v) != 0;
      count += any;
    }
  return count;
}

std::vector<int> layers_per_class(int64_t width) {
  auto classes = resnet_layer_classes(width);
  std::vector<int> n(classes.size(), 0);
  nn::ConvFactory count = [&](int64_t c, int64_t size, uint64_t) -> std::shared_ptr<nn::Module> {
    for (size_t i = 0; i < classes.size(); ++i)
      if (classes[i] == std::pair<int64_t, int64_t>{c, size}) ++n[i];
    return nullptr;
  };
  nn::ResNetMini probe(10, width, 1, 1, count);
  return n;
}

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

double cost_model_ms(const Plan& plan) {
  // Fixed rates (a 100 GFLOP/s core, 20 GB/s of memory), not this machine's: the estimate must
  // not depend on where or when it is computed.
  constexpr double kFlopsPerMs = 100e6, kBytesPerMs = 20e6;
  const Graph& g = plan.graph();
  double ms = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.node(ValueId(i));
    const OpInfo& info = op_info(n.op);
    if (info.kind == OpKind::Leaf || !info.cost) continue;
    Cost c = info.cost(g, n);
    ms += std::max(c.flops / kFlopsPerMs, c.bytes / kBytesPerMs);
  }
  return ms;
}

namespace {
PlanTimer& timer_slot() {
  static PlanTimer t;
  return t;
}

double run_ms(CompiledStep& step) {
  if (const PlanTimer& timer = timer_slot()) return timer(step.plan());
  auto t0 = std::chrono::steady_clock::now();
  step.run();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median of `repeats` runs after a warm-up; when the warm-up alone takes longer than
// `give_up_ms`, that time is returned without repeating it.
double time_ms(CompiledStep& step, ThreadPool* pool, int repeats, double give_up_ms = 1e300) {
  step.plan().set_pool(pool);
  double warm = run_ms(step);  // warm up (pinned weights, first-touch pages)
  std::vector<double> t = {warm};
  if (warm <= give_up_ms) {
    if (!timer_slot()) step.run();  // the second run recompiles hot groups: not a sample
    t.clear();
    for (int r = 0; r < std::max(repeats, 1); ++r) t.push_back(run_ms(step));
  }
  step.plan().set_pool(nullptr);
  return median(t);
}

CompiledStep forward_step(nn::Module& m, Shape in) {
  m.eval();
  CompiledStep s = compile([&m](const std::vector<Tensor>& a) { return std::vector<Tensor>{m(a[0])}; },
                           {{DType::F32, in}});
  s.plan().set_input("arg0", Tensor::randn(in, 7).value());
  return s;
}
}  // namespace

void set_plan_timer(PlanTimer timer) { timer_slot() = std::move(timer); }

double timed_run_ms(CompiledStep& step) { return run_ms(step); }

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

std::pair<double, double> paired_latency(nn::Module& a, nn::Module& b, int repeats, int threads, int64_t batch) {
  ThreadPool pool(std::max(threads, 1));
  CompiledStep sa = forward_step(a, {batch, 1, 28, 28}), sb = forward_step(b, {batch, 1, 28, 28});
  std::vector<double> ta, tb;
  // Warm up, twice: the second run recompiles hot groups (Plan::run), which is no sample.
  for (CompiledStep* s : {&sa, &sb}) s->plan().set_pool(&pool), s->run(), s->run();
  for (int r = 0; r < std::max(repeats, 1); ++r) {  // ABBA: neither always goes first
    if (r % 2 == 0) ta.push_back(run_ms(sa)), tb.push_back(run_ms(sb));
    else tb.push_back(run_ms(sb)), ta.push_back(run_ms(sa));
  }
  for (CompiledStep* s : {&sa, &sb}) s->plan().set_pool(nullptr);
  return {median(ta), median(tb)};
}

std::vector<double> layer_latency(const synth::Spec& spec, const synth::Operator* op, int repeats, int64_t batch,
                                  const std::vector<double>* give_up_ms) {
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
    double limit = give_up_ms && b < give_up_ms->size() ? (*give_up_ms)[b] : 1e300;
    out.push_back(time_ms(s, &one, repeats, limit));
    if (out.back() > limit) {  // hopeless: the other classes are not timed
      out.resize(spec.bindings.size(), out.back());
      break;
    }
  }
  return out;
}

}  // namespace synoros::trials
