// The eager backward's step cache: an eager loop's backward() replays the plan recorded for a
// structurally equal forward graph.
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>

#include "api/tensor_impl.hpp"
#include "core/thread_scratch.hpp"
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
  std::deque<std::shared_ptr<const Entry>> entries;  // newest last
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

void set_results(TensorImpl& loss, const std::vector<std::shared_ptr<TensorImpl>>& grads,
                 std::vector<HostTensor>& values) {
  loss.value = new_host_tensor(std::move(values[0]));
  loss.in.clear();  // realized as backward() leaves it: a leaf, as in PyTorch
  loss.leaf_versions.clear();
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i]->value = new_host_tensor(std::move(values[i + 1]));
    grads[i]->in.clear();
    grads[i]->leaf_versions.clear();
  }
}

// Whether `all` (a DAG in creation order) lowers to `g`, by lower_dag's layout and
// Graph::structurally_equal's rules, without building the tape: the same ops reading the same
// positions with the same attributes, dtypes and shapes, the same parameters' storage, the same
// constants' bytes, fed values where g has inputs. Values realized on a gradient path must
// still hold (lower_dag refuses them otherwise; the full path then says why).
bool lowers_to(const std::vector<TensorImpl*>& all, const Graph& g) {
  if (g.size() != all.size()) return false;
  auto position = [&](const TensorImpl* x) {
    auto it = std::lower_bound(all.begin(), all.end(), x->seq,
                               [](const TensorImpl* a, uint64_t seq) { return a->seq < seq; });
    return it != all.end() && *it == x ? ValueId(it - all.begin()) : kNoValue;
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const TensorImpl& t = *all[i];
    const Node& n = g.node(ValueId(i));
    if (n.dtype != t.dtype || n.shape != t.shape) return false;
    if (!t.in.empty()) {
      if (n.op != t.op || n.in.size() != t.in.size() || !(n.attrs == t.attrs)) return false;
      for (size_t j = 0; j < t.in.size(); ++j)
        if (n.in[j] != position(t.in[j].get())) return false;
      for (const auto& [buf, version] : t.leaf_versions)
        if (buf->version() != version) return false;
    } else if (!t.value) {
      return false;  // an argument of a traced step
    } else if (t.is_const) {
      if (n.op != Op::Const || std::memcmp(n.data->buffer->data(), t.value->buffer->data(), t.value->bytes()) != 0)
        return false;
    } else if (t.requires_grad || t.stateful) {
      if (n.op != Op::Param || n.data != t.value) return false;
    } else if (n.op != Op::Input) {
      return false;
    }
  }
  return true;
}
}  // namespace

bool replay_backward(TensorImpl& loss) {
  if (loss.value) return false;
  // Scratch reused across calls (an eager loop calls this every step); the references it holds
  // to tensors are dropped on the way out.
  struct Scratch {
    std::vector<TensorImpl*> all;
    std::vector<const TensorImpl*> feeds;
    std::vector<std::shared_ptr<TensorImpl>> params, old_grads;
    std::vector<ValueId> wrt;
    std::vector<int32_t> recompute;
    std::vector<std::pair<ValueId, const HostTensor*>> inputs;
    std::vector<HostTensor> values;
    std::vector<std::shared_ptr<TensorImpl>> grads;
  };
  Scratch& scratch = thread_scratch<Scratch>();
  struct Release {
    Scratch& s;
    ~Release() {
      s.params.clear();
      s.old_grads.clear();
      s.values.clear();
      s.grads.clear();
    }
  } release{scratch};
  TensorImpl* root = &loss;
  dag_in_order(&root, 1, scratch.all);
  const std::vector<TensorImpl*>& all = scratch.all;
  // What lower_dag would make of it: the fed values and the parameters in order, the parameters
  // differentiated for (those requiring a gradient) and the activation-checkpoint segments.
  std::vector<const TensorImpl*>& feeds = scratch.feeds;
  std::vector<std::shared_ptr<TensorImpl>>&params = scratch.params, &old_grads = scratch.old_grads;
  std::vector<ValueId>& wrt = scratch.wrt;
  std::vector<int32_t>& recompute = scratch.recompute;
  feeds.clear(), wrt.clear(), recompute.clear();
  for (size_t i = 0; i < all.size(); ++i) {
    TensorImpl* t = all[i];
    if (t->recompute >= 0) {
      recompute.resize(i + 1, -1);
      recompute[i] = t->recompute;
    }
    if (!t->in.empty() || !t->value || t->is_const) continue;
    if (!t->requires_grad && !t->stateful) {
      feeds.push_back(t);
    } else if (t->requires_grad) {
      wrt.push_back(ValueId(i));
      params.push_back(t->shared_from_this());
      old_grads.push_back(t->grad);
    }
  }
  if (wrt.empty() || !replayable(loss, old_grads)) return false;
  const std::string config = kernels::kernel_config();
  const ValueId loss_id = ValueId(all.size() - 1);  // a tensor is created after its inputs
  std::shared_ptr<const Entry> e;
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    for (auto it = cache().entries.rbegin(); it != cache().entries.rend() && !e; ++it) {
      const Entry& entry = **it;
      if (entry.config != config || entry.loss_in_forward != loss_id || entry.recompute != recompute ||
          entry.wrt != wrt || entry.had_grad.size() != old_grads.size())
        continue;
      bool same = true;
      for (size_t i = 0; i < old_grads.size() && same; ++i) same = entry.had_grad[i] == bool(old_grads[i]);
      if (same && lowers_to(all, entry.forward)) e = *it;
    }
  }
  if (!e) return false;
  std::vector<std::pair<ValueId, const HostTensor*>>& inputs = scratch.inputs;
  inputs.clear();
  for (const Binding& b : e->inputs)
    inputs.push_back({b.id, b.old_grad ? old_grads[b.k]->value.get() : feeds[b.k]->value.get()});
  std::vector<HostTensor>& values = scratch.values;
  run_plan(*e->plan, inputs, e->outputs, values);
  {
    std::lock_guard<std::mutex> lk(cache().mu);
    ++cache().replays;
  }
  // New gradients made in the recorded step's order: tensors later computed from them (the
  // optimizer's update) lower to the same graph as after the recorded step, and reuse its plan.
  std::vector<std::shared_ptr<TensorImpl>>& grads = scratch.grads;
  grads.assign(params.size(), nullptr);
  for (size_t i : e->made) {
    grads[i] = new_tensor_impl();
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
  cache().entries.push_back(std::move(e));
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
