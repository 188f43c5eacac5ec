// Engine settings (threads, fast mode, plan cache) and the synthesizer.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/nn.hpp"
#include "synoros/profile.hpp"
#include "synoros/runtime.hpp"
#include "synoros/synth.hpp"

namespace synoros::py {
namespace {

nb::list best_list(const synth::SearchResult& r) {
  nb::list l;
  for (const auto& [reward, op] : r.best) l.append(nb::make_tuple(reward, op));
  return l;
}

void bind_synth(nb::module_& top) {
  nb::module_ m = top.def_submodule("synth", "The operator synthesizer");
  nb::class_<synth::Spec>(m, "Spec", "What an operator maps: input and output shapes over named sizes.")
      .def_static("parse", &synth::parse_spec, nb::arg("text"))
      .def_static("conv2d", &synth::conv2d_spec, nb::arg("same_channels") = false, nb::arg("groups") = 8,
                  "The 3x3 convolution's spec: [N, C_in, H, W] -> [N, C_out, H, W].")
      .def_prop_ro("bindings", [](const synth::Spec& s) { return s.bindings.size(); })
      .def("input_shape", [](const synth::Spec& s, size_t b) { return s.shape(s.input, b); }, nb::arg("binding") = 0)
      .def("output_shape", [](const synth::Spec& s, size_t b) { return s.shape(s.output, b); }, nb::arg("binding") = 0);
  nb::class_<synth::Options>(m, "Options")
      .def(nb::init<>())
      .def("__init__", [](synth::Options* self, int max_depth, int max_reductions, int max_weights) {
        new (self) synth::Options();
        self->max_depth = max_depth;
        self->max_reductions = max_reductions;
        self->max_weights = max_weights;
      }, nb::arg("max_depth"), nb::arg("max_reductions") = 4, nb::arg("max_weights") = 2)
      .def_rw("max_depth", &synth::Options::max_depth)
      .def_rw("max_reductions", &synth::Options::max_reductions)
      .def_rw("max_weights", &synth::Options::max_weights)
      .def_rw("canonical", &synth::Options::canonical);
  nb::class_<synth::Operator>(m, "Operator", "A synthesized operator (its canonical form is its identity).")
      .def_ro("canonical", &synth::Operator::canonical)
      .def_ro("depth", &synth::Operator::depth)
      .def_prop_ro("actions", [](const synth::Operator& op) { return synth::encode_actions(op.path); })
      .def("__repr__", [](const synth::Operator& op) { return "<synth.Operator " + op.canonical + ">"; });
  nb::class_<synth::Synthesizer>(m, "Synthesizer")
      .def(nb::init<synth::Spec, synth::Options>(), nb::arg("spec"), nb::arg("options") = synth::Options{})
      .def_prop_ro("spec", &synth::Synthesizer::spec)
      .def("formula", [](const synth::Synthesizer& s, const synth::Operator& op) { return synth::formula(s.spec(), op); },
           nb::arg("op"))
      .def("describe", [](const synth::Synthesizer& s, const synth::Operator& op) {
        return synth::describe(s.spec(), op);
      }, nb::arg("op"), "One line: formula, FLOPs and parameters.")
      .def("flops", [](const synth::Synthesizer& s, const synth::Operator& op, size_t b) {
        return synth::stats(s.spec(), op, synth::binding(s.spec(), b)).flops;
      }, nb::arg("op"), nb::arg("binding") = 0)
      .def("params", [](const synth::Synthesizer& s, const synth::Operator& op, size_t b) {
        return synth::stats(s.spec(), op, synth::binding(s.spec(), b)).params;
      }, nb::arg("op"), nb::arg("binding") = 0)
      .def("pytorch_module", [](const synth::Synthesizer& s, const synth::Operator& op, size_t b,
                                const std::string& cls) {
        return synth::pytorch_module(s.spec(), op, synth::binding(s.spec(), b), cls);
      }, nb::arg("op"), nb::arg("binding") = 0, nb::arg("class_name") = "SynthOp",
         "A standalone PyTorch module file with exactly the engine's semantics (exec it to import the class).")
      .def("apply", [](const synth::Synthesizer& s, const synth::Operator& op, const Tensor& x,
                       const std::vector<Tensor>& weights, size_t b) {
        return synth::apply(s.spec(), op, synth::binding(s.spec(), b), x, weights);
      }, nb::arg("op"), nb::arg("x"), nb::arg("weights"), nb::arg("binding") = 0)
      .def("init_weights", [](const synth::Synthesizer& s, const synth::Operator& op, size_t b, uint64_t seed) {
        return synth::init_weights(s.spec(), op, synth::binding(s.spec(), b), seed);
      }, nb::arg("op"), nb::arg("binding") = 0, nb::arg("seed") = 1)
      .def("from_actions", [](synth::Synthesizer& s, const std::string& actions) {
        return synth::build_from_actions(s, synth::decode_actions(actions));
      }, nb::arg("actions"), "The operator an action path (Operator.actions) builds.")
      .def("enumerate", [](synth::Synthesizer& s, size_t max_operators) {
        synth::EnumResult r;
        {
          nb::gil_scoped_release no_gil;
          r = synth::enumerate(s, true, max_operators);
        }
        return r.operators;
      }, nb::arg("max_operators") = 1000, "Distinct operators in discovery order, up to max_operators.")
      .def("flops_proxy_reward", [](const synth::Synthesizer& s, double reference, double lo, double hi) {
        synth::Reward r = synth::flops_proxy_reward(s, reference, lo, hi);
        return nb::cpp_function([r](const synth::Operator& op) { return r(op); });
      }, nb::arg("reference_flops"), nb::arg("lo") = 0.1, nb::arg("hi") = 1.0)
      .def("random_search", [](synth::Synthesizer& s, std::function<double(const synth::Operator&)> reward,
                               uint64_t samples, uint64_t seed, size_t keep) {
        return best_list(synth::random_search(s, reward, samples, seed, keep));
      }, nb::arg("reward"), nb::arg("samples"), nb::arg("seed") = 1, nb::arg("keep_best") = 10,
         "(reward, operator) pairs, best first.")
      .def("mcts", [](synth::Synthesizer& s, std::function<double(const synth::Operator&)> reward,
                      uint64_t iterations, uint64_t seed, size_t keep) {
        synth::MctsOptions o;
        o.seed = seed;
        o.keep_best = keep;
        synth::Mcts search(s, reward, o);
        return best_list(search.run(iterations));
      }, nb::arg("reward"), nb::arg("iterations"), nb::arg("seed") = 1, nb::arg("keep_best") = 10,
         "Monte Carlo tree search: (reward, operator) pairs, best first.");
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def("set_num_threads", &set_num_threads, nb::arg("n"));
  m.def("get_num_threads", &num_threads);
  m.def("fast_mode", &fast_mode, "Whether selection may take kernels that round differently (vendor GEMMs).");
  m.def("set_fast_mode", &set_fast_mode, nb::arg("on"));
  m.def("winograd_convolutions", &nn::winograd_convolutions,
        "Whether conv2d builds float32 3x3 stride-1 convolutions (8+ channels) as the Winograd op.");
  m.def("set_winograd_convolutions", &nn::set_winograd_convolutions, nb::arg("on"),
        "Switches the Winograd convolution op on or off for conv2d (it rounds differently).");
  m.def("plan_cache_size", &plan_cache_size);
  m.def("clear_plan_cache", &clear_plan_cache);
  m.def("plan_cache_bytes", &plan_cache_bytes, "The bytes (arena and scratch) the cached plans hold.");
  m.def("set_plan_cache_limit", &set_plan_cache_limit, nb::arg("bytes"),
        "The most bytes the cached plans may hold before the oldest are dropped (default 1 GiB).");
  m.def("memory_limit", &memory_limit,
        "The most bytes the engine's buffers may hold together (SYNOROS_MAX_MEMORY_BYTES; default 3/4 of "
        "physical memory): an allocation past it raises synoros.Error naming the sizes.");
  m.def("set_memory_limit", &set_memory_limit, nb::arg("bytes"));
  m.def("live_buffer_bytes", &live_buffer_bytes, "Bytes the engine's buffers hold now.");
  m.def("measure_peak", [](int threads) {
    MachinePeak p;
    {
      nb::gil_scoped_release no_gil;
      p = measure_peak(threads);
    }
    return nb::make_tuple(p.gflops_threads, p.gbps_threads, p.read_gbps_threads);
  }, nb::arg("threads") = 1,
        "The peak FMA rate (GFLOP/s) and DRAM bandwidth copying and reading (GB/s) of `threads` threads "
        "running at once (one core's by default), measured now.");
  bind_synth(m);
}

}  // namespace synoros::py
