#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <sstream>

#include "passes/views.hpp"
#include "kernels/kernel_api.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/jit/compiler.hpp"
#include "kernels/providers.hpp"
#include "passes/placement.hpp"
#include "passes/write_back.hpp"
#include "runtime/plan_impl.hpp"
#include "runtime/plan_lowering.hpp"
#include "synoros/config.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

namespace {
bool env_flag(const char* name) { return config::flag(name); }
}  // namespace

namespace {
size_t& plan_limit_slot() {
  static size_t limit = [] {
    if (auto v = config::integer("SYNOROS_MAX_PLAN_BYTES")) return size_t(*v);
    return default_memory_limit();
  }();
  return limit;
}
}  // namespace

size_t plan_memory_limit() { return plan_limit_slot(); }
void set_plan_memory_limit(size_t bytes) { plan_limit_slot() = bytes; }

Plan::Plan(const Graph& g, std::vector<ValueId> outputs, CompileOptions opts)
    : graph_(g), outputs_(std::move(outputs)), pool_(opts.pool), check_finite_(opts.check_finite),
      impl_(std::make_unique<Impl>()) {
  size_t n = graph_.size();
  impl_->compiled_for = kernels::kernel_config();
  impl_->keep_all = opts.keep_intermediates;
  impl_->auto_recompile = opts.recompile && !opts.check_finite;

  // Track, then Place. Checking for non-finite values names the op that produced one, so
  // nothing is fused then.
  passes::Placement p = passes::track(graph_, outputs_, opts.keep_intermediates);
  bool fuse = opts.fuse && !opts.check_finite && !env_flag("SYNOROS_NO_FUSION");
  passes::fuse_groups(graph_, p, fuse);
  if (fuse) {
    passes::fold_views_into_readers(graph_, p);
    passes::fuse_conv_data_chains(graph_, p);
    passes::fuse_reduction_prologues(graph_, p, kernels::reduce_takes_prologue);
  }

  // Lowering runs twice: first over placeholder pointers, to learn each launch's scratch so the
  // memory planner can place it; then for real.
  PlanLowering lowering{graph_, p, ptrs_};
  char* const placeholder = reinterpret_cast<char*>(uintptr_t(1) << 20);  // never dereferenced
  ptrs_.assign(n, placeholder);
  kernels::PlanStorage sizing;
  sizing.set_sizing(true);
  std::vector<std::vector<SelectionCertificate>> selections;
  std::vector<size_t> frame =
      lowering.lower_all(sizing, [&](size_t) { return placeholder; }, nullptr, nullptr, selections);

  passes::MemoryPlanInput mi = passes::memory_input(graph_, p, frame, opts.plan_memory && !env_flag("SYNOROS_NO_PLAN"));
  impl_->write_back = opts.write_back;
  impl_->written_into = passes::write_back_updates(graph_, opts.write_back, mi);
  impl_->memory = passes::plan_memory(mi);
  if (impl_->memory.arena_bytes > plan_memory_limit())
    throw Error("compile: the plan needs " + std::to_string(impl_->memory.arena_bytes >> 20) +
                " MiB of working memory, above the limit of " + std::to_string(plan_memory_limit() >> 20) +
                " MiB (SYNOROS_MAX_PLAN_BYTES)");
  impl_->arena = std::make_unique<Buffer>(impl_->memory.arena_bytes);
  bind_buffers(p);

  // Folded values run once, here, in a frame of their own; the rest become the launch list.
  std::vector<int> step_of(n, -1);
  for (size_t k = 0; k < mi.order.size(); ++k) step_of[size_t(mi.order[k])] = int(k);
  size_t fold_scratch = 0;
  for (size_t i = 0; i < n; ++i)
    if (p.folded[i]) fold_scratch = std::max(fold_scratch, frame[i]);
  Buffer fold_frame(fold_scratch);
  char* base = static_cast<char*>(impl_->arena->data());
  impl_->storage = std::make_unique<kernels::PlanStorage>();
  {  // each launch's place, also for a producer that runs inside its epilogue's launch
    std::vector<int> launch_step = step_of;
    for (size_t i = 0; i < n; ++i) {
      const int k = p.group_of[i];
      if (k >= 0 && step_of[i] >= 0 && p.producer[size_t(k)] != kNoValue) launch_step[size_t(p.producer[size_t(k)])] = step_of[i];
    }
    impl_->storage->set_launch_order(std::move(launch_step));
  }
  std::vector<LoweredLaunch> lowered;
  lowering.lower_all(*impl_->storage, [&](size_t i) {
    if (step_of[i] < 0) return static_cast<char*>(fold_frame.data());
    size_t off = impl_->memory.scratch_offset[size_t(step_of[i])];
    return off == SIZE_MAX ? nullptr : base + off;
  }, &lowered, &impl_->groups, selections);
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  // Launches run in the memory plan's order (tape order, but for updates written back early).
  std::stable_sort(lowered.begin(), lowered.end(),
                   [&](const LoweredLaunch& a, const LoweredLaunch& b) { return step_of[size_t(a.node)] < step_of[size_t(b.node)]; });
  for (LoweredLaunch& l : lowered) {
    if (p.folded[size_t(l.node)]) {
      l.launch.fn(l.launch.args, pool);
      continue;
    }
    launches_.push_back(l.launch);
    std::string kernel = l.kernel.empty() ? op_name(graph_.node(l.node).op) : l.kernel;
    impl_->info.push_back({std::move(l.ops), mi.reads[size_t(step_of[size_t(l.node)])], kernel,
                           std::move(selections[size_t(l.node)])});
  }
}

// Every needed value's buffer: parameters and constants their storage, aliases their root's,
// the rest their arena block; and which values stay readable after run().
void Plan::bind_buffers(const passes::Placement& p) {
  size_t n = graph_.size();
  ptrs_.assign(n, nullptr);
  char* base = static_cast<char*>(impl_->arena->data());
  impl_->readable.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!p.needed[i] || p.fused_away[i]) continue;
    bool stored = nd.op == Op::Param || nd.op == Op::Const;
    if (stored) ptrs_[i] = nd.data->buffer->data();
    else if (ValueId prm = impl_->written_into[i]; prm != kNoValue) ptrs_[i] = graph_.node(prm).data->buffer->data();
    else if (passes::is_alias(graph_, nd)) ptrs_[i] = ptrs_[size_t(nd.in[0])];
    else ptrs_[i] = base + impl_->memory.offset[i];
    if (nd.op == Op::Input) impl_->inputs.push_back(ValueId(i));
    const Node& root = graph_.node(p.alias_root[i]);
    impl_->readable[i] = stored || p.observable[size_t(p.alias_root[i])] || root.op == Op::Param || root.op == Op::Const;
  }
  impl_->fed.assign(n, false);
  impl_->unfed = impl_->inputs.size();
  impl_->written.clear();
  for (size_t i = 0; i < n; ++i)
    if (ptrs_[i] && impl_->written_into[i] != kNoValue)
      impl_->written.push_back(graph_.node(impl_->written_into[i]).data->buffer.get());
}

namespace {
// A run that wrote into parameters (written back) changes their version, as any other change
// made through the engine does, even when a launch throws part way.
struct MarkWritten {
  const std::vector<Buffer*>& written;
  ~MarkWritten() {
    for (Buffer* b : written) b->mark_modified();
  }
};
}  // namespace

Plan::~Plan() = default;

void Plan::run() {
  if (impl_->unfed) {
    std::string names;
    for (ValueId v : impl_->inputs)
      if (!impl_->fed[size_t(v)]) names += (names.empty() ? "'" : ", '") + graph_.node(v).name + "'";
    throw Error("run: no value was fed for input " + names);
  }
  MarkWritten mark{impl_->written};
  if (check_finite_) return run_checked();
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  if (impl_->auto_recompile && impl_->runs < 2 && ++impl_->runs == 2 && kernels::jit::enabled()) return run_and_recompile();
  for (const Launch& l : launches_) l.fn(l.args, pool);
}

void Plan::run_observed(const std::function<void(size_t)>& after) {
  bool plain = !impl_->unfed && !check_finite_ && !(impl_->auto_recompile && impl_->runs < 2);
  if (!plain || launches_.empty()) {
    run();
    if (!launches_.empty()) after(launches_.size() - 1);
    return;
  }
  ThreadPool& pool = pool_ ? *pool_ : default_pool();
  MarkWritten mark{impl_->written};
  for (size_t i = 0; i < launches_.size(); ++i) {
    launches_[i].fn(launches_[i].args, pool);
    after(i);
  }
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
  if (!impl_->readable[size_t(v)])
    throw Error("plan: value %" + std::to_string(v) + " is an intermediate whose memory is reused; "
                "compile with keep_intermediates to read it");
  const Node& nd = graph_.node(v);
  HostTensor h(nd.dtype, nd.shape);
  std::memcpy(h.buffer->data(), ptrs_[size_t(v)], h.bytes());
  return h;
}

const std::vector<std::pair<ValueId, ValueId>>& Plan::write_back() const { return impl_->write_back; }
ValueId Plan::written_into(ValueId output) const {
  return output < 0 || size_t(output) >= impl_->written_into.size() ? kNoValue : impl_->written_into[size_t(output)];
}
size_t Plan::arena_bytes() const { return impl_->memory.arena_bytes; }
size_t Plan::unplanned_bytes() const { return impl_->memory.naive_bytes; }
const std::vector<LaunchInfo>& Plan::launch_info() const { return impl_->info; }
const std::string& Plan::compiled_for() const { return impl_->compiled_for; }
size_t Plan::scratch_bytes() const { return impl_->storage->scratch_bytes(); }
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
    << impl_->storage->scratch_bytes() << " bytes, isa " << kernels::isa_name(kernels::active_isa())
    << (impl_->compiled_for.find(" fast") != std::string::npos
            ? ", fast mode (launches marked 'fast' round differently from the canonical order)"
            : ", canonical kernels")
    << "\n";
  for (size_t k = 0; k < launches_.size(); ++k) {
    const Launch& l = launches_[k];
    const Node& nd = graph_.node(l.node);
    o << "  %" << l.node << " " << op_name(nd.op) << " " << dtype_name(nd.dtype) << shape_str(nd.shape);
    const std::string& kernel = impl_->info[k].kernel;
    if (kernel != op_name(nd.op)) o << " [" << kernel << (kernels::is_fast_mode_kernel(kernel) ? ", fast" : "") << "]";
    o << "\n";
  }
  for (const auto& grp : impl_->groups) {
    o << "fusion group ->%" << grp.back() << ":";
    for (ValueId v : grp) o << " %" << v << " " << op_name(graph_.node(v).op);
    o << "\n";
  }
  o << passes::describe_memory(graph_, impl_->memory);
  return o.str();
}

}  // namespace synoros
