// synoros._C.trials: the operator search -- proxy training and timing of synthesized operators
// inside the small ResNet, and the whole search (MCTS, screening, successive halving); the same
// for a GPT's projections (proxy training on text, whole training steps timed).
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/lm_trials.hpp"
#include "synoros/trials.hpp"

namespace synoros::py {

void bind_trials(nb::module_& top) {
  nb::module_ m = top.def_submodule("trials", "Operator trials: synthesized operators trained and timed in a network");
  nb::class_<trials::ProxyConfig>(m, "ProxyConfig", "The proxy task: the small ResNet on Fashion-MNIST.")
      .def(nb::init<>())
      .def_rw("train_images", &trials::ProxyConfig::train_images)
      .def_rw("test_images", &trials::ProxyConfig::test_images)
      .def_rw("epochs", &trials::ProxyConfig::epochs)
      .def_rw("batch", &trials::ProxyConfig::batch)
      .def_rw("width", &trials::ProxyConfig::width)
      .def_rw("lr", &trials::ProxyConfig::lr)
      .def_rw("seed", &trials::ProxyConfig::seed)
      .def_rw("augment", &trials::ProxyConfig::augment);
  nb::class_<trials::Latency>(m, "Latency", "Forward-pass times (ms, medians) at batch 1 and 64, one and two threads.")
      .def_ro("b1_t1", &trials::Latency::b1_t1)
      .def_ro("b64_t1", &trials::Latency::b64_t1)
      .def_ro("b1_t2", &trials::Latency::b1_t2)
      .def_ro("b64_t2", &trials::Latency::b64_t2);
  nb::class_<trials::Evaluation>(m, "Evaluation", "One operator trained and timed on the proxy task.")
      .def_ro("key", &trials::Evaluation::key)
      .def_ro("formula", &trials::Evaluation::formula)
      .def_ro("actions", &trials::Evaluation::actions)
      .def_ro("failed", &trials::Evaluation::failed)
      .def_ro("error", &trials::Evaluation::error)
      .def_ro("class_mask", &trials::Evaluation::class_mask)
      .def_ro("accuracy", &trials::Evaluation::accuracy)
      .def_ro("loss", &trials::Evaluation::loss)
      .def_ro("latency", &trials::Evaluation::latency)
      .def_ro("flops", &trials::Evaluation::flops)
      .def_ro("params", &trials::Evaluation::params)
      .def_ro("train_seconds", &trials::Evaluation::train_seconds)
      .def_ro("reward", &trials::Evaluation::reward)
      .def("to_json", [](const trials::Evaluation& e) { return trials::to_json(e); })
      .def_static("from_json", &trials::evaluation_from_json, nb::arg("line"));
  m.def("resnet_conv_spec", &trials::resnet_conv_spec, nb::arg("width") = 16,
        "The spec of the small ResNet's stride-1 3x3 convolutions (one binding per size class).");
  m.def("evaluate", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask,
                       const trials::ProxyConfig& cfg) {
    nb::gil_scoped_release no_gil;
    return trials::evaluate(spec, op, class_mask, cfg);
  }, nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("config") = trials::ProxyConfig{},
     "Trains the small ResNet with the operator in the layer classes of class_mask (None: the convolution "
     "baseline) on the proxy task, and times it.");
  m.def("network", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask, uint64_t seed,
                      int64_t width) { return trials::make_network(spec, op, class_mask, seed, width); },
        nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("seed") = 1, nb::arg("width") = 16,
        "The small ResNet with the operator in the layer classes of class_mask (a synoros.nn.ResNetMini).");
  m.def("network_from_actions", &trials::network_from_actions, nb::arg("actions"), nb::arg("class_mask"),
        nb::arg("seed") = 1, nb::arg("width") = 16, nb::arg("max_depth") = 12);
  m.def("measure_latency", [](nn::Module& net, int repeats) {
    nb::gil_scoped_release no_gil;
    return trials::measure_latency(net, repeats);
  }, nb::arg("network"), nb::arg("repeats") = 5);
  m.def("paired_latency", [](nn::Module& a, nn::Module& b, int repeats, int threads, int64_t batch) {
    nb::gil_scoped_release no_gil;
    return trials::paired_latency(a, b, repeats, threads, batch);
  }, nb::arg("a"), nb::arg("b"), nb::arg("repeats") = 7, nb::arg("threads") = 1, nb::arg("batch") = 64,
     "Forward times (ms) of two networks run alternately, so both see the same machine state.");

  nb::class_<trials::LmProxyConfig>(m, "LmProxyConfig", "The GPT proxy task: a small GPT trained on text.")
      .def(nb::init<>())
      .def_rw("model", &trials::LmProxyConfig::model)
      .def_rw("batch", &trials::LmProxyConfig::batch)
      .def_rw("steps", &trials::LmProxyConfig::steps)
      .def_rw("val_batches", &trials::LmProxyConfig::val_batches)
      .def_rw("lr", &trials::LmProxyConfig::lr)
      .def_rw("seed", &trials::LmProxyConfig::seed)
      .def_rw("text_file", &trials::LmProxyConfig::text_file);
  nb::class_<trials::LmEvaluation>(m, "LmEvaluation", "One operator in a GPT's projections, trained and timed.")
      .def_ro("key", &trials::LmEvaluation::key)
      .def_ro("formula", &trials::LmEvaluation::formula)
      .def_ro("actions", &trials::LmEvaluation::actions)
      .def_ro("family", &trials::LmEvaluation::family)
      .def_ro("class_mask", &trials::LmEvaluation::class_mask)
      .def_ro("failed", &trials::LmEvaluation::failed)
      .def_ro("error", &trials::LmEvaluation::error)
      .def_ro("val_loss", &trials::LmEvaluation::val_loss)
      .def_ro("train_loss", &trials::LmEvaluation::train_loss)
      .def_ro("step_ms", &trials::LmEvaluation::step_ms)
      .def_ro("base_step_ms", &trials::LmEvaluation::base_step_ms)
      .def_ro("params", &trials::LmEvaluation::params)
      .def_ro("train_seconds", &trials::LmEvaluation::train_seconds)
      .def("to_json", [](const trials::LmEvaluation& e) { return trials::to_json(e); })
      .def_static("from_json", &trials::lm_evaluation_from_json, nb::arg("line"));
  m.def("gpt_linear_spec", &trials::gpt_linear_spec, nb::arg("width"), nb::arg("rows") = 64,
        "The spec of a GPT's projections [N, C_in] -> [N, C_out], one binding per class (c_attn, attn.c_proj, "
        "c_fc, mlp.c_proj).");
  m.def("gpt", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask, const nn::GptConfig& cfg,
                  uint64_t seed) {
    return std::make_shared<nn::Gpt>(cfg, seed, trials::projection_factory(spec, op, class_mask, cfg.layers));
  }, nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("config"), nb::arg("seed") = 1,
     "A GPT whose projections of the classes of class_mask compute the operator (None: the dense GPT).");
  m.def("evaluate_lm", [](const synth::Spec& spec, const synth::Operator* op, unsigned class_mask,
                          const trials::LmProxyConfig& cfg) {
    nb::gil_scoped_release no_gil;
    return trials::evaluate_lm(spec, op, class_mask, cfg);
  }, nb::arg("spec"), nb::arg("op").none(), nb::arg("class_mask"), nb::arg("config") = trials::LmProxyConfig{},
     "Trains the proxy GPT with the operator in the projection classes of class_mask (None: the dense baseline) "
     "and times its training step against the baseline's.");
}

}  // namespace synoros::py
