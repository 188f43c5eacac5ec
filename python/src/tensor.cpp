// synoros.Tensor: the C++ front end's tensor, its operators and methods.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "api/tensor_impl.hpp"
#include "bindings.hpp"

namespace synoros::py {
namespace {

Tensor scalar_like(const Tensor& t, double v) { return Tensor::scalar(v, t.dtype()); }

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t d : s) l.append(d);
  return nb::tuple(l);
}

// reshape(2, 3) and reshape((2, 3)) alike.
Shape shape_args(const nb::args& args) {
  if (args.size() == 1 && !nb::isinstance<nb::int_>(args[0])) return shape_arg(args[0]);
  Shape s;
  for (nb::handle h : args) s.push_back(nb::cast<int64_t>(h));
  return s;
}

Tensor compare_lt(const Tensor& a, const Tensor& b) { return Tensor::apply(Op::CmpLt, {a, b}, {}, a.dtype()); }

}  // namespace

void bind_tensor(nb::module_& m) {
  auto cls = nb::class_<Tensor>(m, "Tensor", "A lazily computed tensor (values realized on demand by compiled plans).");
  cls.def_prop_ro("shape", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def("size", [](const Tensor& t) { return shape_tuple(t.shape()); })
      .def("size", [](const Tensor& t, int64_t dim) {
        return t.shape()[size_t(normalize_axis(dim, t.shape().size(), "size", t.shape()))];
      }, nb::arg("dim"))
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("ndim", [](const Tensor& t) { return t.shape().size(); })
      .def("dim", [](const Tensor& t) { return t.shape().size(); })
      .def("numel", &Tensor::numel)
      .def("__len__", [](const Tensor& t) {
        if (t.shape().empty()) throw nb::type_error("len() of a 0-d tensor");
        return t.shape()[0];
      })
      // A leaf's flag; for a computed tensor, whether a leaf requiring a gradient lies behind it
      // (PyTorch's reading of the same property).
      .def_prop_rw("requires_grad", [](const Tensor& t) {
        if (t.is_leaf()) return t.requires_grad_enabled();
        std::unordered_map<const TensorImpl*, bool> memo;
        return depends_on_grad(*t.impl(), memo);
      }, [](Tensor& t, bool on) { t.requires_grad(on); })
      .def("requires_grad_", [](Tensor& t, bool on) { return t.requires_grad(on); }, nb::arg("requires_grad") = true)
      .def_prop_ro("grad", [](const Tensor& t) -> std::optional<Tensor> {
        Tensor g = t.grad();
        if (!g.defined()) return std::nullopt;
        return g;
      })
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_ro("realized", &Tensor::realized)
      .def("backward", &Tensor::backward, nb::call_guard<nb::gil_scoped_release>())
      .def("zero_grad", &Tensor::zero_grad)
      .def("detach", &Tensor::detach, nb::call_guard<nb::gil_scoped_release>())
      .def("clone", &Tensor::clone)
      .def("item", &Tensor::item, nb::call_guard<nb::gil_scoped_release>())
      .def("numpy", [](const Tensor& t) {
        HostTensor h;
        {
          nb::gil_scoped_release no_gil;
          h = t.value();
        }
        return array_from_host(h);
      }, "The values as a read-only NumPy array over the tensor's own memory (no copy).")
      .def("__dlpack__", [](const Tensor& t, nb::kwargs) {
        HostTensor h;
        {
          nb::gil_scoped_release no_gil;
          h = t.value();
        }
        return array_from_host(h, false);
      }, "The DLPack capsule of the tensor's memory (torch.from_dlpack takes it without a copy).")
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); })
      .def("copy_", [](Tensor& t, const Tensor& v) {
        t.assign(v);
        return t;
      }, nb::arg("src"), "Overwrites this leaf's values in place (an optimizer update): no gradient flows.")
      .def("stateful", [](Tensor& t) { return t.stateful(); })
      // Arithmetic with numpy broadcasting, tensors or Python numbers on either side.
      .def("__add__", [](const Tensor& a, const Tensor& b) { return a + b; }, nb::is_operator())
      .def("__add__", [](const Tensor& a, double b) { return a + b; }, nb::is_operator())
      .def("__radd__", [](const Tensor& a, double b) { return b + a; }, nb::is_operator())
      .def("__sub__", [](const Tensor& a, const Tensor& b) { return a - b; }, nb::is_operator())
      .def("__sub__", [](const Tensor& a, double b) { return a - b; }, nb::is_operator())
      .def("__rsub__", [](const Tensor& a, double b) { return b - a; }, nb::is_operator())
      .def("__mul__", [](const Tensor& a, const Tensor& b) { return a * b; }, nb::is_operator())
      .def("__mul__", [](const Tensor& a, double b) { return a * b; }, nb::is_operator())
      .def("__rmul__", [](const Tensor& a, double b) { return b * a; }, nb::is_operator())
      .def("__truediv__", [](const Tensor& a, const Tensor& b) { return a / b; }, nb::is_operator())
      .def("__truediv__", [](const Tensor& a, double b) { return a / b; }, nb::is_operator())
      .def("__rtruediv__", [](const Tensor& a, double b) { return b / a; }, nb::is_operator())
      .def("__neg__", [](const Tensor& a) { return -a; }, nb::is_operator())
      .def("__pos__", [](const Tensor& a) { return a; }, nb::is_operator())
      .def("__matmul__", &Tensor::matmul, nb::is_operator())
      .def("__pow__", [](const Tensor& a, double e) { return a.pow(e); }, nb::is_operator())
      .def("__lt__", [](const Tensor& a, const Tensor& b) { return compare_lt(a, b); }, nb::is_operator())
      .def("__lt__", [](const Tensor& a, double b) { return compare_lt(a, scalar_like(a, b)); }, nb::is_operator())
      .def("__gt__", [](const Tensor& a, const Tensor& b) { return compare_lt(b, a); }, nb::is_operator())
      .def("__gt__", [](const Tensor& a, double b) { return compare_lt(scalar_like(a, b), a); }, nb::is_operator())
      .def("eq", [](const Tensor& a, const Tensor& b) { return Tensor::apply(Op::CmpEq, {a, b}, {}, a.dtype()); })
      .def("eq", [](const Tensor& a, double b) { return Tensor::apply(Op::CmpEq, {a, scalar_like(a, b)}, {}, a.dtype()); })
      .def("add", [](const Tensor& a, const Tensor& b) { return a + b; })
      .def("sub", [](const Tensor& a, const Tensor& b) { return a - b; })
      .def("mul", [](const Tensor& a, const Tensor& b) { return a * b; })
      .def("div", [](const Tensor& a, const Tensor& b) { return a / b; })
      .def("maximum", [](const Tensor& a, const Tensor& b) { return Tensor::apply(Op::Max, {a, b}); })
      .def("minimum", [](const Tensor& a, const Tensor& b) { return Tensor::apply(Op::Min, {a, b}); })
      .def("pow", [](const Tensor& a, double e) { return a.pow(e); }, nb::arg("exponent"))
      .def("matmul", &Tensor::matmul)
      .def("square", [](const Tensor& a) { return a * a; });
  // The elementwise methods of the op list (neg, exp, log, sqrt, rsqrt, abs, relu, gelu, ...).
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) SYNOROS_PY_##api(ident)
#define SYNOROS_PY_method(ident) cls.def(#ident, [](const Tensor& t) { return t.ident(); });
#define SYNOROS_PY_internal(ident)
#include "synoros/ops.def"
#undef SYNOROS_PY_method
#undef SYNOROS_PY_internal
  // Reductions: dim None (all), an int or a sequence.
  cls.def("sum", [](const Tensor& t, nb::handle dim, bool keepdim) { return t.sum(axes_arg(dim), keepdim); },
          nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("mean", [](const Tensor& t, nb::handle dim, bool keepdim) { return t.mean(axes_arg(dim), keepdim); },
           nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("amax", [](const Tensor& t, nb::handle dim, bool keepdim) { return t.max(axes_arg(dim), keepdim); },
           nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("amin", [](const Tensor& t, nb::handle dim, bool keepdim) { return t.min(axes_arg(dim), keepdim); },
           nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("var", [](const Tensor& t, nb::handle dim, int64_t correction, bool keepdim) {
        return t.var(axes_arg(dim), correction, keepdim);
      }, nb::arg("dim") = nb::none(), nb::kw_only(), nb::arg("correction") = 1, nb::arg("keepdim") = false)
      .def("std", [](const Tensor& t, nb::handle dim, int64_t correction, bool keepdim) {
        return t.std(axes_arg(dim), correction, keepdim);
      }, nb::arg("dim") = nb::none(), nb::kw_only(), nb::arg("correction") = 1, nb::arg("keepdim") = false)
      // Shapes.
      .def("reshape", [](const Tensor& t, nb::args shape) { return t.reshape(shape_args(shape)); })
      .def("view", [](const Tensor& t, nb::args shape) { return t.reshape(shape_args(shape)); })
      .def("permute", [](const Tensor& t, nb::args dims) { return t.permute(shape_args(dims)); })
      .def("expand", [](const Tensor& t, nb::args shape) { return t.expand(shape_args(shape)); })
      .def("transpose", [](const Tensor& t, int64_t d0, int64_t d1) {
        size_t r = t.shape().size();
        std::vector<int64_t> p(r);
        for (size_t i = 0; i < r; ++i) p[i] = int64_t(i);
        std::swap(p[size_t(normalize_axis(d0, r, "transpose", t.shape()))],
                  p[size_t(normalize_axis(d1, r, "transpose", t.shape()))]);
        return t.permute(p);
      }, nb::arg("dim0"), nb::arg("dim1"))
      .def_prop_ro("mT", &Tensor::transpose)
      .def("t", [](const Tensor& t) {
        if (t.shape().size() > 2) throw Error("t: expects a tensor of rank <= 2, got shape " + shape_str(t.shape()));
        return t.shape().size() < 2 ? t : t.transpose();
      })
      .def("squeeze", &Tensor::squeeze, nb::arg("dim"))
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", [](const Tensor& t) { return t.reshape({t.numel()}); })
      .def("slice", &Tensor::slice, nb::arg("dim"), nb::arg("start"), nb::arg("end"))
      .def("softmax", &Tensor::softmax, nb::arg("dim"))
      .def("log_softmax", &Tensor::log_softmax, nb::arg("dim"))
      .def("to", [](const Tensor& t, DType d) { return d == t.dtype() ? t : t.cast(d); }, nb::arg("dtype"))
      .def("float", [](const Tensor& t) { return t.dtype() == DType::F32 ? t : t.cast(DType::F32); })
      .def("double", [](const Tensor& t) { return t.dtype() == DType::F64 ? t : t.cast(DType::F64); })
      .def("long", [](const Tensor& t) { return t.dtype() == DType::I64 ? t : t.cast(DType::I64); })
      .def("int", [](const Tensor& t) { return t.dtype() == DType::I32 ? t : t.cast(DType::I32); })
      .def("clamp", [](const Tensor& t, std::optional<double> lo, std::optional<double> hi) {
        if (lo && hi) return t.clamp(*lo, *hi);
        if (lo) return t.clamp_min(*lo);
        if (hi) return t.clamp_max(*hi);
        throw Error("clamp: at least one of min and max must be given");
      }, nb::arg("min") = nb::none(), nb::arg("max") = nb::none())
      .def("clamp_min", &Tensor::clamp_min, nb::arg("min"))
      .def("clamp_max", &Tensor::clamp_max, nb::arg("max"))
      // Index and scan methods.
      .def("argmax", [](const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
        return dim ? t.argmax(*dim, keepdim) : t.argmax();
      }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("argmin", [](const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
        return dim ? t.argmin(*dim, keepdim) : t.argmin();
      }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("cumsum", &Tensor::cumsum, nb::arg("dim"))
      .def("cumprod", &Tensor::cumprod, nb::arg("dim"))
      .def("prod", [](const Tensor& t, std::optional<int64_t> dim, bool keepdim) {
        return dim ? t.prod(*dim, keepdim) : t.prod();
      }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false)
      .def("gather", &Tensor::gather, nb::arg("dim"), nb::arg("index"))
      .def("index_select", &Tensor::index_select, nb::arg("dim"), nb::arg("index"))
      .def("_index", &Tensor::index, nb::arg("index"))
      .def("_str", [](const Tensor& t) {
        nb::gil_scoped_release no_gil;
        return to_string(t);
      });
}

}  // namespace synoros::py
