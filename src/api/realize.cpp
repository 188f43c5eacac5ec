// Lowering lazy tensors to the tape, the plan cache, realization and compile().
#include <deque>
#include <mutex>
#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_set>

#include "api/tensor_impl.hpp"
#include "core/thread_scratch.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros {

void dag_in_order(TensorImpl* const* roots, size_t n, std::vector<TensorImpl*>& all) {
  // An eager step's DAG is a few dozen tensors: they are looked for in `all` itself until
  // there are more than kSmall, then in a hash set.
  constexpr size_t kSmall = 64;
  struct Stack {
    std::vector<TensorImpl*> v;
  };
  std::vector<TensorImpl*>& stack = thread_scratch<Stack>().v;
  std::unordered_set<const TensorImpl*> seen;
  all.clear(), stack.clear();
  all.reserve(kSmall), stack.reserve(kSmall);
  for (size_t i = 0; i < n; ++i) stack.push_back(roots[i]);
  while (!stack.empty()) {
    TensorImpl* t = stack.back();
    stack.pop_back();
    if (all.size() < kSmall) {
      if (std::find(all.begin(), all.end(), t) != all.end()) continue;
    } else {
      if (seen.empty()) seen.insert(all.begin(), all.end());
      if (!seen.insert(t).second) continue;
    }
    all.push_back(t);
    for (const auto& x : t->in) stack.push_back(x.get());
  }
  std::sort(all.begin(), all.end(), [](const TensorImpl* a, const TensorImpl* b) { return a->seq < b->seq; });
}
std::vector<TensorImpl*> dag_in_order(const std::vector<std::shared_ptr<TensorImpl>>& roots) {
  std::vector<TensorImpl*> ptrs, all;
  for (const auto& r : roots) ptrs.push_back(r.get());
  dag_in_order(ptrs.data(), ptrs.size(), all);
  return all;
}

Lowered lower_dag(const std::vector<std::shared_ptr<TensorImpl>>& roots) {
  // Everything the roots depend on, laid out in creation order: the program order the user
  // wrote (forward, then backward in autodiff order), which is also the schedule.
  std::vector<TensorImpl*> all = dag_in_order(roots);
  Lowered low;
  for (TensorImpl* t : all) {
    ValueId v;
    if (t->in.empty() && t->value) {
      if (t->is_const) {
        v = low.g.constant(*t->value);
      } else if (t->requires_grad || t->stateful) {
        v = low.g.param(t->value, "p" + std::to_string(low.params.size()));
        low.params.push_back({t->shared_from_this(), v});
      } else {
        v = low.g.input(t->dtype, t->shape, "in" + std::to_string(low.feeds.size()));
        low.feeds.push_back({t->shared_from_this(), v});
      }
    } else if (t->in.empty()) {
      if (t->placeholder < 0) throw Error("tensor: a leaf without a value");
      v = low.g.input(t->dtype, t->shape, "arg" + std::to_string(t->placeholder));
      if (t->requires_grad) low.params.push_back({t->shared_from_this(), v});  // a gradient the step returns
    } else {
      for (const auto& [buf, version] : t->leaf_versions)
        if (buf->version() != version)
          throw Error("tensor: a value read earlier is used again, but a tensor it was computed from has been "
                      "modified in place since (an optimizer step, say); detach() it before the change");
      std::vector<ValueId> in;
      in.reserve(t->in.size());
      for (const auto& x : t->in) in.push_back(low.ids.at(x.get()));
      v = low.g.add_checked(t->op, std::move(in), t->attrs, t->dtype, t->shape);  // checked when recorded
    }
    low.ids[t] = v;
    if (low.by_id.size() <= size_t(v)) low.by_id.resize(size_t(v) + 1);
    low.by_id[size_t(v)] = t->shared_from_this();
    if (t->recompute >= 0) {
      low.recompute.resize(low.g.size(), -1);
      low.recompute[size_t(v)] = t->recompute;
    }
  }
  for (const auto& r : roots) low.outputs.push_back(low.ids.at(r.get()));
  return low;
}

bool depends_on_grad(const TensorImpl& root, std::unordered_map<const TensorImpl*, bool>& memo) {
  // Post-order without recursion: an eager loop can build chains deeper than the stack.
  std::vector<std::pair<const TensorImpl*, bool>> stack{{&root, false}};
  while (!stack.empty()) {
    auto [t, expanded] = stack.back();
    stack.pop_back();
    if (memo.count(t)) continue;
    if (t->no_grad) {
      memo[t] = false;
    } else if (t->in.empty()) {
      memo[t] = t->requires_grad;
    } else if (!expanded) {
      stack.push_back({t, true});
      for (const auto& x : t->in)
        if (!memo.count(x.get())) stack.push_back({x.get(), false});
    } else {
      bool any = false;
      for (const auto& x : t->in) any = any || memo.at(x.get());
      memo[t] = any;
    }
  }
  return memo.at(&root);
}

std::vector<Tensor> raise(const Lowered& low, const std::vector<ValueId>& ids) {
  std::vector<std::shared_ptr<TensorImpl>> made(low.g.size());
  for (size_t i = 0; i < low.by_id.size(); ++i) made[i] = low.by_id[i];
  std::function<std::shared_ptr<TensorImpl>(ValueId)> up = [&](ValueId v) {
    if (made[size_t(v)]) return made[size_t(v)];
    const Node& n = low.g.node(v);
    auto t = new_tensor_impl();
    t->op = n.op;
    t->attrs = n.attrs;
    t->dtype = n.dtype;
    t->shape = n.shape;
    if (n.op == Op::Const) {
      t->value = n.data;
      t->is_const = true;
    } else {
      for (ValueId x : n.in) t->in.push_back(up(x));
    }
    made[size_t(v)] = t;
    return t;
  };
  // Create in tape order so the new tensors' creation order follows the gradient program.
  std::vector<bool> want(low.g.size(), false);
  for (ValueId v : ids) want[size_t(v)] = true;
  for (size_t i = low.g.size(); i-- > 0;)
    if (want[i])
      for (ValueId x : low.g.node(ValueId(i)).in) want[size_t(x)] = true;
  for (size_t i = 0; i < low.g.size(); ++i)
    if (want[i]) up(ValueId(i));
  std::vector<Tensor> out;
  for (ValueId v : ids) out.emplace_back(up(v));
  return out;
}

namespace {
// Compiled plans by structural hash, bounded by count and by the memory they hold (arena and
// scratch): the oldest go first. A plan a CompiledStep still uses stays alive through it.
struct PlanCache {
  std::mutex mu;  // lookups and inserts from several threads; plans are compiled outside it
  std::unordered_multimap<uint64_t, std::shared_ptr<Plan>> plans;
  std::deque<std::pair<uint64_t, std::shared_ptr<Plan>>> order;  // insertion order
  size_t bytes = 0;
};
constexpr size_t kPlanCacheEntries = 512;
size_t& plan_cache_limit() {
  static size_t limit = size_t(1) << 30;
  return limit;
}
size_t plan_bytes(const Plan& p) { return p.arena_bytes() + p.scratch_bytes(); }
PlanCache& cache() {
  static PlanCache c;
  return c;
}
}  // namespace

std::shared_ptr<Plan> cached_plan(const Lowered& low, const std::vector<std::pair<ValueId, ValueId>>& write_back) {
  uint64_t h = low.g.structural_hash();
  for (ValueId o : low.outputs) h = h * 1000003u + uint64_t(o);
  for (const auto& [o, prm] : write_back) h = (h * 1000003u + uint64_t(o)) * 1000003u + uint64_t(prm);
  // Kernels are chosen per instruction set and strictness: a plan is reused only under both.
  std::string config = kernels::kernel_config();
  for (char ch : config) h = h * 131u + uint64_t(ch);
  PlanCache& c = cache();
  auto find = [&]() -> std::shared_ptr<Plan> {
    auto range = c.plans.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      // A hash match is confirmed by full structural equality before reuse.
      if (it->second->outputs() == low.outputs && it->second->write_back() == write_back &&
          it->second->compiled_for() == config && it->second->graph().structurally_equal(low.g))
        return it->second;
    }
    return nullptr;
  };
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (auto hit = find()) return hit;
  }
  CompileOptions opts;
  opts.write_back = write_back;
  auto p = std::make_shared<Plan>(low.g, low.outputs, opts);
  std::lock_guard<std::mutex> lk(c.mu);
  if (auto hit = find()) return hit;  // another thread compiled it meanwhile
  c.plans.emplace(h, p);
  c.order.emplace_back(h, p);
  c.bytes += plan_bytes(*p);
  while (c.order.size() > 1 && (c.order.size() > kPlanCacheEntries || c.bytes > plan_cache_limit())) {
    auto [oh, old] = c.order.front();
    c.order.pop_front();
    c.bytes -= plan_bytes(*old);
    auto r = c.plans.equal_range(oh);
    for (auto it = r.first; it != r.second; ++it)
      if (it->second == old) {
        c.plans.erase(it);
        break;
      }
  }
  return p;
}

size_t plan_cache_size() {
  std::lock_guard<std::mutex> lk(cache().mu);
  return cache().plans.size();
}
size_t plan_cache_bytes() {
  std::lock_guard<std::mutex> lk(cache().mu);
  return cache().bytes;
}
void clear_plan_cache() {
  PlanCache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.plans.clear();
  c.order.clear();
  c.bytes = 0;
}
void set_plan_cache_limit(size_t bytes) { plan_cache_limit() = bytes; }

void run_plan(Plan& plan, const std::vector<std::pair<ValueId, const HostTensor*>>& inputs,
              const std::vector<ValueId>& outputs, std::vector<HostTensor>& values) {
  // Two threads realizing the same structure share one cached plan (and its arena): its feed,
  // run and read happen under one lock.
  static std::mutex run_mu;
  std::lock_guard<std::mutex> lk(run_mu);
  for (const auto& [id, value] : inputs) plan.set_input(id, *value);
  plan.run();
  values.clear();
  values.reserve(outputs.size());
  for (ValueId o : outputs) values.push_back(plan.read(o));
}
std::vector<HostTensor> run_plan(Plan& plan, const std::vector<std::pair<ValueId, const HostTensor*>>& inputs,
                                 const std::vector<ValueId>& outputs) {
  std::vector<HostTensor> values;
  run_plan(plan, inputs, outputs, values);
  return values;
}

void realize(const std::vector<Tensor>& ts) { realize(ts, true); }

void realize(const std::vector<Tensor>& ts, bool keep_graph) {
  if (trace_state().active) throw Error("realize: values cannot be read while compile() is tracing");
  std::vector<std::shared_ptr<TensorImpl>> roots;
  for (const Tensor& t : ts) {
    if (!t.defined()) throw Error("realize: undefined tensor");
    if (!t.realized()) {
      roots.push_back(t.impl_ptr());
    } else if (!keep_graph) {  // already read, graph kept: cut it now
      t.impl()->in.clear();
      t.impl()->leaf_versions.clear();
    }
  }
  if (roots.empty()) return;
  Lowered low = lower_dag(roots);
  std::shared_ptr<Plan> plan = cached_plan(low);
  std::vector<std::pair<ValueId, const HostTensor*>> inputs;
  for (const auto& [impl, id] : low.feeds) inputs.push_back({id, impl->value.get()});
  std::vector<HostTensor> values = run_plan(*plan, inputs, low.outputs);
  // Reading a value does not detach it (PyTorch's rule): a tensor that depends on a leaf
  // requiring a gradient keeps its inputs, so a later backward() still reaches that leaf. One that
  // does not becomes a leaf, and the DAG behind it can be freed; detach() is the explicit cut.
  std::unordered_map<const TensorImpl*, bool> memo;
  for (size_t i = 0; i < roots.size(); ++i) {
    roots[i]->value = new_host_tensor(std::move(values[i]));
    if (!keep_graph || !depends_on_grad(*roots[i], memo)) {
      roots[i]->in.clear();
      continue;
    }
    // Every leaf this value depends on, with the version it had: see lower_dag.
    std::vector<const TensorImpl*> stack{roots[i].get()};
    std::unordered_map<const TensorImpl*, bool> seen;
    while (!stack.empty()) {
      const TensorImpl* t = stack.back();
      stack.pop_back();
      if (seen[t]) continue;
      seen[t] = true;
      if (t->in.empty()) {
        if (t->value && t->value->buffer) roots[i]->leaf_versions.push_back({t->value->buffer, t->value->buffer->version()});
      } else {
        for (const auto& x : t->in) stack.push_back(x.get());
      }
    }
  }
}

void CompiledStep::set_args(const std::vector<HostTensor>& args) {
  if (args.size() != inputs_.size())
    throw Error("compiled step: expects " + std::to_string(inputs_.size()) + " arguments, got " +
                std::to_string(args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    if (inputs_[i] != kNoValue) plan_->set_input(inputs_[i], args[i]);
}

void CompiledStep::copy_updates() {
  for (const Update& u : updates_) {
    if (u.src != u.dst->buffer->data()) std::memcpy(u.dst->buffer->data(), u.src, u.dst->bytes());  // else written in place
    u.dst->buffer->mark_modified();
  }
}

std::vector<HostTensor> CompiledStep::operator()(const std::vector<HostTensor>& args) {
  set_args(args);
  run();
  std::vector<HostTensor> out;
  for (ValueId o : outputs_) out.push_back(plan_->read(o));
  return out;
}

void CompiledStep::run(const std::vector<HostTensor>& args, const std::function<void(size_t, const void*)>& ready) {
  set_args(args);
  // The launch after which each output is final: the last one whose ops compute it, or for a
  // view (a value no launch computes), the one that computes the value it views.
  const std::vector<LaunchInfo>& info = plan_->launch_info();
  const Graph& g = plan_->graph();
  std::vector<size_t> launch_of(g.size(), SIZE_MAX);
  for (size_t l = 0; l < info.size(); ++l)
    for (ValueId v : info[l].ops) launch_of[size_t(v)] = l;
  std::vector<size_t> last(outputs_.size(), SIZE_MAX);
  for (size_t o = 0; o < outputs_.size(); ++o) {
    ValueId v = outputs_[o];
    while (launch_of[size_t(v)] == SIZE_MAX && g.node(v).in.size() == 1) v = g.node(v).in[0];
    last[o] = launch_of[size_t(v)];
  }
  std::vector<std::vector<size_t>> at(info.size());
  for (size_t o = 0; o < outputs_.size(); ++o)
    if (last[o] != SIZE_MAX) at[last[o]].push_back(o);
  std::vector<bool> announced(outputs_.size(), false);
  auto announce = [&](size_t o) {
    if (!announced[o]) announced[o] = true, ready(o, plan_->ptr(outputs_[o]));
  };
  const size_t launches = plan_->launches().size();
  plan_->run_observed([&](size_t l) {
    if (l < at.size())
      for (size_t o : at[l]) announce(o);
    if (l + 1 == launches)  // the end: whatever is left (outputs no launch computes, or a run that
      for (size_t o = 0; o < outputs_.size(); ++o) announce(o);  // reported only its end)
  });
  if (launches == 0)
    for (size_t o = 0; o < outputs_.size(); ++o) announce(o);
  copy_updates();
}

HostTensor CompiledStep::output(size_t i) const { return plan_->read(outputs_.at(i)); }

void CompiledStep::run() {
  plan_->run();
  copy_updates();
}

float* CompiledStep::input_ptr(size_t i) { return plan_->data<float>(inputs_.at(i)); }
const float* CompiledStep::output_ptr(size_t i) { return plan_->data<float>(outputs_.at(i)); }
std::pair<DType, Shape> CompiledStep::output_spec(size_t i) const {
  const Node& n = plan_->graph().node(outputs_.at(i));
  return {n.dtype, n.shape};
}

CompiledStep compile(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                     const std::vector<std::pair<DType, Shape>>& arg_specs) {
  TraceState& ts = trace_state();
  if (ts.active) throw Error("compile: already tracing");
  std::vector<Tensor> args;
  for (size_t i = 0; i < arg_specs.size(); ++i) {
    auto t = new_tensor_impl();
    t->dtype = arg_specs[i].first;
    t->shape = arg_specs[i].second;
    t->placeholder = int(i);
    args.emplace_back(t);
  }
  ts.active = true;
  ts.updates.clear();
  ts.saved_grads.clear();
  struct Reset {
    TraceState& s;
    ~Reset() {
      s.active = false;
      // Tracing leaves the eager state as it was (restored newest first).
      for (auto it = s.saved_grads.rbegin(); it != s.saved_grads.rend(); ++it) it->first->grad = it->second;
      s.saved_grads.clear();
    }
  } reset{ts};
  std::vector<Tensor> outs = fn(args);
  std::vector<std::shared_ptr<TensorImpl>> roots;
  for (const Tensor& o : outs) roots.push_back(o.impl_ptr());
  for (const auto& [p, v] : ts.updates) roots.push_back(v);
  Lowered low = lower_dag(roots);
  // Each update may be written into its parameter's storage during the run (Plan::written_into).
  std::vector<std::pair<ValueId, ValueId>> write_back;
  for (size_t i = 0; i < ts.updates.size(); ++i) {
    auto it = low.ids.find(ts.updates[i].first.get());
    if (it == low.ids.end()) continue;  // a leaf the step never reads
    const Node& leaf = low.g.node(it->second);
    if (leaf.op == Op::Param && leaf.data && leaf.data->buffer == ts.updates[i].first->value->buffer)
      write_back.push_back({low.outputs[outs.size() + i], it->second});
  }
  CompiledStep step;
  step.plan_ = cached_plan(low, write_back);
  for (const Tensor& a : args) {
    auto it = low.ids.find(a.impl());
    step.inputs_.push_back(it == low.ids.end() ? kNoValue : it->second);
  }
  step.outputs_.assign(low.outputs.begin(), low.outputs.begin() + long(outs.size()));
  for (size_t i = 0; i < ts.updates.size(); ++i)
    step.updates_.push_back({step.plan_->ptr(low.outputs[outs.size() + i]), ts.updates[i].first->value});
  for (const auto& [impl, id] : low.feeds) step.plan_->set_input(id, *impl->value);
  return step;
}

}  // namespace synoros
