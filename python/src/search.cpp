// synoros._C.search: the operator search -- proxy training and timing of synthesized operators
// inside the small ResNet, and the whole search (MCTS, screening, successive halving).
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/search.hpp"

namespace synoros::py {

void bind_search(nb::module_& top) {
  nb::module_ m = top.def_submodule("search", "The operator search");
  nb::class_<search::ProxyConfig>(m, "ProxyConfig", "The proxy task: the small ResNet on Fashion-MNIST.")
      .def(nb::init<>())
      .def_rw("train_images", &search::ProxyConfig::train_images)
      .def_rw("test_images", &search::ProxyConfig::test_images)
      .def_rw("epochs", &search::ProxyConfig::epochs)
      .def_rw("batch", &search::ProxyConfig::batch)
      .def_rw("width", &search::ProxyConfig::width)
      .def_rw("lr", &search::ProxyConfig::lr)
      .def_rw("seed", &search::ProxyConfig::seed)
      .def_rw("augment", &search::ProxyConfig::augment);
  nb::class_<search::Latency>(m, "Latency", "Forward-pass times (ms, medians) at batch 1 and 64, one and two threads.")
      .def_ro("b1_t1", &search::Latency::b1_t1)
      .def_ro("b64_t1", &search::Latency::b64_t1)
      .def_ro("b1_t2", &search::Latency::b1_t2)
      .def_ro("b64_t2", &search::Latency::b64_t2);
  nb::class_<search::Evaluation>(m, "Evaluation", "One operator trained and timed on the proxy task.")
      .def_ro("key", &search::Evaluation::key)
      .def_ro("formula", &search::Evaluation::formula)
      .def_ro("actions", &search::Evaluation::actions)
      .def_ro("failed", &search::Evaluation::failed)
      .def_ro("error", &search::Evaluation::error)
      .def_ro("class_mask", &search::Evaluation::class_mask)
      .def_ro("accuracy", &search::Evaluation::accuracy)
      .def_ro("loss", &search::Evaluation::loss)
      .def_ro("latency", &search::Evaluation::latency)
      .def_ro("flops", &search::Evaluation::flops)
      .def_ro("params", &search::Evaluation::params)
      .def_ro("train_seconds", &search::Evaluation::train_seconds)
      .def_ro("reward", &search::Evaluation::reward)
      .def("to_json", [](const search::Evaluation& e) { return search::to_json(e); })
      .def_static("from_json", &search::evaluation_from_json, nb::arg("line"));
  m.def("resnet_conv_spec", &search::resnet_conv_spec, nb::arg("width") = 16,
        "The spec of the small ResNet's stride-1 3x3 convolutions (one binding per size class).");
  m.def("evaluate", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask,
                       const search::ProxyConfig& cfg) {
    nb::gil_scoped_release no_gil;
    return search::evaluate(spec, op, class_mask, cfg);
  }, nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("config") = search::ProxyConfig{},
     "Trains the small ResNet with the operator in the layer classes of class_mask (None: the convolution "
     "baseline) on the proxy task, and times it.");
  m.def("network", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask, uint64_t seed,
                      int64_t width) { return search::make_network(spec, op, class_mask, seed, width); },
        nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("seed") = 1, nb::arg("width") = 16,
        "The small ResNet with the operator in the layer classes of class_mask (a synoros.nn.ResNetMini).");
  m.def("network_from_actions", &search::network_from_actions, nb::arg("actions"), nb::arg("class_mask"),
        nb::arg("seed") = 1, nb::arg("width") = 16, nb::arg("max_depth") = 12);
  m.def("measure_latency", [](nn::Module& net, int repeats) {
    nb::gil_scoped_release no_gil;
    return search::measure_latency(net, repeats);
  }, nb::arg("network"), nb::arg("repeats") = 5);
  m.def("paired_latency", [](nn::Module& a, nn::Module& b, int repeats, int threads, int64_t batch) {
    nb::gil_scoped_release no_gil;
    return search::paired_latency(a, b, repeats, threads, batch);
  }, nb::arg("a"), nb::arg("b"), nb::arg("repeats") = 7, nb::arg("threads") = 1, nb::arg("batch") = 64,
     "Forward times (ms) of two networks run alternately, so both see the same machine state.");
}

}  // namespace synoros::py
