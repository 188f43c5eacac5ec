#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kernels/kernel_api.hpp"
#include "passes/memory_plan.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

struct Plan::Impl {
  kernels::PlanStorage storage;
  std::unique_ptr<Buffer> arena;
  passes::MemoryPlan memory;
  bool keep_all = false;
  std::vector<ValueId> inputs;
  std::vector<bool> fed;
  size_t unfed = 0;
};

Plan::Plan(const Graph& g, std::vector<ValueId> outputs, CompileOptions opts)
    : graph_(g), outputs_(std::move(outputs)), pool_(opts.pool), check_finite_(opts.check_finite),
      impl_(std::make_unique<Impl>()) {
  size_t n = graph_.size();
  std::vector<bool> needed(n, false);
  for (ValueId o : outputs_) {
    if (o < 0 || size_t(o) >= n) throw Error("compile: output id " + std::to_string(o) + " is not in the graph");
    needed[size_t(o)] = true;
  }
  for (size_t i = n; i-- > 0;)
    if (needed[i])
      for (ValueId x : graph_.node(ValueId(i)).in) needed[size_t(x)] = true;

  // Values computable from constants alone are folded: computed once here, never in run().
  std::vector<bool> folded(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (nd.op == Op::Const) folded[i] = true;
    else if (op_info(nd.op).kind != OpKind::Leaf) {
      bool all = true;
      for (ValueId x : nd.in) all = all && folded[size_t(x)];
      folded[i] = all && nd.op != Op::Dropout;
    }
  }

  // Track: the schedule (tape order) and which values own arena bytes; reshapes alias.
  std::vector<ValueId> order, alias_root(n, kNoValue);
  std::vector<bool> in_arena(n, false), observable(n, false);
  const char* no_plan = std::getenv("SYNOROS_NO_PLAN");
  impl_->keep_all = opts.keep_intermediates;
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i]) continue;
    bool leaf = op_info(nd.op).kind == OpKind::Leaf;
    alias_root[i] = nd.op == Op::Reshape ? alias_root[size_t(nd.in[0])] : ValueId(i);
    if (nd.op == Op::Param || nd.op == Op::Const || nd.op == Op::Reshape) continue;
    in_arena[i] = true;
    observable[i] = nd.op == Op::Input || folded[i] || opts.keep_intermediates;
    if (!leaf && !folded[i]) order.push_back(ValueId(i));
  }
  for (ValueId o : outputs_)
    if (alias_root[size_t(o)] != kNoValue) observable[size_t(alias_root[size_t(o)])] = true;
  // Place: arena offsets from the interval allocator over those lifetimes.
  passes::MemoryPlanInput mi{&graph_, in_arena, alias_root, order, observable,
                             opts.plan_memory && !(no_plan && std::string(no_plan) == "1")};
  impl_->memory = passes::plan_memory(mi);
  impl_->arena = std::make_unique<Buffer>(impl_->memory.arena_bytes);
  ptrs_.assign(n, nullptr);
  char* base = static_cast<char*>(impl_->arena->data());
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i]) continue;
    if (nd.op == Op::Param || nd.op == Op::Const) ptrs_[i] = nd.data->buffer->data();
    else if (nd.op == Op::Reshape) ptrs_[i] = ptrs_[size_t(nd.in[0])];
    else ptrs_[i] = base + impl_->memory.offset[i];
    if (nd.op == Op::Input) impl_->inputs.push_back(ValueId(i));
  }
  impl_->fed.assign(n, false);
  impl_->unfed = impl_->inputs.size();

  std::vector<Launch> fold_now;
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i] || op_info(nd.op).kind == OpKind::Leaf) continue;
    // Launches follow the tape order, which is the schedule the memory plan assumed.
    std::vector<void*> in;
    for (ValueId x : nd.in) in.push_back(ptrs_[size_t(x)]);
    kernels::LowerCtx ctx{graph_, ValueId(i), nd, in, ptrs_[i], impl_->storage};
    Launch l;
    try {
      l = kernels::lower(ctx);
    } catch (const Error& e) {
      throw Error(std::string("compile: ") + op_name(nd.op) + " at %" + std::to_string(i) + ": " + e.what());
    }
    if (!l.fn) continue;
    (folded[i] ? fold_now : launches_).push_back(l);
  }
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  for (const Launch& l : fold_now) l.fn(l.args, pool);
}

Plan::~Plan() = default;

void Plan::run() {
  if (impl_->unfed) {
    std::string names;
    for (ValueId v : impl_->inputs)
      if (!impl_->fed[size_t(v)]) names += (names.empty() ? "'" : ", '") + graph_.node(v).name + "'";
    throw Error("run: no value was fed for input " + names);
  }
  if (check_finite_) return run_checked();
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  for (const Launch& l : launches_) l.fn(l.args, pool);
}

void Plan::run_checked() {
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  for (const Launch& l : launches_) {
    l.fn(l.args, pool);
    const Node& nd = graph_.node(l.node);
    if (!is_float(nd.dtype)) continue;
    int64_t cnt = numel(nd.shape);
    for (int64_t i = 0; i < cnt; ++i) {
      double v = nd.dtype == DType::F32 ? double(static_cast<const float*>(ptrs_[size_t(l.node)])[i])
                                        : static_cast<const double*>(ptrs_[size_t(l.node)])[i];
      if (!std::isfinite(v)) {
        std::ostringstream o;
        o << "non-finite value (" << v << ") produced by " << op_name(nd.op) << " at %" << l.node
          << " with output " << dtype_name(nd.dtype) << shape_str(nd.shape) << " at element " << i;
        for (size_t k = 0; k < nd.in.size(); ++k)
          o << (k ? ", " : "; inputs ") << dtype_name(graph_.dtype(nd.in[k])) << shape_str(graph_.shape(nd.in[k]));
        throw Error(o.str());
      }
    }
  }
}

void Plan::set_input(ValueId v, const HostTensor& value) {
  if (v < 0 || size_t(v) >= graph_.size() || graph_.node(v).op != Op::Input)
    throw Error("set_input: value %" + std::to_string(v) + " is not an input of this plan");
  const Node& nd = graph_.node(v);
  if (value.dtype != nd.dtype || value.shape != nd.shape) {
    throw Error("set_input: input '" + nd.name + "' expects " + dtype_name(nd.dtype) +
                shape_str(nd.shape) + ", got " + dtype_name(value.dtype) + shape_str(value.shape));
  }
  if (!ptrs_[size_t(v)]) return;  // an input this plan's outputs do not need
  std::memcpy(ptrs_[size_t(v)], value.buffer->data(), value.bytes());
  if (!impl_->fed[size_t(v)]) {
    impl_->fed[size_t(v)] = true;
    --impl_->unfed;
  }
}

ValueId Plan::find_input(const std::string& name) const {
  for (ValueId v : impl_->inputs)
    if (graph_.node(v).name == name) return v;
  std::string known;
  for (ValueId v : impl_->inputs) known += (known.empty() ? "" : ", ") + graph_.node(v).name;
  throw Error("unknown input '" + name + "' (this plan's inputs: " + known + ")");
}

void Plan::set_input(const std::string& name, const HostTensor& value) { set_input(find_input(name), value); }

void* Plan::ptr(ValueId v) {
  if (v < 0 || size_t(v) >= ptrs_.size() || !ptrs_[size_t(v)])
    throw Error("plan: value %" + std::to_string(v) + " is not computed by this plan");
  if (graph_.node(v).op == Op::Input && !impl_->fed[size_t(v)]) {
    impl_->fed[size_t(v)] = true;  // the caller writes it through the pointer
    --impl_->unfed;
  }
  return ptrs_[size_t(v)];
}

HostTensor Plan::read(ValueId v) const {
  if (v < 0 || size_t(v) >= ptrs_.size() || !ptrs_[size_t(v)])
    throw Error("plan: value %" + std::to_string(v) + " is not computed by this plan");
  ValueId root = v;
  while (graph_.node(root).op == Op::Reshape) root = graph_.node(root).in[0];
  const auto& life = impl_->memory.life;
  if (impl_->memory.offset[size_t(root)] != SIZE_MAX && life[size_t(root)].end != passes::kForever)
    throw Error("plan: value %" + std::to_string(v) + " is an intermediate whose memory is reused; "
                "compile with keep_intermediates to read it");
  const Node& nd = graph_.node(v);
  HostTensor h(nd.dtype, nd.shape);
  std::memcpy(h.buffer->data(), ptrs_[size_t(v)], h.bytes());
  return h;
}

size_t Plan::arena_bytes() const { return impl_->memory.arena_bytes; }
size_t Plan::unplanned_bytes() const { return impl_->memory.naive_bytes; }
bool Plan::keeps_intermediates() const { return impl_->keep_all; }

std::vector<BufferInfo> Plan::buffers() const {
  std::vector<BufferInfo> out;
  const passes::MemoryPlan& m = impl_->memory;
  for (size_t v = 0; v < m.offset.size(); ++v) {
    if (m.offset[v] == SIZE_MAX) continue;
    const Node& nd = graph_.node(ValueId(v));
    out.push_back({ValueId(v), m.offset[v], size_t(numel(nd.shape)) * dtype_size(nd.dtype),
                   m.life[v].start, m.life[v].end, m.inplace_of[v]});
  }
  return out;
}

std::string Plan::describe() const {
  std::ostringstream o;
  o << "plan: " << launches_.size() << " launches, arena " << arena_bytes() << " bytes, scratch "
    << impl_->storage.scratch_bytes() << " bytes, isa " << kernels::isa_name(kernels::active_isa()) << "\n";
  for (const Launch& l : launches_) {
    const Node& nd = graph_.node(l.node);
    o << "  %" << l.node << " " << op_name(nd.op) << " " << dtype_name(nd.dtype) << shape_str(nd.shape);
    o << "\n";
  }
  o << passes::describe_memory(graph_, impl_->memory);
  return o.str();
}

}  // namespace synoros
