// Google Benchmark cases, named after the side-by-side scenarios (bench/compare.py).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "kernels/providers.hpp"
#include "synoros/config.hpp"
#include "synoros/synoros.hpp"
#include "synoros/tiny_mlp.hpp"

namespace {
using namespace synoros;

// Two runs before timing: a plan's second run recompiles its hot groups (generated kernels), which
// is compile time, not step time.
void warm(CompiledStep& step) {
  step.run();
  step.run();
}
void warm(Plan& plan) {
  plan.run();
  plan.run();
}

void load(CompiledStep& step, const nn::TinyTask& task) {
  std::memcpy(step.input_ptr(0), task.x.buffer->data(), task.x.bytes());
  std::memcpy(step.input_ptr(1), task.target.buffer->data(), task.target.bytes());
}

// Forward + backward: loss and the gradients of all four parameters.
void TinyMLP_FwdBwd(benchmark::State& state) {
  nn::TinyTask task(1);
  nn::TinyMLP m(2);
  CompiledStep step = nn::compile_tiny_mlp_grad(m);
  load(step, task);
  warm(step);
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.counters["launches"] = double(step.plan().launches().size());
}
BENCHMARK(TinyMLP_FwdBwd)->Name("TinyMLP/FwdBwd");

// Forward + backward + SGD update of all parameters.
void TinyMLP_Sgd(benchmark::State& state) {
  nn::TinyTask task(1);
  nn::TinyMLP m(2);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, 1e-3);
  load(step, task);
  warm(step);
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
}
BENCHMARK(TinyMLP_Sgd)->Name("TinyMLP/SgdStep");

// The same step built as the Python package builds it (bench/python_compare.py): nn modules,
// optim::SGD and compile(), so that Python's replay can be set against this replay.
void TinyMLP_SgdModules(benchmark::State& state) {
  nn::TinyTask task(1);
  std::shared_ptr<nn::Sequential> mlp = nn::tiny_mlp_modules();
  nn::Sequential& model = *mlp;
  optim::SGD opt(model.parameters(), 1e-3);
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        opt.zero_grad();
        Tensor loss = mse_loss(model(a[0]), a[1]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss};
      },
      {{DType::F32, {8, 16}}, {DType::F32, {8, 8}}});
  load(step, task);
  warm(step);
  for (auto _ : state) {
    opt.tick();
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
}
BENCHMARK(TinyMLP_SgdModules)->Name("TinyMLP/SgdStepModules");

// The same step run eagerly, as a training loop written without compile() runs it: the forward
// recorded every iteration, backward() replaying the recorded step, the update replayed.
void TinyMLP_SgdEager(benchmark::State& state) {
  std::shared_ptr<nn::Sequential> mlp = nn::tiny_mlp_modules();
  nn::Sequential& model = *mlp;
  optim::SGD opt(model.parameters(), 1e-3);
  Tensor x = Tensor::randn({8, 16}, 1), t = Tensor::randn({8, 8}, 2);
  for (auto _ : state) {
    opt.zero_grad();
    Tensor loss = mse_loss(model(x), t);
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.impl());
  }
}
BENCHMARK(TinyMLP_SgdEager)->Name("TinyMLP/SgdStepEager");

// y = tanh((sigmoid(relu(x*1.5 + 0.5) * x) - 0.25) * 2) over x[1024, 1024], out of place.
Tensor eltwise_chain(const Tensor& x) { return ((((x * 1.5 + 0.5).relu() * x).sigmoid() - 0.25) * 2.0).tanh(); }

void time_step(benchmark::State& state, CompiledStep& step, const std::vector<std::pair<DType, Shape>>& specs,
               int64_t bytes, const std::vector<Tensor>& changed = {});
// The storage of leaves (parameters), and marking it changed, as an optimizer's update would.
std::vector<std::shared_ptr<Buffer>> storage_of(const std::vector<Tensor>& leaves) {
  std::vector<std::shared_ptr<Buffer>> out;
  for (const Tensor& t : leaves) out.push_back(t.value().buffer);
  return out;
}
void mark_changed(const std::vector<std::shared_ptr<Buffer>>& storage) {
  for (const auto& b : storage) b->mark_modified();
}
// A compiled step, timed as users get it (Recompile on the second run: generated kernels where
// they win; SYNOROS_NO_JIT=1 turns them off) or, with `interpreter`, with generated kernels off.
void run_fused(benchmark::State& state, const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
               const std::vector<std::pair<DType, Shape>>& specs, int64_t bytes, bool interpreter) {
  std::optional<config::ScopedOverride> off;
  if (interpreter) off.emplace("SYNOROS_NO_JIT", "1");
  CompiledStep step = compile(f, specs);
  time_step(state, step, specs, bytes);
}
// Times a compiled step on random inputs of `specs`. `changed`: weights an optimizer would
// change between steps, marked changed before each (a plan keeps a weight packed only while it
// does not change, so a training step packs its weights every time).
void time_step(benchmark::State& state, CompiledStep& step, const std::vector<std::pair<DType, Shape>>& specs,
               int64_t bytes, const std::vector<Tensor>& changed) {
  for (size_t i = 0; i < specs.size(); ++i) {
    HostTensor x = Tensor::randn(specs[i].second, 3 + i).value();
    std::memcpy(step.input_ptr(i), x.buffer->data(), x.bytes());
  }
  warm(step);
  const auto weights = storage_of(changed);
  for (auto _ : state) {
    mark_changed(weights);
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
  state.counters["launches"] = double(step.plan().launches().size());
  int generated = 0;
  for (const LaunchInfo& li : step.plan().launch_info()) generated += li.kernel.find("generated") != std::string::npos;
  state.counters["generated"] = generated;
}
void run_elementwise(benchmark::State& state, const std::function<Tensor(const std::vector<Tensor>&)>& f,
                     const std::vector<std::pair<DType, Shape>>& specs, int64_t bytes, bool interpreter) {
  run_fused(state, [&f](const std::vector<Tensor>& a) { return std::vector<Tensor>{f(a)}; }, specs, bytes,
            interpreter);
}

void EltwiseChain(benchmark::State& state, bool interpreter) {
  run_elementwise(state, [](const std::vector<Tensor>& a) { return eltwise_chain(a[0]); }, {{DType::F32, {1024, 1024}}},
                  2 * 1024 * 1024 * 4, interpreter);
}
BENCHMARK_CAPTURE(EltwiseChain, jit, false)->Name("EltwiseChain")->UseRealTime();
BENCHMARK_CAPTURE(EltwiseChain, interpreter, true)->Name("EltwiseChain/interpreter")->UseRealTime();

// GPT-2's MLP activation: gelu_tanh(x + bias) over [8*512, 3072].
void BiasGeluTanh(benchmark::State& state, bool interpreter) {
  run_elementwise(state, [](const std::vector<Tensor>& a) { return (a[0] + a[1]).gelu_tanh(); },
                  {{DType::F32, {4096, 3072}}, {DType::F32, {3072}}}, 2 * 4096 * 3072 * 4, interpreter);
}
BENCHMARK_CAPTURE(BiasGeluTanh, jit, false)->Name("BiasGeluTanh")->UseRealTime();
BENCHMARK_CAPTURE(BiasGeluTanh, interpreter, true)->Name("BiasGeluTanh/interpreter")->UseRealTime();

// Softmax over the last axis of [8*12*512, 512]: attention's scores at GPT-2's width, sequence 512.
void SoftmaxRows(benchmark::State& state, bool interpreter) {
  run_elementwise(state, [](const std::vector<Tensor>& a) { return a[0].softmax(-1); },
                  {{DType::F32, {8 * 12 * 512, 512}}}, 2 * int64_t(8 * 12 * 512) * 512 * 4, interpreter);
}
BENCHMARK_CAPTURE(SoftmaxRows, jit, false)->Name("Softmax")->UseRealTime();
BENCHMARK_CAPTURE(SoftmaxRows, interpreter, true)->Name("Softmax/interpreter")->UseRealTime();

// LayerNorm over [8*512, 768] with weight and bias, forward.
void LayerNormFwd(benchmark::State& state, bool interpreter) {
  run_elementwise(state, [](const std::vector<Tensor>& a) { return layer_norm(a[0], a[1], a[2]); },
                  {{DType::F32, {4096, 768}}, {DType::F32, {768}}, {DType::F32, {768}}}, 2 * 4096 * 768 * 4,
                  interpreter);
}
BENCHMARK_CAPTURE(LayerNormFwd, jit, false)->Name("LayerNorm")->UseRealTime();
BENCHMARK_CAPTURE(LayerNormFwd, interpreter, true)->Name("LayerNorm/interpreter")->UseRealTime();

// LayerNorm forward and backward: y and the gradients of x, weight and bias for an upstream
// gradient g (PyTorch: y.backward(g)). Traffic counted: x and y forward; x, g and dx backward.
void LayerNormFwdBwd(benchmark::State& state, bool interpreter) {
  Tensor x = Tensor::randn({4096, 768}, 11), w = Tensor::randn({768}, 12), b = Tensor::randn({768}, 13);
  for (Tensor* t : {&x, &w, &b}) t->requires_grad().stateful();
  run_fused(
      state,
      [&](const std::vector<Tensor>& a) {
        Tensor y = layer_norm(x, w, b);
        (y * a[0]).sum().backward();
        return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
      },
      {{DType::F32, {4096, 768}}}, 5 * 4096 * 768 * 4, interpreter);
}
BENCHMARK_CAPTURE(LayerNormFwdBwd, jit, false)->Name("LayerNormFwdBwd")->UseRealTime();
BENCHMARK_CAPTURE(LayerNormFwdBwd, interpreter, true)->Name("LayerNormFwdBwd/interpreter")->UseRealTime();

// Cross-entropy over GPT-2's vocabulary (50,257) for 4*128 tokens: the mean loss and the logits'
// gradient (PyTorch: F.cross_entropy(x, t).backward()). Traffic counted: x read by the loss, read
// by the gradient and the gradient written.
void CrossEntropyFwdBwd(benchmark::State& state, bool interpreter) {
  constexpr int64_t kTokens = 512, kVocab = 50257;
  Tensor x = Tensor::randn({kTokens, kVocab}, 11);
  x.requires_grad().stateful();
  HostTensor t(DType::I64, {kTokens});
  for (int64_t i = 0; i < kTokens; ++i) t.set(i, double((i * 7919) % kVocab));
  const Tensor targets = Tensor::constant(t);
  run_fused(
      state,
      [&](const std::vector<Tensor>& a) {
        Tensor loss = cross_entropy(x, targets) * a[0];
        loss.backward();
        return std::vector<Tensor>{loss, x.grad()};
      },
      {{DType::F32, {}}}, 3 * kTokens * kVocab * 4, interpreter);
}
BENCHMARK_CAPTURE(CrossEntropyFwdBwd, jit, false)->Name("CrossEntropyFwdBwd")->UseRealTime();
BENCHMARK_CAPTURE(CrossEntropyFwdBwd, interpreter, true)->Name("CrossEntropyFwdBwd/interpreter")->UseRealTime();

// Causal attention at B=8, H=12, T=512, D=64: the fused op, and (/composed) the graph it
// replaces: scores, scale, mask, softmax, weighted values. Counted FLOPs: the causal half of both
// products, 2*B*H*T*T*D.
Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t T = q.shape()[2], D = q.shape()[3];
  HostTensor mask(DType::F32, {T, T});
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) mask.set(i * T + j, j > i ? -1e9 : 0.0);
  Tensor att = einsum("bhtd,bhsd->bhts", {q, k}) * (1.0 / std::sqrt(double(D))) + Tensor::constant(mask);
  return einsum("bhts,bhsd->bhtd", {att.softmax(-1), v});
}
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool composed) {
  return composed ? composed_attention(q, k, v) : scaled_dot_product_attention(q, k, v, true);
}
constexpr int64_t kAttB = 8, kAttH = 12, kAttT = 512, kAttD = 64;
void AttentionFwd(benchmark::State& state, bool composed) {
  const Shape s{kAttB, kAttH, kAttT, kAttD};
  run_elementwise(
      state, [composed](const std::vector<Tensor>& a) { return causal_attention(a[0], a[1], a[2], composed); },
      {{DType::F32, s}, {DType::F32, s}, {DType::F32, s}}, 4 * kAttB * kAttH * kAttT * kAttD * 4, false);
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * 2.0 * kAttB * kAttH * kAttT * kAttT * kAttD,
                                               benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(AttentionFwd, fused, false)->Name("AttentionFwd")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(AttentionFwd, composed, true)
    ->Name("AttentionFwd/composed")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One decoding step's attention: a query at the last position of a cache of `keys` per head
// (batch 1). With few heads the keys' splits of 256 are what spreads the work over threads.
// Counted bytes: the keys and values read.
void AttentionDecode(benchmark::State& state) {
  const int64_t H = state.range(0), Tk = state.range(1), D = 64;
  HostTensor position(DType::I64, {1});
  position.set(0, double(Tk - 1));
  const Tensor offset = Tensor::constant(position);
  run_elementwise(
      state,
      [offset](const std::vector<Tensor>& a) { return scaled_dot_product_attention_at(a[0], a[1], a[2], offset); },
      {{DType::F32, {1, H, 1, D}}, {DType::F32, {1, H, Tk, D}}, {DType::F32, {1, H, Tk, D}}}, 2 * H * Tk * D * 4,
      false);
}
BENCHMARK(AttentionDecode)->Name("AttentionDecode")->ArgNames({"heads", "keys"})->Args({1, 4096})->Args({12, 512})->UseRealTime();

// Forward and backward: the output and the gradients of q, k and v for an upstream gradient.
// Counted FLOPs: the causal half of the forward's two products and the backward's five.
void AttentionFwdBwd(benchmark::State& state, bool composed) {
  const Shape s{kAttB, kAttH, kAttT, kAttD};
  Tensor q = Tensor::randn(s, 21), k = Tensor::randn(s, 22), v = Tensor::randn(s, 23);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad().stateful();
  run_fused(
      state,
      [&](const std::vector<Tensor>& a) {
        Tensor o = causal_attention(q, k, v, composed);
        (o * a[0]).sum().backward();
        return std::vector<Tensor>{o, q.grad(), k.grad(), v.grad()};
      },
      {{DType::F32, s}}, 8 * kAttB * kAttH * kAttT * kAttD * 4, false);
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * 7.0 * kAttB * kAttH * kAttT * kAttT * kAttD,
                                               benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(AttentionFwdBwd, fused, false)->Name("AttentionFwdBwd")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(AttentionFwdBwd, composed, true)
    ->Name("AttentionFwdBwd/composed")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// One GPT-2 block at width 768 (12 heads) over x [1, 512, 768]: the forward, and the training
// step's part that is the block's (y and the gradients of x and every parameter for an upstream
// gradient of y). Counted FLOPs: the four projections (24 T C^2 forward, three times that with
// the backward) and attention's causal half (two products forward, seven with the backward).
constexpr int64_t kBlockT = 512, kBlockC = 768;  // gpt2-98m's width
nn::GptConfig block_config() { return nn::GptConfig::preset("gpt2-98m"); }
double block_flops(bool train) {
  const double proj = 24.0 * kBlockT * kBlockC * kBlockC, att = 2.0 * kBlockT * kBlockT * kBlockC;
  return train ? 3 * proj + 3.5 * att : proj + att;
}
void GptBlockFwd(benchmark::State& state) {
  nn::GptBlock blk(block_config(), 1);
  run_elementwise(state, [&blk](const std::vector<Tensor>& a) { return blk.forward(a[0]); },
                  {{DType::F32, {1, kBlockT, kBlockC}}}, 2 * kBlockT * kBlockC * 4, false);
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * block_flops(false), benchmark::Counter::kIsRate);
}
BENCHMARK(GptBlockFwd)->Name("GptBlockFwd")->UseRealTime()->Unit(benchmark::kMillisecond);
void GptBlockTrain(benchmark::State& state) {
  nn::GptBlock blk(block_config(), 1);
  CompiledStep step = nn::compile_block_grad(blk, 1, kBlockT);
  const Shape s{1, kBlockT, kBlockC};
  time_step(state, step, {{DType::F32, s}, {DType::F32, s}}, 3 * kBlockT * kBlockC * 4, blk.parameters());
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * block_flops(true), benchmark::Counter::kIsRate);
}
BENCHMARK(GptBlockTrain)->Name("GptBlockTrain")->UseRealTime()->Unit(benchmark::kMillisecond);

// C[M,N] = A[M,K] @ B[K,N] through measured kernel selection (batched when batch > 1).
void Matmul(benchmark::State& state) {
  int64_t bt = state.range(0), M = state.range(1), K = state.range(2), N = state.range(3);
  Graph g;
  ValueId a = g.input(DType::F32, bt > 1 ? Shape{bt, M, K} : Shape{M, K}, "a");
  ValueId b = g.input(DType::F32, bt > 1 ? Shape{bt, K, N} : Shape{K, N}, "b");
  ValueId c = g.matmul(a, b);
  Plan p(g, {c});
  p.set_input(a, Tensor::randn(g.shape(a), 1).value());
  p.set_input(b, Tensor::randn(g.shape(b), 2).value());
  warm(p);
  for (auto _ : state) {
    p.run();
    benchmark::DoNotOptimize(p.data<float>(c));
  }
  double flops = 2.0 * double(bt * M * N * K);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.SetLabel(p.launch_info()[0].kernel);
}
BENCHMARK(Matmul)
    ->Name("Matmul")
    ->ArgNames({"batch", "M", "K", "N"})
    ->Args({1, 64, 64, 64})
    ->Args({1, 128, 128, 128})
    ->Args({1, 256, 256, 256})
    ->Args({1, 512, 512, 512})
    ->Args({1, 1024, 1024, 1024})
    ->Args({1, 2048, 2048, 2048})
    ->Args({1, 1, 512, 512})
    ->Args({1, 512, 512, 1})
    ->Args({1, 127, 127, 127})
    ->Args({1, 513, 513, 513})
    ->Args({1, 8, 16, 32})
    ->Args({32, 128, 64, 128})
    ->UseRealTime();

// One GEMM provider alone (no selection) on C[M,N] = A[M,K] @ B[K,N], row-major, one thread's
// worth of work at the current thread count: the hand-written kernels against the vendors'.
void GemmProvider(benchmark::State& state, const char* name) {
  int64_t n = state.range(0);
  const kernels::GemmProvider* prov = nullptr;
  for (const auto& p : kernels::gemm_providers())
    if (p->name() == name) prov = p.get();
  kernels::GemmShape s{n, n, n, n, 1, n, 1, n};
  if (!prov || !prov->supports(s)) return state.SkipWithError("provider missing or shape unsupported");
  HostTensor a = Tensor::randn({n, n}, 1).value(), b = Tensor::randn({n, n}, 2).value();
  std::vector<float> c(size_t(n * n));
  Buffer scratch(prov->scratch_floats(s) * sizeof(float));  // 64-byte aligned, as in a plan
  kernels::GemmCall call{s, static_cast<const float*>(a.buffer->data()), static_cast<const float*>(b.buffer->data()),
                         c.data(), static_cast<float*>(scratch.data()), false};
  prov->run(call, default_pool());  // JIT and first-touch outside the timing
  for (auto _ : state) {
    prov->run(call, default_pool());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n * n * n), benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(GemmProvider, engine_packed, "engine-packed")->Name("GemmProvider/engine-packed")->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(GemmProvider, openblas, "openblas")->Name("GemmProvider/openblas")->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(GemmProvider, onednn, "onednn")->Name("GemmProvider/onednn")->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(GemmProvider, libxsmm, "libxsmm")->Name("GemmProvider/libxsmm")->Arg(128)->UseRealTime();

// 3x3 convolution, batch 32, 32 -> 64 channels, 28x28, same padding: unfold + contraction.
// y = einsum(spec, 3x3 "same" windows of x[32, 32, 28, 28], w): the plan is timed and labelled
// with the kernel of its last launch.
void WindowedContraction(benchmark::State& state, const char* spec, const Shape& wshape, double wscale) {
  Graph g;
  ValueId x = g.input(DType::F32, {32, 32, 28, 28}, "x");
  ValueId w = g.input(DType::F32, wshape, "w");
  ValueId u = g.add(Op::Unfold, {g.add(Op::Unfold, {x}, attr::Window{2, 3, 1})}, attr::Window{3, 3, 1});
  ValueId y = g.einsum(spec, {u, w});
  Plan p(g, {y});
  p.set_input(x, Tensor::randn({32, 32, 28, 28}, 1).value());
  p.set_input(w, Tensor::randn(wshape, 2, wscale).value());
  warm(p);
  for (auto _ : state) {
    p.run();
    benchmark::DoNotOptimize(p.data<float>(y));
  }
  state.SetLabel(p.launch_info().back().kernel);
}

void Conv3x3(benchmark::State& state) { WindowedContraction(state, "nchwxy,ocxy->nohw", {64, 32, 3, 3}, 0.05); }
BENCHMARK(Conv3x3)->Name("Conv3x3")->UseRealTime()->Unit(benchmark::kMillisecond);

// The same convolution as the conv3x3 op (Winograd's F(2x2, 3x3)).
void Conv3x3Winograd(benchmark::State& state) {
  Graph g;
  ValueId x = g.input(DType::F32, {32, 32, 28, 28}, "x");
  ValueId w = g.input(DType::F32, {64, 32, 3, 3}, "w");
  ValueId y = g.add(Op::Conv3x3, {x, w}, attr::Conv3x3{1, false});
  Plan p(g, {y});
  p.set_input(x, Tensor::randn({32, 32, 28, 28}, 1).value());
  p.set_input(w, Tensor::randn({64, 32, 3, 3}, 2, 0.05).value());
  warm(p);
  for (auto _ : state) {
    p.run();
    benchmark::DoNotOptimize(p.data<float>(y));
  }
  state.SetLabel(p.launch_info().back().kernel);
}
BENCHMARK(Conv3x3Winograd)->Name("Conv3x3/winograd")->UseRealTime()->Unit(benchmark::kMillisecond);

// resnet-mini's downsampling convolutions forward: batch 64, 3x3 at stride 2 (padding 1), 16 -> 32
// channels from 28x28 to 14x14 and 32 -> 64 from 14x14 to 7x7, in the canonical order.
void ConvForwardStride2(benchmark::State& state, int64_t c, int64_t hw) {
  Tensor w = Tensor::randn({2 * c, c, 3, 3}, 2, 0.1);
  CompiledStep step = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{nn::conv2d(a[0], w, {}, 2, 1, 1)}; },
                              {{DType::F32, {64, c, hw, hw}}});
  step({Tensor::randn({64, c, hw, hw}, 1).value()});
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.SetLabel(step.plan().launch_info().back().kernel);
  const int64_t out = hw / 2;
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * 2.0 * 64 * 2 * c * out * out * c * 9,
                                               benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(ConvForwardStride2, c16, 16, 28)->Name("ConvForward/stride:2/c:16")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(ConvForwardStride2, c32, 32, 14)->Name("ConvForward/stride:2/c:32")->UseRealTime()->Unit(benchmark::kMillisecond);

// The input gradient of resnet-mini's downsampling convolutions: 16 -> 32 channels, 28x28 -> 14x14
// at stride 2, kernel 3 (padding 1) or the 1x1 shortcut, batch 64, in the canonical order.
void ConvDataGradStride2(benchmark::State& state, int64_t k) {
  Tensor w = Tensor::randn({32, 16, k, k}, 2, 0.1);
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor x = a[0];
        x.requires_grad();
        Tensor loss = (nn::conv2d(x, w, {}, 2, k / 2, 1) * a[1]).sum();
        loss.backward();
        return std::vector<Tensor>{x.grad()};
      },
      {{DType::F32, {64, 16, 28, 28}}, {DType::F32, {64, 32, 14, 14}}});
  step({Tensor::randn({64, 16, 28, 28}, 1).value(), Tensor::randn({64, 32, 14, 14}, 3).value()});
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.SetLabel(step.plan().launch_info().back().kernel);
  state.counters["FLOPS"] = benchmark::Counter(double(state.iterations()) * 2.0 * 64 * 32 * 14 * 14 * 16 * double(k * k),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(ConvDataGradStride2, k3, 3)->Name("ConvDataGrad/stride:2/k:3")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(ConvDataGradStride2, k1, 1)->Name("ConvDataGrad/stride:2/k:1")->UseRealTime()->Unit(benchmark::kMillisecond);

// Depthwise 3x3 convolution (groups = channels), batch 32, 32 channels, 28x28, same padding:
// the window contraction of operators the synthesizer invents.
void Depthwise3x3(benchmark::State& state) { WindowedContraction(state, "nchwxy,cxy->nchw", {32, 3, 3}, 0.3); }
BENCHMARK(Depthwise3x3)->Name("Depthwise3x3")->UseRealTime()->Unit(benchmark::kMillisecond);

// One SGD-momentum training step of a Fashion-MNIST classifier (batch 64, random data).
// winograd = false: 3x3 convolutions as contractions (the direct kernels), not the Winograd op.
void TrainClassifier(benchmark::State& state, const char* model, bool winograd = true) {
  auto m = train::make_classifier(model, 10, 1);
  optim::SGD opt(m->parameters(), 0.05, 0.9, 5e-4);
  const bool saved = nn::winograd_convolutions();
  nn::set_winograd_convolutions(winograd);
  CompiledStep step = train::compile_classifier_train(*m, opt, 64);
  nn::set_winograd_convolutions(saved);
  HostTensor x = Tensor::randn({64, 1, 28, 28}, 3).value();
  HostTensor y(DType::I64, {64});
  for (int64_t i = 0; i < 64; ++i) y.set(i, double(i % 10));
  step({x, y});
  step({x, y});  // the second run recompiles: outside the timing
  for (auto _ : state) {
    opt.tick();
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
}
BENCHMARK_CAPTURE(TrainClassifier, mlp, "mlp")->Name("Train/mlp/batch:64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainClassifier, lenet, "lenet")->Name("Train/lenet/batch:64")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainClassifier, resnet, "resnet-mini")
    ->Name("Train/resnet-mini/batch:64")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(TrainClassifier, resnet_contraction, "resnet-mini", false)
    ->Name("Train/resnet-mini/batch:64/contraction")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// A classifier's inference forward (evaluation mode: batch norm with its running statistics) at
// batch 1 and 64, random images: what `synoros latency` times for resnet-mini.
void InferClassifier(benchmark::State& state, const char* model, int64_t batch) {
  auto m = train::make_classifier(model, 10, 1);
  CompiledStep fwd = train::compile_classifier_eval(*m, batch);
  HostTensor x = Tensor::randn({batch, 1, 28, 28}, 3).value();
  fwd({x});
  fwd({x});  // the second run recompiles: outside the timing
  for (auto _ : state) {
    fwd.run();
    benchmark::DoNotOptimize(fwd.output_ptr(0));
  }
}
BENCHMARK_CAPTURE(InferClassifier, resnet_b1, "resnet-mini", 1)
    ->Name("Infer/resnet-mini/batch:1")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(InferClassifier, resnet_b64, "resnet-mini", 64)
    ->Name("Infer/resnet-mini/batch:64")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The GPT-2 family at the seed's sizes (random weights, batch 1, one process's threads):
// prefill (a forward over the prompt), one decoding step against a 512-token cache, and a
// training step (forward, backward, all gradients).
HostTensor gpt_tokens(int64_t batch, int64_t T, int64_t vocab, uint64_t salt) {
  HostTensor t(DType::I64, {batch, T});
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, double((i * 7919 + int64_t(salt)) % vocab));
  return t;
}

void GptPrefill(benchmark::State& state, const char* preset) {
  nn::Gpt m(nn::GptConfig::preset(preset), 1);
  const int64_t T = state.range(0), B = state.range(1);
  m.eval();
  CompiledStep step = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{m(a[0])}; },
                              {{DType::I64, {B, T}}});
  step({gpt_tokens(B, T, m.cfg.vocab, 1)});
  step({gpt_tokens(B, T, m.cfg.vocab, 1)});  // the second run recompiles
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.counters["tokens/s"] = benchmark::Counter(double(B * T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(GptPrefill, gpt2_11m, "gpt2-11m")->Name("Gpt/prefill/gpt2-11m")->Args({128, 1})->Args({128, 8})
    ->ArgNames({"seq", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(GptPrefill, gpt2_98m, "gpt2-98m")->Name("Gpt/prefill/gpt2-98m")->Args({256, 1})->Args({512, 1})
    ->Args({256, 8})->Args({512, 8})
    ->ArgNames({"seq", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond);

void GptDecode(benchmark::State& state, const char* preset) {
  nn::Gpt m(nn::GptConfig::preset(preset), 1);
  const int64_t B = state.range(1), P = state.range(0);
  nn::GptGenerator gen(m, B);
  std::vector<std::vector<int64_t>> prompts(size_t(B), std::vector<int64_t>(size_t(P), 1));
  std::vector<int64_t> next(size_t(B), 2);
  gen.prefill(prompts);
  gen.decode(next);  // compiles
  gen.decode(next);  // the second run recompiles
  // Every step decodes at position P, attending over P + 1 keys, as PyTorch's side does.
  for (auto _ : state) {
    gen.rewind(P);
    benchmark::DoNotOptimize(gen.decode(next));
  }
  // Bytes a step must read: every weight but the position table, and the keys and values of the
  // P + 1 positions it attends over.
  const nn::GptConfig& c = m.cfg;
  double bytes = 4.0 * double(c.parameter_count() - c.context * c.width + 2 * c.layers * B * (P + 1) * c.width);
  state.counters["tokens/s"] = benchmark::Counter(double(B), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
// "context": the position decoded at (P), positions 0..P attended.
BENCHMARK_CAPTURE(GptDecode, gpt2_98m, "gpt2-98m")->Name("Gpt/decode/gpt2-98m")->Args({512, 1})->Args({512, 8})
    ->ArgNames({"context", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond);

// A generator answering requests of two prompt lengths in turn (each prefilled, then 4 tokens
// decoded): requests per second, and the engine's memory above the model's once every plan has run
// twice (the KV cache, the plans' arenas, and the packed copies of the weights they share).
void GptServe(benchmark::State& state, const char* preset) {
  nn::Gpt m(nn::GptConfig::preset(preset), 1);
  m.eval();
  const int64_t B = state.range(0);
  const double model_bytes = double(live_buffer_bytes());
  nn::GptGenerator gen(m, B);
  const std::vector<int64_t> next(size_t(B), 2);
  auto request = [&](int64_t P) {
    gen.reset();
    gen.prefill(std::vector<std::vector<int64_t>>(size_t(B), std::vector<int64_t>(size_t(P), 1)));
    for (int i = 0; i < 4; ++i) benchmark::DoNotOptimize(gen.decode(next));
  };
  for (int i = 0; i < 2; ++i) request(64), request(128);  // every plan compiled and run twice
  for (auto _ : state) request(64), request(128);
  state.counters["requests/s"] = benchmark::Counter(2, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB_above_model"] = (double(live_buffer_bytes()) - model_bytes) / 1e6;
}
BENCHMARK_CAPTURE(GptServe, gpt2_98m, "gpt2-98m")->Name("Gpt/serve/gpt2-98m/prompts:64,128")->Arg(1)->Arg(8)
    ->ArgNames({"batch"})->UseRealTime()->Unit(benchmark::kMillisecond);

void GptTrain(benchmark::State& state, const char* preset) {
  nn::GptConfig c = nn::GptConfig::preset(preset);
  const int64_t T = state.range(0), B = state.range(1);
  c.context = T;
  nn::Gpt m(c, 1);
  CompiledStep step = compile_gpt_grad(m, B);
  step({gpt_tokens(B, T, c.vocab, 1), gpt_tokens(B, T, c.vocab, 2)});
  step({gpt_tokens(B, T, c.vocab, 1), gpt_tokens(B, T, c.vocab, 2)});  // the second run recompiles
  // An optimizer changes every weight between steps: marked changed here too (see time_step).
  const auto weights = storage_of(m.parameters());
  for (auto _ : state) {
    mark_changed(weights);
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.counters["tokens/s"] = benchmark::Counter(double(B * T), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(GptTrain, gpt2_98m, "gpt2-98m")->Name("Gpt/train/gpt2-98m")->Args({256, 1})
    ->ArgNames({"seq", "batch"})->UseRealTime()->Unit(benchmark::kMillisecond);

// A LoRA training step on one projection: x [batch, width] (an activation: its gradient is
// computed, as for a layer inside a network) through a frozen width x width Conv1D with a rank-r
// adapter (alpha = 2r), mean squared error to a target, AdamW on the adapter.
void LoraStep(benchmark::State& state) {
  const int64_t B = state.range(0), C = state.range(1), r = state.range(2);
  nn::Conv1D layer(C, C, 1, 0.02);
  for (Tensor* w : {&layer.weight, &layer.bias}) w->requires_grad(false).stateful();
  auto a = std::make_shared<nn::LoraAdapter>();
  a->A = Tensor::uniform({r, C}, 2, 1.0 / std::sqrt(double(C)));
  a->B = Tensor::randn({C, r}, 3, 0.02);
  a->A.requires_grad();
  a->B.requires_grad();
  a->scaling = 2.0;
  layer.lora = a;
  Tensor x = Tensor::randn({1, B, C}, 4);
  x.requires_grad().stateful();
  optim::AdamW opt({a->A, a->B}, 1e-4, 0.9, 0.999, 1e-8, 0.0);
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& in) {
        Tensor loss = mse_loss(layer(x), in[0]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss, x.grad()};
      },
      {{DType::F32, {1, B, C}}});
  step({Tensor::randn({1, B, C}, 5).value()});
  step({Tensor::randn({1, B, C}, 5).value()});  // the second run recompiles
  for (auto _ : state) {
    opt.tick();
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
}
BENCHMARK(LoraStep)->Name("Lora/step")->Args({128, 768, 8})->ArgNames({"batch", "width", "rank"})->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
