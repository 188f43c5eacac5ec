// The eager backward's step cache: an eager loop's backward() replays the plan recorded for a
// structurally equal forward graph.
#include <algorithm>
#include <deque>
#include <mutex>

#include "api/tensor_impl.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros {

namespace {
// Where a plan input comes from at replay: the forward's k-th fed leaf, or parameter k's gradient
// before the step (accumulated into).
struct Binding {
  bool old_grad;
  size_t k;
  ValueId id;
};
struct Entry {
  Graph forward;  // the loss's lowered graph, compared in full before a replay
  ValueId loss_in_forward;
  std::vector<int32_t> recompute;
  std::vector<ValueId> wrt;  // the parameters differentiated for, as forward values
  std::vector<bool> had_grad;
  std::string config;
  std::shared_ptr<Plan> plan;
  std::vector<Binding> inputs;
  std::vector<ValueId> outputs;  // the loss, then each parameter's gradient
  std::vector<size_t> made;      // the parameters in the order their gradients were created
};
struct Cache {
  std::mutex mu;
  std::deque<std::pair<uint64_t, std::shared_ptr<const Entry>>> entries;  // newest last
  size_t replays = 0;
};
constexpr size_t kEntries = 32;
Cache& cache() {
  static Cache c;
  return c;
}
// A step is replayable while the loss is still lazy and each old gradient is absent or a plain
// fed value (not a constant, not state read in place), held by one parameter only.
bool replayable(const TensorImpl& loss, const std::vector<std::shared_ptr<TensorImpl>>& old_grads) {
  if (loss.value) return false;
  for (size_t i = 0; i < old_grads.size(); ++i) {
    const auto& g = old_grads[i];
    if (!g) continue;
    if (!g->in.empty() || !g->value || g->is_const || g->stateful || g->requires_grad) return false;
    for (size_t j = 0; j < i; ++j)
      if (old_grads[j] == g) return false;
  }
  return true;
}
uint64_t key(const Graph& forward, ValueId loss) { return forward.structural_hash() * 1000003u + uint64_t(loss); }

void set_results(TensorImpl& loss, const std::vector<std::shared_ptr<TensorImpl>>& grads,
                 std::vector<HostTensor>& values) {
  loss.value = std::make_shared<HostTensor>(std::move(values[0]));
  loss.in.clear();  // realized as backward() leaves it: a leaf, as in PyTorch
  loss.leaf_versions.clear();
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i]->value = std::make_shared<HostTensor>(std::move(values[i + 1]));
    grads[i]->in.clear();
    grads[i]->leaf_versions.clear();
  }
}
}  // namespace

bool replay_backward(const Lowered& low, const std::vector<ValueId>& wrt, TensorImpl& loss,
                     const std::vector<std::shared_ptr<TensorImpl>>& params,
                     const std::vector<std::shared_ptr<TensorImpl>>& old_grads) {
  if (!replayable(loss, old_grads)) return false;
  const uint64_t h = key(low.g, low.outputs[0]);
  const std::string config = kernels::kernel_config();
  std::shared_ptr<const Entry> e;
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    for (const auto& [eh, entry] : cache().entries)
      if (eh == h && entry->config == config && entry->loss_in_forward == low.outputs[0] &&
          entry->recompute == low.recompute && entry->wrt == wrt && entry->had_grad.size() == old_grads.size()) {
        bool same = true;
        for (size_t i = 0; i < old_grads.size() && same; ++i) same = entry->had_grad[i] == bool(old_grads[i]);
        if (same && entry->forward.structurally_equal(low.g)) e = entry;
      }
  }
  if (!e) return false;
  std::vector<std::pair<ValueId, const HostTensor*>> inputs;
  for (const Binding& b : e->inputs)
    inputs.push_back({b.id, b.old_grad ? old_grads[b.k]->value.get() : low.feeds[b.k].first->value.get()});
  std::vector<HostTensor> values = run_plan(*e->plan, inputs, e->outputs);
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    ++cache().replays;
  }
  // New gradients made in the recorded step's order: tensors later computed from them (the
  // optimizer's update) lower to the same graph as after the recorded step, and reuse its plan.
  std::vector<std::shared_ptr<TensorImpl>> grads(params.size());
  for (size_t i : e->made) {
    grads[i] = std::make_shared<TensorImpl>();
    grads[i]->dtype = params[i]->dtype;
    grads[i]->shape = params[i]->shape;
  }
  set_results(loss, grads, values);
  for (size_t i = 0; i < params.size(); ++i) params[i]->grad = grads[i];
  return true;
}

void realize_and_record_backward(const Lowered& low, const Graph& forward, const std::vector<ValueId>& wrt,
                                 TensorImpl& loss,
                                 const std::vector<std::shared_ptr<TensorImpl>>& old_grads,
                                 const std::vector<Tensor>& gsums) {
  // Fresh lazy gradients only: one that is a tensor of the forward (a gradient equal to a value
  // the forward computed) is realized in place, as realize() does, and not recorded.
  bool fresh = true;
  for (const Tensor& g : gsums) fresh = fresh && !g.impl()->in.empty() && !g.impl()->value && !low.ids.count(g.impl());
  for (const auto& g : old_grads) fresh = fresh && !(g && low.ids.count(g.get()));  // an old gradient used as data
  if (!fresh || !replayable(loss, old_grads)) {
    std::vector<Tensor> all{Tensor(loss.shared_from_this())};
    all.insert(all.end(), gsums.begin(), gsums.end());
    realize(all, false);
    return;
  }
  std::vector<std::shared_ptr<TensorImpl>> roots{loss.shared_from_this()};
  for (const Tensor& g : gsums) roots.push_back(g.impl_ptr());
  Lowered step = lower_dag(roots);
  auto e = std::make_shared<Entry>();
  e->forward = forward;
  e->loss_in_forward = low.outputs[0];
  e->recompute = low.recompute;
  e->wrt = wrt;
  for (const auto& g : old_grads) e->had_grad.push_back(bool(g));
  e->config = kernels::kernel_config();
  e->plan = cached_plan(step);
  for (size_t i = 0; i < gsums.size(); ++i) e->made.push_back(i);
  std::sort(e->made.begin(), e->made.end(),
            [&](size_t a, size_t b) { return gsums[a].impl()->seq < gsums[b].impl()->seq; });
  e->outputs = step.outputs;
  // Each input of the step is one of the forward's fed leaves or an old gradient; anything else
  // (none is known) leaves the step unrecorded.
  bool bound = true;
  std::vector<std::pair<ValueId, const HostTensor*>> inputs;
  for (const auto& [impl, id] : step.feeds) {
    inputs.push_back({id, impl->value.get()});
    size_t k = 0;
    while (k < low.feeds.size() && low.feeds[k].first != impl) ++k;
    if (k < low.feeds.size()) {
      e->inputs.push_back({false, k, id});
      continue;
    }
    k = 0;
    while (k < old_grads.size() && old_grads[k] != impl) ++k;
    if (k < old_grads.size()) e->inputs.push_back({true, k, id});
    else bound = false;
  }
  std::vector<HostTensor> values = run_plan(*e->plan, inputs, e->outputs);
  std::vector<std::shared_ptr<TensorImpl>> grads;
  for (const Tensor& g : gsums) grads.push_back(g.impl_ptr());
  set_results(loss, grads, values);
  if (!bound) return;
  std::lock_guard<std::mutex> lk(cache().mu);
  cache().entries.emplace_back(key(forward, low.outputs[0]), std::move(e));
  if (cache().entries.size() > kEntries) cache().entries.pop_front();
}

size_t backward_replays() {
  std::lock_guard<std::mutex> lk(cache().mu);
  return cache().replays;
}

void clear_backward_cache() {
  std::lock_guard<std::mutex> lk(cache().mu);
  cache().entries.clear();
}

}  // namespace synoros
