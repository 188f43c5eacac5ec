#include "passes/fusion.hpp"

#include <algorithm>

#include "passes/views.hpp"


namespace synoros::passes {

bool fusable(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  if (!op_info(n.op).has(kMap)) return false;
  for (ValueId x : n.in)
    if (g.dtype(x) != n.dtype) return false;
  return true;
}

namespace {
std::vector<int> distinct_readers(const Graph& g, const std::vector<bool>& launched) {
  std::vector<int> readers(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i)
    if (launched[i] || passes::is_alias(g, g.node(ValueId(i)))) {
      std::vector<ValueId> in = g.node(ValueId(i)).in;  // distinct readers: x*x reads x once
      std::sort(in.begin(), in.end());
      in.erase(std::unique(in.begin(), in.end()), in.end());
      for (ValueId x : in) ++readers[size_t(x)];
    }
  return readers;
}
}  // namespace

std::vector<ValueId> epilogue_producers(const Graph& g, const std::vector<FusionGroup>& groups,
                                        const std::vector<bool>& launched,
                                        const std::vector<bool>& observable, bool enabled) {
  std::vector<ValueId> out(groups.size(), kNoValue);
  if (!enabled) return out;
  std::vector<int> readers = distinct_readers(g, launched);
  for (size_t k = 0; k < groups.size(); ++k) {
    ValueId root = groups[k].members.back();
    for (ValueId e : groups[k].externals) {
      const Node& p = g.node(e);
      OpKind kind = op_info(p.op).kind;
      if (!launched[size_t(e)] || observable[size_t(e)] || readers[size_t(e)] != 1) continue;
      // Read through a view (at other indices) it cannot be overwritten in place.
      const auto& gath = groups[k].gathered;
      if (std::find(gath.begin(), gath.end(), e) != gath.end()) continue;
      if (kind == OpKind::Elementwise || p.op == Op::Dropout) continue;
      if (p.shape != g.shape(root) || p.dtype != g.dtype(root)) continue;
      out[k] = e;
      break;
    }
  }
  return out;
}

bool foldable_view(const Graph& g, ValueId v) {
  return op_info(g.node(v).op).has(kFoldableView);
}

std::vector<FusionGroup> fuse_elementwise(const Graph& g, const std::vector<bool>& launched,
                                          const std::vector<bool>& observable, bool enabled) {
  size_t n = g.size();
  std::vector<int> readers = distinct_readers(g, launched);
  std::vector<bool> taken(n, false);
  std::vector<FusionGroup> groups;
  for (size_t i = n; i-- > 0;) {
    ValueId root = ValueId(i);
    if (!launched[i] || taken[i] || !fusable(g, root)) continue;
    FusionGroup grp;
    std::vector<ValueId> members = {root};
    taken[i] = true;
    auto count_externals = [&](const std::vector<ValueId>& ms) {
      std::vector<ValueId> ext;
      for (ValueId m : ms)
        for (ValueId x : g.node(m).in)
          if (std::find(ms.begin(), ms.end(), x) == ms.end() &&
              std::find(ext.begin(), ext.end(), x) == ext.end())
            ext.push_back(x);
      return ext;
    };
    // Grow toward producers: a producer joins when only this group reads it. A view joins
    // as a load (a gather from its input into the block); the group does not grow past it.
    for (size_t k = 0; enabled && k < members.size(); ++k) {
      if (foldable_view(g, members[k])) continue;
      for (ValueId x : g.node(members[k]).in) {
        if (taken[size_t(x)] || !launched[size_t(x)] || observable[size_t(x)]) continue;
        if (!(fusable(g, x) || foldable_view(g, x))) continue;
        // Every reader of x must be in the group (a broadcast read by two of its members, say).
        // A view member loads from an external, so what a view reads stays outside.
        int inside = 0;
        bool viewed = false;
        for (ValueId m : members) {
          const auto& in = g.node(m).in;
          bool reads = std::find(in.begin(), in.end(), x) != in.end();
          inside += reads;
          viewed = viewed || (reads && foldable_view(g, m));
        }
        if (inside != readers[size_t(x)] || viewed) continue;
        if (g.shape(x) != g.shape(root) || g.dtype(x) != g.dtype(root)) continue;
        std::vector<ValueId> trial = members;
        trial.push_back(x);
        if (trial.size() > size_t(kFuseMaxMembers) ||
            count_externals(trial).size() > size_t(kFuseMaxExternals))
          continue;
        members.push_back(x);
        taken[size_t(x)] = true;
      }
    }
    std::sort(members.begin(), members.end());
    grp.members = members;
    grp.externals = count_externals(members);
    for (ValueId m : members)
      if (foldable_view(g, m)) grp.gathered.push_back(g.node(m).in[0]);
    groups.push_back(std::move(grp));
  }
  std::reverse(groups.begin(), groups.end());
  return groups;
}

}  // namespace synoros::passes
