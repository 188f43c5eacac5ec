// Free functions: factories, joins, einsum, losses, the functional layers and gradient mode.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/nn.hpp"

namespace synoros::py {

namespace {
std::vector<std::unique_ptr<RecomputeScope>>& recompute_scopes() {
  thread_local std::vector<std::unique_ptr<RecomputeScope>> open;
  return open;
}
}  // namespace

void bind_functions(nb::module_& m) {
  // Factories (float32 unless a dtype is given).
  m.def("tensor_from_array", [](const AnyArray& a, bool share, bool requires_grad) {
    Tensor t = Tensor::from(host_from_array(a, share));
    if (requires_grad) t.requires_grad();
    return t;
  }, nb::arg("array"), nb::arg("share") = false, nb::arg("requires_grad") = false,
     "A leaf holding the array's values: its memory when share is set and the layout allows, else a copy.");
  m.def("shares_memory", [](const Tensor& t, const AnyArray& a) {
    return t.realized() && t.value().buffer->data() == a.data();
  }, nb::arg("tensor"), nb::arg("array"));
  m.def("zeros", [](nb::handle s, DType d) { return Tensor::zeros(shape_arg(s), d); }, nb::arg("shape"),
        nb::arg("dtype") = DType::F32);
  m.def("ones", [](nb::handle s, DType d) { return Tensor::ones(shape_arg(s), d); }, nb::arg("shape"),
        nb::arg("dtype") = DType::F32);
  m.def("full", [](nb::handle s, double v, DType d) { return Tensor::full(shape_arg(s), v, d); }, nb::arg("shape"),
        nb::arg("fill_value"), nb::arg("dtype") = DType::F32);
  m.def("arange", &Tensor::arange, nb::arg("end"), nb::arg("dtype") = DType::F32);
  m.def("scalar", &Tensor::scalar, nb::arg("value"), nb::arg("dtype") = DType::F32);
  m.def("randn", [](nb::handle s, std::optional<uint64_t> seed, double std) {
    return Tensor::randn(shape_arg(s), seed_arg(seed), std);
  }, nb::arg("shape"), nb::kw_only(), nb::arg("seed") = nb::none(), nb::arg("std") = 1.0);
  m.def("uniform", [](nb::handle s, double bound, std::optional<uint64_t> seed) {
    return Tensor::uniform(shape_arg(s), seed_arg(seed), bound);
  }, nb::arg("shape"), nb::arg("bound"), nb::kw_only(), nb::arg("seed") = nb::none());
  // Joins, selection, einsum.
  m.def("where", &where, nb::arg("condition"), nb::arg("input"), nb::arg("other"));
  m.def("cat", &cat, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("stack", &stack, nb::arg("tensors"), nb::arg("dim") = 0);
  m.def("einsum", [](const std::string& spec, nb::args ops) {
    std::vector<Tensor> v;
    for (nb::handle h : ops) {
      if (nb::isinstance<Tensor>(h)) v.push_back(nb::cast<Tensor>(h));
      else for (nb::handle x : h) v.push_back(nb::cast<Tensor>(x));
    }
    return einsum(spec, v);
  }, nb::arg("equation"), nb::arg("operands"));
  m.def("realize", &realize, nb::arg("tensors"), nb::call_guard<nb::gil_scoped_release>(),
        "Computes several tensors with one plan (work they share is done once).");
  // Losses and the functional layers (synoros.nn.functional).
  m.def("mse_loss", &mse_loss, nb::arg("input"), nb::arg("target"));
  m.def("cross_entropy", [](const Tensor& input, const Tensor& target, std::optional<Tensor> weight,
                            std::optional<int64_t> ignore_index, const std::string& reduction, double label_smoothing) {
    CrossEntropyOptions o;
    o.weight = weight.value_or(Tensor());
    if (is_float(target.dtype()) && ignore_index == -100) ignore_index.reset();  // PyTorch's default, unused
    o.ignore_index = ignore_index;
    o.label_smoothing = label_smoothing;
    if (reduction == "sum") o.reduction = Reduction::Sum;
    else if (reduction == "none") o.reduction = Reduction::None;
    else if (reduction != "mean") throw Error("cross_entropy: reduction must be 'mean', 'sum' or 'none', got '" + reduction + "'");
    return cross_entropy(input, target, o);
  }, nb::arg("input"), nb::arg("target"), nb::arg("weight") = nb::none(), nb::kw_only(),
     nb::arg("ignore_index") = -100, nb::arg("reduction") = "mean", nb::arg("label_smoothing") = 0.0,
     "torch.nn.functional.cross_entropy: class indices (targets equal to ignore_index skipped) or probabilities,\n"
     "optionally weighted per class.");
  m.def("layer_norm", [](const Tensor& x, const Shape& normalized_shape, std::optional<Tensor> w,
                         std::optional<Tensor> b, double eps) {
    return layer_norm(x, normalized_shape, w.value_or(Tensor()), b.value_or(Tensor()), eps);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight") = nb::none(), nb::arg("bias") = nb::none(),
     nb::arg("eps") = 1e-5, "torch.nn.functional.layer_norm over the trailing axes normalized_shape.");
  m.def("batch_norm", [](const Tensor& x, std::optional<Tensor> rm, std::optional<Tensor> rv, std::optional<Tensor> w,
                         std::optional<Tensor> b, bool training, double momentum, double eps) {
    return nn::batch_norm(x, rm.value_or(Tensor()), rv.value_or(Tensor()), w.value_or(Tensor()), b.value_or(Tensor()),
                          training, momentum, eps);
  }, nb::arg("input"), nb::arg("running_mean").none(), nb::arg("running_var").none(), nb::arg("weight") = nb::none(),
     nb::arg("bias") = nb::none(), nb::arg("training") = false, nb::arg("momentum") = 0.1, nb::arg("eps") = 1e-5,
     "torch.nn.functional.batch_norm over [N, C, ...]; in training, given running statistics are updated in place.");
  m.def("scaled_dot_product_attention", [](const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                           std::optional<double> scale) {
    if (scale && *scale == 0) throw Error("scaled_dot_product_attention: scale must be non-zero");
    return scaled_dot_product_attention(q, k, v, causal, scale.value_or(0.0));
  }, nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::kw_only(), nb::arg("is_causal") = false,
     nb::arg("scale") = nb::none(), "softmax(scale q k^T) v in one fused kernel, forward and backward.");
  m.def("embedding", [](const Tensor& indices, const Tensor& weight) { return embedding(weight, indices); },
        nb::arg("input"), nb::arg("weight"));
  m.def("linear", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
    return nn::linear(x, w, b ? *b : Tensor());
  }, nb::arg("input"), nb::arg("weight"), nb::arg("bias") = nb::none());
  m.def("conv2d", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups) {
    return nn::conv2d(x, w, b ? *b : Tensor(), stride, padding, dilation, groups);
  }, nb::arg("input"), nb::arg("weight"), nb::arg("bias") = nb::none(), nb::arg("stride") = 1,
     nb::arg("padding") = 0, nb::arg("dilation") = 1, nb::arg("groups") = 1);
  m.def("max_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s, int64_t p) {
    return nn::max_pool2d(x, k, s.value_or(k), p);
  }, nb::arg("input"), nb::arg("kernel_size"), nb::arg("stride") = nb::none(), nb::arg("padding") = 0);
  m.def("avg_pool2d", [](const Tensor& x, int64_t k, std::optional<int64_t> s, int64_t p) {
    return nn::avg_pool2d(x, k, s.value_or(k), p);
  }, nb::arg("input"), nb::arg("kernel_size"), nb::arg("stride") = nb::none(), nb::arg("padding") = 0);
  m.def("adaptive_avg_pool2d", [](const Tensor& x, std::pair<int64_t, int64_t> hw) {
    return nn::adaptive_avg_pool2d(x, hw.first, hw.second);
  }, nb::arg("input"), nb::arg("output_size"));
  m.def("silu", &nn::silu, nb::arg("input"));
  m.def("flatten", &nn::flatten, nb::arg("input"), nb::arg("start_dim") = 1);
  m.def("dropout", [](const Tensor& x, double p, bool training, std::optional<uint64_t> seed) {
    return training && p > 0 ? x.dropout(p, seed_arg(seed)) : x;
  }, nb::arg("input"), nb::arg("p") = 0.5, nb::arg("training") = true, nb::kw_only(), nb::arg("seed") = nb::none());
  // Gradient mode (torch.no_grad and friends build on these).
  m.def("is_grad_enabled", &grad_enabled);
  m.def("set_grad_enabled", &set_grad_enabled, nb::arg("mode"));
  // Activation checkpointing (synoros.utils.checkpoint builds on these): the values recorded
  // between enter and exit on this thread form one recomputed segment.
  m.def("_recompute_enter", [] { recompute_scopes().push_back(std::make_unique<RecomputeScope>()); });
  m.def("_recompute_exit", [] {
    if (recompute_scopes().empty()) throw Error("checkpoint: no segment is open on this thread");
    recompute_scopes().pop_back();
  });
}

}  // namespace synoros::py
