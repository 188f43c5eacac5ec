#include "passes/placement.hpp"

#include <algorithm>
#include <functional>
#include <map>

#include "passes/conv_match.hpp"
#include "passes/views.hpp"

namespace synoros::passes {

namespace {
// Distinct values read by node i.
std::vector<ValueId> distinct_inputs(const Graph& g, size_t i) {
  std::vector<ValueId> in = g.node(ValueId(i)).in;
  std::sort(in.begin(), in.end());
  in.erase(std::unique(in.begin(), in.end()), in.end());
  return in;
}
}  // namespace

Placement track(const Graph& g, const std::vector<ValueId>& outputs, bool keep_intermediates) {
  size_t n = g.size();
  Placement p;
  p.needed.assign(n, false);
  for (ValueId o : outputs) {
    if (o < 0 || size_t(o) >= n) throw Error("compile: output id " + std::to_string(o) + " is not in the graph");
    p.needed[size_t(o)] = true;
  }
  for (size_t i = n; i-- > 0;)
    if (p.needed[i])
      for (ValueId x : g.node(ValueId(i)).in) p.needed[size_t(x)] = true;

  // Values computable from constants alone are folded: computed once at compile time.
  p.folded.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.node(ValueId(i));
    if (nd.op == Op::Const) p.folded[i] = true;
    else if (op_info(nd.op).kind != OpKind::Leaf) {
      bool all = true;
      for (ValueId x : nd.in) all = all && p.folded[size_t(x)];
      p.folded[i] = all && nd.op != Op::Dropout;
    }
  }

  // Which values are launched and which stay observable; reshapes alias their input.
  p.alias_root.assign(n, kNoValue);
  p.launched.assign(n, false);
  p.observable.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.node(ValueId(i));
    if (!p.needed[i]) continue;
    bool alias = passes::is_alias(g, nd);
    p.alias_root[i] = alias ? p.alias_root[size_t(nd.in[0])] : ValueId(i);
    p.launched[i] = op_info(nd.op).kind != OpKind::Leaf && !p.folded[i] && !alias;
    p.observable[i] = nd.op == Op::Input || p.folded[i] || keep_intermediates;
  }
  for (ValueId o : outputs) p.observable[size_t(p.alias_root[size_t(o)])] = true;

  p.readers.assign(n, 0);
  p.a_reader.assign(n, kNoValue);
  for (size_t i = 0; i < n; ++i) {
    if (!p.needed[i]) continue;
    for (ValueId x : distinct_inputs(g, i)) ++p.readers[size_t(x)], p.a_reader[size_t(x)] = ValueId(i);
  }
  p.group_of.assign(n, -1);
  p.is_producer.assign(n, false);
  p.fused_away.assign(n, false);
  p.operand_views.assign(n, {});
  p.chain_of.assign(n, {});
  p.prologue_of.assign(n, -1);
  return p;
}

void fuse_groups(const Graph& g, Placement& p, bool enabled) {
  p.groups = fuse_elementwise(g, p.launched, p.observable, enabled);
  p.producer = epilogue_producers(g, p.groups, p.launched, p.observable, enabled);
  for (size_t k = 0; k < p.groups.size(); ++k) {
    const std::vector<ValueId>& m = p.groups[k].members;
    p.group_of[size_t(m.back())] = int(k);
    for (size_t j = 0; j + 1 < m.size(); ++j) p.fused_away[size_t(m[j])] = true;
    if (p.producer[k] != kNoValue) p.fused_away[size_t(p.producer[k])] = p.is_producer[size_t(p.producer[k])] = true;
  }
}

void fold_views_into_readers(const Graph& g, Placement& p) {
  const std::vector<bool>&needed = p.needed, &launched = p.launched, &observable = p.observable;
  std::vector<bool>& fused_away = p.fused_away;
  std::vector<std::vector<AffineView>>& views = p.operand_views;
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
  auto rows_reader = [&](ValueId r) { return g.node(r).op == Op::Attention || g.node(r).op == Op::AttentionGrad; };
  auto view_reader = [&](ValueId r) { return g.node(r).op == Op::Einsum || rows_reader(r); };
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<bool> only(n, false);  // every reader is an einsum, an attention or a folded view
    for (size_t i = n; i-- > 0;) {
      const Node& nd = g.node(ValueId(i));
      bool view_op = is_affine_view_op(nd.op) || is_gated_view_op(nd.op);
      bool candidate = needed[i] && !observable[i] && !blocked[i] && view_op &&
                       (passes::is_alias(g, nd) || (launched[i] && !fused_away[i]));
      if (!candidate || readers[i].empty()) continue;
      bool ok = true;
      for (ValueId r : readers[i]) ok = ok && (view_reader(r) || only[size_t(r)]);
      // A padded view is gathered by each einsum that reads it (a convolution's input by the
      // forward and the weight-gradient contraction); an einsum reading it as both operands
      // would gather it twice, so that one keeps it materialised.
      if (is_gated_view_op(nd.op) && ok) {
        std::map<ValueId, int> hits;  // reader -> operand paths reaching this view
        std::function<void(size_t)> walk = [&](size_t v) {
          for (ValueId r : readers[v]) {
            const Node& rn = g.node(r);
            if (view_reader(r)) hits[r] += int(std::count(rn.in.begin(), rn.in.end(), ValueId(v)));
            else walk(size_t(r));
          }
        };
        walk(i);
        for (const auto& [r, k] : hits) ok = ok && k == 1;
      }
      only[i] = ok;
    }
    for (size_t i = 0; i < n && !changed; ++i) {
      if (!needed[i] || !view_reader(ValueId(i)) || !launched[i]) continue;
      views[i].clear();
      const Node& rn = g.node(ValueId(i));
      const size_t rows_operands = rn.op == Op::Attention ? 3 : 5;  // q, k, v [, o, g]; an offset may follow
      for (size_t k = 0; k < rn.in.size(); ++k) {
        const ValueId x = rn.in[k];
        std::vector<ValueId> chain;
        ValueId cur = x;
        while (only[size_t(cur)]) chain.push_back(cur), cur = g.node(cur).in[0];
        AffineView av{cur, 0, g.shape(cur), contiguous_strides(g.shape(cur)), {}};
        for (size_t j = chain.size(); j-- > 0 && !changed;) {
          if (!apply_view(g.node(chain[j]), av, /*allow_gates=*/true)) {
            for (ValueId c : chain) blocked[size_t(c)] = true;  // materialise this chain
            changed = true;
          }
        }
        if (!changed && !chain.empty() && rows_reader(ValueId(i)) &&
            (k >= rows_operands || !av.gates.empty() || !rows_view(av.shape, av.strides))) {
          for (ValueId c : chain) blocked[size_t(c)] = true;  // what an attention cannot read in place
          changed = true;
        }
        views[i].push_back(av);
      }
    }
    if (changed) continue;
    for (size_t i = 0; i < n; ++i)
      if (only[i] && !passes::is_alias(g, g.node(ValueId(i)))) fused_away[i] = true;
  }
  // Readers with nothing folded keep plain operands.
  for (size_t i = 0; i < n; ++i) {
    bool any = false;
    for (size_t k = 0; k < views[i].size(); ++k) any = any || views[i][k].base != g.node(ValueId(i)).in[k];
    if (!any) views[i].clear();
  }
}

void fuse_conv_data_chains(const Graph& g, Placement& p) {
  auto inner = [&](ValueId v) {
    size_t i = size_t(v);
    return p.launched[i] && !p.fused_away[i] && !p.observable[i] && p.readers[i] == 1;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    if (!p.needed[i] || !p.launched[i] || (p.fused_away[i] && !p.is_producer[i]) || g.node(ValueId(i)).op != Op::Fold)
      continue;
    std::optional<ConvDataChain> m = match_conv_data_grad(g, ValueId(i));
    if (!m) continue;
    ValueId e = m->e, f1 = m->f1;
    if (!inner(e) || !inner(f1) || !p.operand_views[size_t(e)].empty()) continue;
    p.chain_of[i] = {e, f1};
    p.fused_away[size_t(e)] = p.fused_away[size_t(f1)] = true;
  }
}

void fuse_reduction_prologues(const Graph& g, Placement& p, bool (*takes_prologue)(const Graph&, ValueId)) {
  for (size_t k = 0; k < p.groups.size(); ++k) {
    ValueId x = p.groups[k].members.back(), r = p.a_reader[size_t(x)];
    if (p.producer[k] != kNoValue || p.observable[size_t(x)] || p.readers[size_t(x)] != 1 || r == kNoValue) continue;
    if (!p.launched[size_t(r)] || g.node(r).in[0] != x || !takes_prologue(g, r)) continue;
    if (p.fused_away[size_t(r)] && !p.is_producer[size_t(r)]) continue;
    p.prologue_of[size_t(r)] = int(k);
    p.fused_away[size_t(x)] = true;
    p.group_of[size_t(x)] = -1;
  }
}

std::vector<ValueId> Placement::reads(const Graph& g, ValueId v) const {
  if (!chain_of[size_t(v)].empty()) return g.node(chain_of[size_t(v)][0]).in;
  if (prologue_of[size_t(v)] >= 0) return groups[size_t(prologue_of[size_t(v)])].externals;
  if (operand_views[size_t(v)].empty()) return g.node(v).in;
  std::vector<ValueId> r;
  for (const auto& av : operand_views[size_t(v)]) r.push_back(av.base);
  return r;
}

MemoryPlanInput memory_input(const Graph& g, const Placement& p, const std::vector<size_t>& frame, bool plan) {
  size_t n = g.size();
  MemoryPlanInput mi;
  mi.g = &g;
  mi.alias_root = p.alias_root;
  mi.observable = p.observable;
  mi.plan = plan;
  mi.in_arena.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const Node& nd = g.node(ValueId(i));
    mi.in_arena[i] = p.needed[i] && !p.fused_away[i] && nd.op != Op::Param && nd.op != Op::Const &&
                     !passes::is_alias(g, nd);
    if (!p.launched[i] || p.fused_away[i]) continue;
    mi.order.push_back(ValueId(i));
    mi.scratch.push_back(frame[i]);
    std::vector<ValueId> reads, inplace;
    int k = p.group_of[i];
    if (k >= 0 && p.producer[size_t(k)] != kNoValue) {
      // The producer writes into this launch's output first, so nothing may be overwritten.
      ValueId e = p.producer[size_t(k)];
      reads = p.reads(g, e);
      for (ValueId x : p.groups[size_t(k)].externals)
        if (x != e) reads.push_back(x);
    } else if (k >= 0) {
      const FusionGroup& grp = p.groups[size_t(k)];
      reads = grp.externals;
      for (ValueId x : reads)
        if (g.shape(x) == nd.shape && dtype_size(g.dtype(x)) == dtype_size(nd.dtype) &&
            std::find(grp.gathered.begin(), grp.gathered.end(), x) == grp.gathered.end())
          inplace.push_back(x);
    } else {
      reads = p.reads(g, ValueId(i));
      for (size_t j = 0; j < nd.in.size() && p.chain_of[i].empty() && p.prologue_of[i] < 0; ++j)
        if (can_run_in_place(g, nd, j)) inplace.push_back(nd.in[j]);
    }
    mi.reads.push_back(reads);
    mi.inplace.push_back(inplace);
  }
  return mi;
}

}  // namespace synoros::passes
