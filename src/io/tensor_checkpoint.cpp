// Checkpoints of front-end Tensors: their host values go through the HostTensor functions.
// A realized leaf's value() shares its storage, so load_into writes the parameter in place.
#include "synoros/checkpoint.hpp"

namespace synoros::io {

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const Metadata& metadata) {
  std::vector<HostTensor> values;
  values.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) throw Error("save_safetensors " + path + ": tensor '" + name + "' is undefined");
    values.push_back(t.value());
  }
  std::vector<std::pair<std::string, const HostTensor*>> refs;
  for (size_t i = 0; i < tensors.size(); ++i) refs.emplace_back(tensors[i].first, &values[i]);
  save_safetensors(path, refs, metadata);
}

Metadata load_into(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& targets) {
  std::vector<HostTensor> views;
  views.reserve(targets.size());
  for (const auto& [name, t] : targets) {
    if (!t.defined() || !t.realized() || !t.is_leaf())
      throw Error("load_into " + path + ": target '" + name + "' is not a realized leaf tensor");
    views.push_back(t.value());  // shares the leaf's buffer
  }
  std::vector<std::pair<std::string, HostTensor*>> refs;
  for (size_t i = 0; i < targets.size(); ++i) refs.emplace_back(targets[i].first, &views[i]);
  return load_into(path, refs);
}

}  // namespace synoros::io
