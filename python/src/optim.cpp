// synoros._C.optim: the engine's optimizers with PyTorch's arguments.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include "bindings.hpp"
#include "synoros/optim.hpp"

namespace synoros::py {
namespace {
// Parameters as PyTorch takes them: any iterable of tensors (a generator from parameters()).
std::vector<Tensor> params_arg(nb::handle params) {
  std::vector<Tensor> v;
  for (nb::handle h : params) v.push_back(nb::cast<Tensor>(h));
  if (v.empty()) throw Error("optimizer got an empty parameter list");
  return v;
}
}  // namespace

void bind_optim(nb::module_& top) {
  nb::module_ m = top.def_submodule("optim", "The engine's optimizers");
  using optim::Optimizer;
  nb::class_<Optimizer>(m, "Optimizer")
      .def("step", [](nb::object self, nb::handle grads) {
        Optimizer& o = nb::cast<Optimizer&>(self);
        std::optional<std::vector<Tensor>> given;
        if (!grads.is_none()) {
          given.emplace();
          for (nb::handle g : grads) given->push_back(g.is_none() ? Tensor() : nb::cast<Tensor>(g));
        }
        if (std::vector<nb::object>* traced = traced_optimizers()) {
          // Inside synoros.compile: the update becomes part of the step; the step ticks it.
          bool known = false;
          for (const nb::object& x : *traced) known = known || x.is(self);
          if (!known) traced->push_back(self);
        }
        nb::gil_scoped_release no_gil;
        if (given) o.step(std::move(*given));
        else o.step();
      }, nb::arg("grads") = nb::none(),
         "Applies one update from the parameters' gradients (.grad), or from `grads` (one per parameter, in "
         "order; None: no update of that one), e.g. gradients accumulated over micro-batches; inside "
         "synoros.compile, the update becomes part of the compiled step.")
      .def_prop_ro("replayed_steps", &Optimizer::replayed_steps,
                   "Eager steps that ran the update compiled by an earlier step.")
      .def("zero_grad", &Optimizer::zero_grad)
      .def_prop_rw("lr", &Optimizer::lr, &Optimizer::set_lr)
      .def_prop_ro("steps", &Optimizer::steps)
      .def("restore_steps", &Optimizer::restore_steps, nb::arg("steps"))
      .def("clip_grad_norm", &Optimizer::set_clip_norm, nb::arg("max_norm"),
           "Scales the gradients to a total norm of at most max_norm before each update (0: off).")
      .def("state", &Optimizer::state, "The optimizer's state tensors by name (momentum buffers, moments).")
      .def_prop_ro("params", &Optimizer::params);
  nb::class_<optim::SGD, Optimizer>(m, "SGD")
      .def("__init__", [](optim::SGD* self, nb::handle params, double lr, double momentum, double dampening,
                          double weight_decay, bool nesterov) {
        new (self) optim::SGD(params_arg(params), lr, momentum, weight_decay, nesterov, dampening);
      }, nb::arg("params"), nb::arg("lr") = 1e-3, nb::arg("momentum") = 0.0, nb::arg("dampening") = 0.0,
         nb::arg("weight_decay") = 0.0, nb::arg("nesterov") = false);
  nb::class_<optim::AdamW, Optimizer>(m, "AdamW")
      .def("__init__", [](optim::AdamW* self, nb::handle params, double lr, std::pair<double, double> betas,
                          double eps, double weight_decay) {
        new (self) optim::AdamW(params_arg(params), lr, betas.first, betas.second, eps, weight_decay);
      }, nb::arg("params"), nb::arg("lr") = 1e-3, nb::arg("betas") = std::pair<double, double>(0.9, 0.999),
         nb::arg("eps") = 1e-8, nb::arg("weight_decay") = 1e-2);
  m.def("warmup_cosine", &optim::warmup_cosine, nb::arg("base"), nb::arg("step"), nb::arg("warmup"),
        nb::arg("total"), nb::arg("min_ratio") = 0.0);
}

}  // namespace synoros::py
