#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <sstream>

#include "kernels/kernel_api.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/onednn_conv.hpp"
#include "kernels/providers.hpp"
#include "passes/fusion.hpp"
#include "passes/memory_plan.hpp"
#include "passes/views.hpp"
#include "synoros/config.hpp"
#include "synoros/runtime.hpp"

namespace synoros {

struct Plan::Impl {
  std::unique_ptr<kernels::PlanStorage> storage;
  std::unique_ptr<Buffer> arena;
  passes::MemoryPlan memory;
  std::vector<std::vector<ValueId>> groups;  // fused groups of more than one op
  std::vector<LaunchInfo> info;              // per launch
  std::string compiled_for;
  std::vector<bool> readable;                // holds its value after run()
  bool keep_all = false;
  std::vector<ValueId> inputs;
  std::vector<bool> fed;
  size_t unfed = 0;
};

namespace {
bool env_flag(const char* name) { return config::flag(name); }
}  // namespace

// Marks affine view chains whose every reader is an einsum (directly or through further such
// views) as folded, and records for each einsum operand its base and (offset, strides).
void fold_views_into_einsums(const Graph& g, const std::vector<bool>& needed,
                             const std::vector<bool>& launched, const std::vector<bool>& observable,
                             std::vector<bool>& fused_away,
                             std::vector<std::vector<passes::AffineView>>& views) {
  size_t n = g.size();
  std::vector<std::vector<ValueId>> readers(n);
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;  // fused readers still read their inputs
    std::vector<ValueId> in = g.node(ValueId(i)).in;
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    for (ValueId x : in) readers[size_t(x)].push_back(ValueId(i));
  }
  std::vector<bool> blocked(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> only(n, false);  // every reader is an einsum or a folded view
    for (size_t i = n; i-- > 0;) {
      const Node& nd = g.node(ValueId(i));
      bool view_op = passes::is_affine_view_op(nd.op) || passes::is_gated_view_op(nd.op);
      bool candidate = needed[i] && !observable[i] && !blocked[i] && view_op &&
                       (op_info(nd.op).has(kAlias) || (launched[i] && !fused_away[i]));
      if (!candidate || readers[i].empty()) continue;
      bool ok = true;
      for (ValueId r : readers[i]) ok = ok && (g.node(r).op == Op::Einsum || only[size_t(r)]);
      // A padded view is gathered by each einsum that reads it (a convolution's input by the
      // forward and the weight-gradient contraction); an einsum reading it as both operands
      // would gather it twice, so that one keeps it materialised.
      if (passes::is_gated_view_op(nd.op) && ok) {
        std::map<ValueId, int> hits;  // einsum -> operand paths reaching this view
        std::function<void(size_t)> walk = [&](size_t v) {
          for (ValueId r : readers[v]) {
            const Node& rn = g.node(r);
            if (rn.op == Op::Einsum) hits[r] += int(std::count(rn.in.begin(), rn.in.end(), ValueId(v)));
            else walk(size_t(r));
          }
        };
        walk(i);
        for (const auto& [r, k] : hits) ok = ok && k == 1;
      }
      only[i] = ok;
    }
    for (size_t i = 0; i < n && !changed; ++i) {
      if (!needed[i] || g.node(ValueId(i)).op != Op::Einsum || !launched[i]) continue;
      views[i].clear();
      for (ValueId x : g.node(ValueId(i)).in) {
        std::vector<ValueId> chain;
        ValueId cur = x;
        while (only[size_t(cur)]) chain.push_back(cur), cur = g.node(cur).in[0];
        passes::AffineView av{cur, 0, g.shape(cur), contiguous_strides(g.shape(cur)), {}};
        for (size_t j = chain.size(); j-- > 0 && !changed;) {
          if (!passes::apply_view(g.node(chain[j]), av, /*allow_gates=*/true)) {
            for (ValueId c : chain) blocked[size_t(c)] = true;  // materialise this chain
            changed = true;
          }
        }
        views[i].push_back(av);
      }
    }
    if (changed) continue;
    for (size_t i = 0; i < n; ++i)
      if (only[i] && !op_info(g.node(ValueId(i)).op).has(kAlias)) fused_away[i] = true;
  }
  // Einsums reading nothing folded keep plain operands.
  for (size_t i = 0; i < n; ++i) {
    bool any = false;
    for (size_t k = 0; k < views[i].size(); ++k) any = any || views[i][k].base != g.node(ValueId(i)).in[k];
    if (!any) views[i].clear();
  }
}

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

  // Track: which values are launched and which stay observable; reshapes alias their input.
  std::vector<ValueId> alias_root(n, kNoValue);
  std::vector<bool> launched(n, false), observable(n, false);
  impl_->keep_all = opts.keep_intermediates;
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i]) continue;
    alias_root[i] = op_info(nd.op).has(kAlias) ? alias_root[size_t(nd.in[0])] : ValueId(i);
    launched[i] = op_info(nd.op).kind != OpKind::Leaf && !folded[i] && !op_info(nd.op).has(kAlias);
    observable[i] = nd.op == Op::Input || folded[i] || opts.keep_intermediates;
  }
  for (ValueId o : outputs_) observable[size_t(alias_root[size_t(o)])] = true;

  // Place: fusion groups, then one launch per group or non-fusable node, in tape order.
  // Checking for non-finite values names the op that produced one, so nothing is fused then.
  bool fuse = opts.fuse && !opts.check_finite && !env_flag("SYNOROS_NO_FUSION");
  std::vector<passes::FusionGroup> groups = passes::fuse_elementwise(graph_, launched, observable, fuse);
  std::vector<ValueId> producer = passes::epilogue_producers(graph_, groups, launched, observable, fuse);
  std::vector<int> group_of(n, -1);
  std::vector<bool> fused_away(n, false);
  for (size_t k = 0; k < groups.size(); ++k) {
    group_of[size_t(groups[k].members.back())] = int(k);
    for (size_t j = 0; j + 1 < groups[k].members.size(); ++j) fused_away[size_t(groups[k].members[j])] = true;
    if (producer[k] != kNoValue) fused_away[size_t(producer[k])] = true;
  }
  // Views folded into contractions: affine view chains that only einsums read are never
  // materialised; the einsum reads their base buffer through (offset, strides).
  std::vector<std::vector<passes::AffineView>> operand_views(n);
  if (fuse) fold_views_into_einsums(graph_, needed, launched, observable, fused_away, operand_views);
  // Convolution data gradients fold(fold(einsum(dY, W))) whose einsum and first fold nobody
  // else reads run as one launch of the last fold (kernels::lower_conv_data_grad).
  std::vector<bool> is_producer(n, false);  // runs inside its group's launch
  for (ValueId e : producer)
    if (e != kNoValue) is_producer[size_t(e)] = true;
  std::vector<std::vector<ValueId>> chain_of(n);
  std::vector<int> readers(n, 0);
  std::vector<ValueId> a_reader(n, kNoValue);
  for (size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    std::vector<ValueId> in = graph_.node(ValueId(i)).in;
    std::sort(in.begin(), in.end());
    in.erase(std::unique(in.begin(), in.end()), in.end());
    for (ValueId x : in) ++readers[size_t(x)], a_reader[size_t(x)] = ValueId(i);
  }
  if (fuse) {
    auto inner = [&](ValueId v) {
      return launched[size_t(v)] && !fused_away[size_t(v)] && !observable[size_t(v)] && readers[size_t(v)] == 1;
    };
    for (size_t i = 0; i < n; ++i) {
      if (!needed[i] || !launched[i] || (fused_away[i] && !is_producer[i]) || graph_.node(ValueId(i)).op != Op::Fold)
        continue;
      std::optional<kernels::ConvDataChain> m = kernels::match_conv_data_grad(graph_, ValueId(i));
      if (!m || !inner(m->e) || !inner(m->f1) || !operand_views[size_t(m->e)].empty()) continue;
      chain_of[i] = {m->e, m->f1};
      fused_away[size_t(m->e)] = fused_away[size_t(m->f1)] = true;
    }
  }
  // Reductions with a fused prologue: a group whose output only a sum or mean reads, and that
  // nobody else observes, runs block by block inside the reduction's launch instead of being
  // written out and read back (kernels::reduce_takes_prologue).
  std::vector<int> prologue_of(n, -1);
  for (size_t k = 0; fuse && k < groups.size(); ++k) {
    ValueId x = groups[k].members.back(), r = a_reader[size_t(x)];
    if (producer[k] != kNoValue || observable[size_t(x)] || readers[size_t(x)] != 1 || r == kNoValue) continue;
    if (!launched[size_t(r)] || graph_.node(r).in[0] != x || !kernels::reduce_takes_prologue(graph_, r)) continue;
    if (fused_away[size_t(r)] && !is_producer[size_t(r)]) continue;
    prologue_of[size_t(r)] = int(k);
    fused_away[size_t(x)] = true;
    group_of[size_t(x)] = -1;
  }
  // What a launch of node v reads: an einsum reads its operands' bases.
  auto node_reads = [&](ValueId v) {
    if (!chain_of[size_t(v)].empty()) return graph_.node(chain_of[size_t(v)][0]).in;
    if (prologue_of[size_t(v)] >= 0) return groups[size_t(prologue_of[size_t(v)])].externals;
    if (operand_views[size_t(v)].empty()) return graph_.node(v).in;
    std::vector<ValueId> r;
    for (const auto& av : operand_views[size_t(v)]) r.push_back(av.base);
    return r;
  };
  // Lowering context for node v writing to out, with folded operands resolved.
  auto make_ctx = [&](ValueId v, void* out, kernels::PlanStorage& storage) {
    const Node& vn = graph_.node(v);
    kernels::LowerCtx ctx{graph_, v, vn, {}, out, storage};
    auto param_buffer = [&](ValueId x) -> const Buffer* {
      while (op_info(graph_.node(x).op).has(kAlias)) x = graph_.node(x).in[0];
      return graph_.node(x).op == Op::Param ? graph_.node(x).data->buffer.get() : nullptr;
    };
    if (prologue_of[size_t(v)] >= 0) {
      const passes::FusionGroup& pg = groups[size_t(prologue_of[size_t(v)])];
      ctx.pro_members = pg.members;
      ctx.pro_externals = pg.externals;
      for (ValueId x : pg.externals) ctx.pro_ptrs.push_back(ptrs_[size_t(x)]);
    }
    if (!chain_of[size_t(v)].empty()) {
      ctx.chain = chain_of[size_t(v)];
      for (ValueId x : graph_.node(ctx.chain[0]).in) {
        ctx.chain_in.push_back(ptrs_[size_t(x)]);
        ctx.chain_param.push_back(param_buffer(x));
      }
    }
    for (size_t k = 0; k < vn.in.size(); ++k) {
      if (operand_views[size_t(v)].empty()) {
        ctx.in.push_back(ptrs_[size_t(vn.in[k])]);
        ctx.in_param.push_back(param_buffer(vn.in[k]));
        continue;
      }
      const passes::AffineView& av = operand_views[size_t(v)][k];
      ctx.in_param.push_back(param_buffer(av.base));
      ctx.in.push_back(static_cast<char*>(ptrs_[size_t(av.base)]) + av.offset * int64_t(dtype_size(vn.dtype)));
      ctx.in_strides.push_back(av.strides);
      ctx.in_gates.push_back(av.gates);
      ctx.in_base_shapes.push_back(graph_.shape(av.base));
      ctx.in_offsets.push_back(av.offset);
    }
    return ctx;
  };

  // Lowering runs twice: first with placeholder pointers, to learn each launch's scratch so the
  // memory planner can place it; then for real. Folded values run once at the end; the rest
  // become the launch list.
  std::vector<Launch> fold_now;
  std::vector<size_t> frame(n, 0);
  passes::MemoryPlanInput mi;
  std::vector<int> step_of(n, -1);
  auto lower_all = [&](kernels::PlanStorage& storage, bool keep, auto frame_base) {
    for (size_t i = 0; i < n; ++i) {
      const Node& nd = graph_.node(ValueId(i));
      if (!needed[i] || fused_away[i] || op_info(nd.op).kind == OpKind::Leaf) continue;
      storage.begin_frame(frame_base(i));
      Launch l;
      std::vector<ValueId> ops = {ValueId(i)};
      std::string kernel;
      try {
        if (group_of[i] >= 0) {
          const passes::FusionGroup& grp = groups[size_t(group_of[i])];
          ValueId e = producer[size_t(group_of[i])];
          std::vector<void*> ext;
          for (ValueId x : grp.externals) ext.push_back(x == e ? ptrs_[i] : ptrs_[size_t(x)]);
          l = kernels::lower_group(graph_, grp.members, grp.externals, ext, ptrs_[i], storage);
          std::vector<ValueId> shown = grp.members;
          if (e != kNoValue) {
            // Epilogue: the producer writes this launch's output, the group then runs over it.
            kernels::LowerCtx pctx = make_ctx(e, ptrs_[i], storage);
            Launch pl = kernels::lower(pctx);
            // A producer that writes its output chunk by chunk hands each chunk to the group
            // while it is in cache (epilogue_producers only picks producers the group reads at
            // its own indices).
            bool streamed = pctx.chunks.run != nullptr;
            l = streamed ? kernels::stream_epilogue(storage, pctx.chunks, l, ValueId(i))
                         : kernels::sequence(storage, pl, l, ValueId(i));
            kernel = pctx.kernel + (streamed ? " streamed" : "");
            shown.insert(shown.begin(), e);
            shown.insert(shown.begin(), chain_of[size_t(e)].begin(), chain_of[size_t(e)].end());
            if (prologue_of[size_t(e)] >= 0) {
              const auto& pm = groups[size_t(prologue_of[size_t(e)])].members;
              shown.insert(shown.begin(), pm.begin(), pm.end());
            }
          }
          if (keep && shown.size() > 1) impl_->groups.push_back(shown);
          ops = shown;
        } else {
          kernels::LowerCtx ctx = make_ctx(ValueId(i), ptrs_[i], storage);
          l = kernels::lower(ctx);
          kernel = ctx.kernel;
          ops.insert(ops.begin(), chain_of[i].begin(), chain_of[i].end());
          if (prologue_of[i] >= 0) {
            const auto& pm = groups[size_t(prologue_of[i])].members;
            ops.insert(ops.begin(), pm.begin(), pm.end());
            if (keep) impl_->groups.push_back(ops);
          }
        }
      } catch (const Error& err) {
        throw Error(std::string("compile: ") + op_name(nd.op) + " at %" + std::to_string(i) + ": " + err.what());
      }
      frame[i] = storage.frame_bytes();
      if (!l.fn || !keep) continue;
      if (folded[i]) {
        fold_now.push_back(l);
        continue;
      }
      launches_.push_back(l);
      impl_->info.push_back({ops, mi.reads[size_t(step_of[i])], kernel.empty() ? op_name(nd.op) : kernel});
    }
  };
  char* const placeholder = reinterpret_cast<char*>(uintptr_t(1) << 20);  // never dereferenced
  {
    ptrs_.assign(n, placeholder);
    kernels::PlanStorage sizing;
    sizing.set_sizing(true);
    lower_all(sizing, false, [&](size_t) { return placeholder; });
  }

  mi.g = &graph_;
  mi.alias_root = alias_root;
  mi.observable = observable;
  mi.plan = opts.plan_memory && !env_flag("SYNOROS_NO_PLAN");
  mi.in_arena.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    mi.in_arena[i] = needed[i] && !fused_away[i] && nd.op != Op::Param && nd.op != Op::Const &&
                     !op_info(nd.op).has(kAlias);
    if (!launched[i] || fused_away[i]) continue;
    mi.order.push_back(ValueId(i));
    mi.scratch.push_back(frame[i]);
    std::vector<ValueId> reads, inplace;
    if (group_of[i] >= 0 && producer[size_t(group_of[i])] != kNoValue) {
      // The producer writes into this launch's output first, so nothing may be overwritten.
      ValueId e = producer[size_t(group_of[i])];
      reads = node_reads(e);
      for (ValueId x : groups[size_t(group_of[i])].externals)
        if (x != e) reads.push_back(x);
    } else if (group_of[i] >= 0) {
      const passes::FusionGroup& grp = groups[size_t(group_of[i])];
      reads = grp.externals;
      for (ValueId x : reads)
        if (graph_.shape(x) == nd.shape && dtype_size(graph_.dtype(x)) == dtype_size(nd.dtype) &&
            std::find(grp.gathered.begin(), grp.gathered.end(), x) == grp.gathered.end())
          inplace.push_back(x);
    } else {
      reads = node_reads(ValueId(i));
      for (size_t k = 0; k < nd.in.size() && chain_of[i].empty() && prologue_of[i] < 0; ++k)
        if (passes::can_run_in_place(graph_, nd, k)) inplace.push_back(nd.in[k]);
    }
    mi.reads.push_back(reads);
    mi.inplace.push_back(inplace);
  }
  impl_->memory = passes::plan_memory(mi);
  if (impl_->memory.arena_bytes > plan_memory_limit())
    throw Error("compile: the plan needs " + std::to_string(impl_->memory.arena_bytes >> 20) +
                " MiB of working memory, above the limit of " + std::to_string(plan_memory_limit() >> 20) +
                " MiB (SYNOROS_MAX_PLAN_BYTES)");
  impl_->arena = std::make_unique<Buffer>(impl_->memory.arena_bytes);
  ptrs_.assign(n, nullptr);
  char* base = static_cast<char*>(impl_->arena->data());
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i] || fused_away[i]) continue;
    if (nd.op == Op::Param || nd.op == Op::Const) ptrs_[i] = nd.data->buffer->data();
    else if (op_info(nd.op).has(kAlias)) ptrs_[i] = ptrs_[size_t(nd.in[0])];
    else ptrs_[i] = base + impl_->memory.offset[i];
    if (nd.op == Op::Input) impl_->inputs.push_back(ValueId(i));
  }
  impl_->readable.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = graph_.node(ValueId(i));
    if (!needed[i] || fused_away[i]) continue;
    ValueId r = alias_root[i];
    impl_->readable[i] = nd.op == Op::Param || nd.op == Op::Const || observable[size_t(r)] ||
                         graph_.node(r).op == Op::Param || graph_.node(r).op == Op::Const;
  }
  impl_->fed.assign(n, false);
  impl_->unfed = impl_->inputs.size();

  for (size_t k = 0; k < mi.order.size(); ++k) step_of[size_t(mi.order[k])] = int(k);
  size_t fold_scratch = 0;
  for (size_t i = 0; i < n; ++i)
    if (folded[i]) fold_scratch = std::max(fold_scratch, frame[i]);
  Buffer fold_frame(fold_scratch);  // folded launches run once, below, then it is gone
  impl_->storage = std::make_unique<kernels::PlanStorage>();
  lower_all(*impl_->storage, true, [&](size_t i) {
    if (step_of[i] < 0) return static_cast<char*>(fold_frame.data());
    size_t off = impl_->memory.scratch_offset[size_t(step_of[i])];
    return off == SIZE_MAX ? nullptr : base + off;
  });
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
  if (!impl_->readable[size_t(v)])
    throw Error("plan: value %" + std::to_string(v) + " is an intermediate whose memory is reused; "
                "compile with keep_intermediates to read it");
  const Node& nd = graph_.node(v);
  HostTensor h(nd.dtype, nd.shape);
  std::memcpy(h.buffer->data(), ptrs_[size_t(v)], h.bytes());
  return h;
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
