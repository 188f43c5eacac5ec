// Module bookkeeping: registration and PyTorch-ordered, dotted names.
#include "synoros/nn.hpp"

namespace synoros::nn {

Tensor& Module::register_parameter(std::string name, Tensor t) {
  if (!t.defined()) throw Error("register_parameter: '" + name + "' is undefined");
  t.requires_grad();
  params_.emplace_back(std::move(name), t);
  return params_.back().second;
}

Tensor& Module::register_buffer(std::string name, Tensor t) {
  if (!t.defined()) throw Error("register_buffer: '" + name + "' is undefined");
  buffers_.emplace_back(std::move(name), t);
  return buffers_.back().second;
}

void Module::collect(const std::string& prefix, bool params, bool buffers, Named& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, out);
}

Named Module::named_parameters() const {
  Named out;
  collect("", true, false, out);
  return out;
}

Named Module::named_buffers() const {
  Named out;
  collect("", false, true, out);
  return out;
}

Named Module::state_dict() const {
  Named out;
  collect("", true, true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers()) out.push_back(t);
  return out;
}

int64_t Module::parameter_count() const {
  int64_t c = 0;
  for (auto& [n, t] : named_parameters()) c += t.numel();
  return c;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

Sequential& Sequential::add(ModulePtr m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& m : layers_) y = m->forward(y);
  return y;
}

}  // namespace synoros::nn
