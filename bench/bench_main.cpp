// Google Benchmark cases, named after the side-by-side scenarios (bench/compare.py).
#include <benchmark/benchmark.h>

#include <cstring>

#include "synoros/synoros.hpp"

namespace {
using namespace synoros;

void load(CompiledStep& step, const TinyTask& task) {
  std::memcpy(step.input_ptr(0), task.x.buffer->data(), task.x.bytes());
  std::memcpy(step.input_ptr(1), task.target.buffer->data(), task.target.bytes());
}

// Forward + backward: loss and the gradients of all four parameters.
void TinyMLP_FwdBwd(benchmark::State& state) {
  TinyTask task(1);
  TinyMLP m(2);
  CompiledStep step = compile_tiny_mlp_grad(m);
  load(step, task);
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.counters["launches"] = double(step.plan().launches().size());
}
BENCHMARK(TinyMLP_FwdBwd)->Name("TinyMLP/FwdBwd");

// Forward + backward + SGD update of all parameters.
void TinyMLP_Sgd(benchmark::State& state) {
  TinyTask task(1);
  TinyMLP m(2);
  CompiledStep step = compile_tiny_mlp_sgd(m, 1e-3);
  load(step, task);
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
}
BENCHMARK(TinyMLP_Sgd)->Name("TinyMLP/SgdStep");

// y = tanh((sigmoid(relu(x*1.5 + 0.5) * x) - 0.25) * 2) over x[1024, 1024], out of place.
Tensor eltwise_chain(const Tensor& x) { return ((((x * 1.5 + 0.5).relu() * x).sigmoid() - 0.25) * 2.0).tanh(); }

void EltwiseChain(benchmark::State& state) {
  CompiledStep step = compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{eltwise_chain(a[0])}; },
                              {{DType::F32, {1024, 1024}}});
  HostTensor x = Tensor::randn({1024, 1024}, 3).value();
  std::memcpy(step.input_ptr(0), x.buffer->data(), x.bytes());
  for (auto _ : state) {
    step.run();
    benchmark::DoNotOptimize(step.output_ptr(0));
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * 2 * 1024 * 1024 * 4);
  state.counters["launches"] = double(step.plan().launches().size());
}
BENCHMARK(EltwiseChain)->Name("EltwiseChain")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
