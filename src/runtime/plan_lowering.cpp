#include "runtime/plan_lowering.hpp"

#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/providers.hpp"
#include "passes/views.hpp"

namespace synoros {

namespace {
// The parameter buffer behind x (through aliases), for kernels that cache packed weights.
const Buffer* param_buffer(const Graph& g, ValueId x) {
  while (op_info(g.node(x).op).has(kAlias)) x = g.node(x).in[0];
  return g.node(x).op == Op::Param ? g.node(x).data->buffer.get() : nullptr;
}
}  // namespace

kernels::LowerCtx PlanLowering::context(ValueId v, void* out, kernels::PlanStorage& storage) const {
  const Node& vn = g.node(v);
  kernels::LowerCtx ctx{g, v, vn, {}, out, storage};
  if (p.prologue_of[size_t(v)] >= 0) {
    const passes::FusionGroup& pg = p.groups[size_t(p.prologue_of[size_t(v)])];
    ctx.pro_members = pg.members;
    ctx.pro_externals = pg.externals;
    for (ValueId x : pg.externals) ctx.pro_ptrs.push_back(ptrs[size_t(x)]);
  }
  if (!p.chain_of[size_t(v)].empty()) {
    ctx.chain = p.chain_of[size_t(v)];
    for (ValueId x : g.node(ctx.chain[0]).in) {
      ctx.chain_in.push_back(ptrs[size_t(x)]);
      ctx.chain_param.push_back(param_buffer(g, x));
    }
  }
  const auto& views = p.operand_views[size_t(v)];
  for (size_t k = 0; k < vn.in.size(); ++k) {
    if (views.empty()) {
      ctx.in.push_back(ptrs[size_t(vn.in[k])]);
      ctx.in_param.push_back(param_buffer(g, vn.in[k]));
      continue;
    }
    const passes::AffineView& av = views[k];
    ctx.in_param.push_back(param_buffer(g, av.base));
    ctx.in.push_back(static_cast<char*>(ptrs[size_t(av.base)]) + av.offset * int64_t(dtype_size(g.dtype(av.base))));
    ctx.in_strides.push_back(av.strides);
    ctx.in_gates.push_back(av.gates);
    ctx.in_base_shapes.push_back(g.shape(av.base));
    ctx.in_offsets.push_back(av.offset);
  }
  return ctx;
}

std::vector<size_t> PlanLowering::lower_all(kernels::PlanStorage& storage,
                                            const std::function<char*(size_t)>& frame_base,
                                            std::vector<LoweredLaunch>* out,
                                            std::vector<std::vector<ValueId>>* groups,
                                            std::vector<std::vector<SelectionCertificate>>& selections) const {
  size_t n = g.size();
  std::vector<size_t> frame(n, 0);
  selections.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.node(ValueId(i));
    if (!p.needed[i] || p.fused_away[i] || op_info(nd.op).kind == OpKind::Leaf || passes::is_alias(g, nd)) continue;
    storage.begin_frame(frame_base(i));
    const size_t sites = storage.jit_sites().size();
    std::vector<SelectionCertificate> made;
    kernels::SelectionTrace trace(&made);
    Launch l;
    std::vector<ValueId> ops = {ValueId(i)};
    std::string kernel;
    try {
      if (p.group_of[i] >= 0) {
        const passes::FusionGroup& grp = p.groups[size_t(p.group_of[i])];
        ValueId e = p.producer[size_t(p.group_of[i])];
        std::vector<void*> ext;
        for (ValueId x : grp.externals) ext.push_back(x == e ? ptrs[i] : ptrs[size_t(x)]);
        l = kernels::lower_group(g, grp.members, grp.externals, ext, ptrs[i], storage);
        std::vector<ValueId> shown = grp.members;
        if (e != kNoValue) {
          // Epilogue: the producer writes this launch's output, the group then runs over it.
          kernels::LowerCtx pctx = context(e, ptrs[i], storage);
          Launch pl = kernels::lower(pctx);
          // A producer that writes its output chunk by chunk hands each chunk to the group
          // while it is in cache (epilogue_producers only picks producers the group reads at
          // its own indices).
          bool streamed = pctx.chunks.run != nullptr;
          l = streamed ? kernels::stream_epilogue(storage, pctx.chunks, l, ValueId(i))
                       : kernels::sequence(storage, pl, l, ValueId(i));
          kernel = pctx.kernel + (streamed ? " streamed" : "");
          shown.insert(shown.begin(), e);
          shown.insert(shown.begin(), p.chain_of[size_t(e)].begin(), p.chain_of[size_t(e)].end());
          if (p.prologue_of[size_t(e)] >= 0) {
            const auto& pm = p.groups[size_t(p.prologue_of[size_t(e)])].members;
            shown.insert(shown.begin(), pm.begin(), pm.end());
          }
        }
        if (groups && shown.size() > 1) groups->push_back(shown);
        ops = shown;
      } else {
        kernels::LowerCtx ctx = context(ValueId(i), ptrs[i], storage);
        l = kernels::lower(ctx);
        kernel = ctx.kernel;
        ops.insert(ops.begin(), p.chain_of[i].begin(), p.chain_of[i].end());
        if (p.prologue_of[i] >= 0) {
          const auto& pm = p.groups[size_t(p.prologue_of[i])].members;
          ops.insert(ops.begin(), pm.begin(), pm.end());
          if (groups) groups->push_back(ops);
        }
      }
    } catch (const Error& err) {
      throw Error(std::string("compile: ") + op_name(nd.op) + " at %" + std::to_string(i) + ": " + err.what());
    }
    frame[i] = storage.frame_bytes();
    storage.place_jit_sites(sites, ValueId(i));  // producers' and prologues' sites run in launch i
    for (SelectionCertificate& c : made) {
      auto same = std::find_if(selections[i].begin(), selections[i].end(),
                               [&](const SelectionCertificate& s) { return s.key == c.key; });
      if (same == selections[i].end()) selections[i].push_back(std::move(c));
      else if (same->source == "tuning cache" && c.source != "tuning cache") *same = std::move(c);
    }
    if (l.fn && out) out->push_back({ValueId(i), l, std::move(ops), std::move(kernel)});
  }
  return frame;
}

}  // namespace synoros
