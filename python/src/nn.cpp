// synoros._C.nn: the engine's modules, with PyTorch's constructor arguments. The pure-Python
// synoros.nn.Module composes them with modules written in Python.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/nn.hpp"

namespace synoros::py {

namespace {
// Module.forward as bound below (a reference held for the extension's life), and its name.
PyObject* g_module_forward = nullptr;
PyObject* g_forward_name = nullptr;

// module(x), torch's spelling of module.forward(x), in the type's call slot. A call of one
// positional argument on a module whose forward is the bound one (an engine layer without an
// instance dictionary, whose type does not override it) goes straight to that function (its
// argument conversion, its errors), without the method lookup and argument repacking of a
// __call__ defined as a method; any other call looks forward up as an attribute.
PyObject* module_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyTypeObject* type = Py_TYPE(self);
  if (!kwargs && PyTuple_GET_SIZE(args) == 1 && type->tp_dictoffset == 0 &&
      _PyType_Lookup(type, g_forward_name) == g_module_forward) {
    PyObject* a[2] = {self, PyTuple_GET_ITEM(args, 0)};
    return PyObject_Vectorcall(g_module_forward, a, 2, nullptr);
  }
  PyObject* forward = PyObject_GetAttr(self, g_forward_name);
  if (!forward) return nullptr;
  PyObject* r = PyObject_Call(forward, args, kwargs);
  Py_DECREF(forward);
  return r;
}
PyType_Slot g_module_slots[] = {{Py_tp_call, reinterpret_cast<void*>(module_call)}, {0, nullptr}};
}  // namespace

void bind_nn(nb::module_& top) {
  nb::module_ m = top.def_submodule("nn", "The engine's modules");
  using nn::Module;
  auto module = nb::class_<Module>(m, "Module", "A module of the engine (its layers, models and GPT).",
                                   nb::type_slots(g_module_slots));
  module.def("forward", &Module::forward, nb::arg("input"));
  g_module_forward = nb::object(module.attr("forward")).release().ptr();
  g_forward_name = PyUnicode_InternFromString("forward");
  module
      .def("named_parameters", [](const Module& mod) { return mod.named_parameters(); })
      .def("named_buffers", [](const Module& mod) { return mod.named_buffers(); })
      .def("parameter_count", &Module::parameter_count)
      .def("train", [](Module& mod, bool on) { mod.train(on); }, nb::arg("mode") = true)
      .def("eval", [](Module& mod) { mod.eval(); })
      .def_prop_ro("training", &Module::training);

  nb::class_<nn::Linear, Module>(m, "Linear")
      .def("__init__", [](nn::Linear* self, int64_t in, int64_t out, bool bias, std::optional<uint64_t> seed) {
        new (self) nn::Linear(in, out, bias, seed_arg(seed));
      }, nb::arg("in_features"), nb::arg("out_features"), nb::arg("bias") = true, nb::kw_only(),
         nb::arg("seed") = nb::none())
      .def_rw("weight", &nn::Linear::weight)
      .def_rw("bias", &nn::Linear::bias);
  nb::class_<nn::Conv2d, Module>(m, "Conv2d")
      .def("__init__", [](nn::Conv2d* self, int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding,
                          int64_t dilation, int64_t groups, bool bias, std::optional<uint64_t> seed) {
        new (self) nn::Conv2d(in, out, k, seed_arg(seed), stride, padding, dilation, groups, bias);
      }, nb::arg("in_channels"), nb::arg("out_channels"), nb::arg("kernel_size"), nb::arg("stride") = 1,
         nb::arg("padding") = 0, nb::arg("dilation") = 1, nb::arg("groups") = 1, nb::arg("bias") = true,
         nb::kw_only(), nb::arg("seed") = nb::none())
      .def_rw("weight", &nn::Conv2d::weight)
      .def_rw("bias", &nn::Conv2d::bias);
  nb::class_<nn::BatchNorm2d, Module>(m, "BatchNorm2d")
      .def(nb::init<int64_t, double, double>(), nb::arg("num_features"), nb::arg("eps") = 1e-5,
           nb::arg("momentum") = 0.1)
      .def_rw("weight", &nn::BatchNorm2d::weight)
      .def_rw("bias", &nn::BatchNorm2d::bias)
      .def_rw("running_mean", &nn::BatchNorm2d::running_mean)
      .def_rw("running_var", &nn::BatchNorm2d::running_var);
  nb::class_<nn::LayerNorm, Module>(m, "LayerNorm")
      .def(nb::init<int64_t, double>(), nb::arg("normalized_shape"), nb::arg("eps") = 1e-5)
      .def_rw("weight", &nn::LayerNorm::weight)
      .def_rw("bias", &nn::LayerNorm::bias);
  nb::class_<nn::Embedding, Module>(m, "Embedding")
      .def("__init__", [](nn::Embedding* self, int64_t n, int64_t d, std::optional<uint64_t> seed) {
        new (self) nn::Embedding(n, d, seed_arg(seed));
      }, nb::arg("num_embeddings"), nb::arg("embedding_dim"), nb::kw_only(), nb::arg("seed") = nb::none())
      .def_rw("weight", &nn::Embedding::weight);
  nb::class_<nn::Dropout, Module>(m, "Dropout")
      .def("__init__", [](nn::Dropout* self, double p, std::optional<uint64_t> seed) {
        if (p < 0 || p > 1) throw Error("Dropout: p must be in [0, 1], got " + std::to_string(p));
        new (self) nn::Dropout(p, seed_arg(seed));
      }, nb::arg("p") = 0.5, nb::kw_only(), nb::arg("seed") = nb::none())
      .def_rw("p", &nn::Dropout::p);
  nb::class_<nn::MaxPool2d, Module>(m, "MaxPool2d")
      .def("__init__", [](nn::MaxPool2d* self, int64_t k, std::optional<int64_t> s, int64_t p) {
        new (self) nn::MaxPool2d(k, s.value_or(k), p);
      }, nb::arg("kernel_size"), nb::arg("stride") = nb::none(), nb::arg("padding") = 0);
  nb::class_<nn::AvgPool2d, Module>(m, "AvgPool2d")
      .def("__init__", [](nn::AvgPool2d* self, int64_t k, std::optional<int64_t> s, int64_t p) {
        new (self) nn::AvgPool2d(k, s.value_or(k), p);
      }, nb::arg("kernel_size"), nb::arg("stride") = nb::none(), nb::arg("padding") = 0);
  nb::class_<nn::AdaptiveAvgPool2d, Module>(m, "AdaptiveAvgPool2d")
      .def("__init__", [](nn::AdaptiveAvgPool2d* self, std::pair<int64_t, int64_t> hw) {
        new (self) nn::AdaptiveAvgPool2d(hw.first, hw.second);
      }, nb::arg("output_size"));
  nb::class_<nn::ReLU, Module>(m, "ReLU").def(nb::init<>());
  nb::class_<nn::GELU, Module>(m, "GELU").def(nb::init<const std::string&>(), nb::arg("approximate") = "none");
  nb::class_<nn::SiLU, Module>(m, "SiLU").def(nb::init<>());
  nb::class_<nn::Flatten, Module>(m, "Flatten").def(nb::init<>());
  nb::class_<nn::ResNetMini, Module>(m, "ResNetMini", "The small ResNet of the operator search's proxy task.")
      .def("__init__", [](nn::ResNetMini* self, int64_t classes, int64_t width, int64_t blocks,
                          std::optional<uint64_t> seed) {
        new (self) nn::ResNetMini(classes, width, blocks, seed_arg(seed));
      }, nb::arg("num_classes") = 10, nb::arg("width") = 16, nb::arg("blocks_per_stage") = 1, nb::kw_only(),
         nb::arg("seed") = nb::none());
}

}  // namespace synoros::py
