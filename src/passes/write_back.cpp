#include "passes/write_back.hpp"

#include <algorithm>
#include <map>
#include <numeric>

namespace synoros::passes {

std::vector<ValueId> write_back_updates(const Graph& g, const std::vector<std::pair<ValueId, ValueId>>& pairs,
                                        MemoryPlanInput& mi) {
  const size_t n = g.size(), launches = mi.order.size();
  std::vector<ValueId> into(n, kNoValue);
  if (pairs.empty()) return into;
  auto root = [&](ValueId x) {
    ValueId r = mi.alias_root[size_t(x)];
    return r == kNoValue ? x : r;
  };
  std::vector<int> step(n, -1);  // the launch computing each value (-1: a leaf or folded)
  for (size_t s = 0; s < launches; ++s) step[size_t(mi.order[s])] = int(s);
  auto producer = [&](ValueId x) { return step[size_t(root(x))]; };
  // Parameters by storage (two leaves may share one), and the launches reading each, in order.
  std::map<const void*, std::vector<ValueId>> sharing;
  for (size_t i = 0; i < n; ++i)
    if (const Node& nd = g.node(ValueId(i)); nd.op == Op::Param && nd.data && nd.data->buffer)
      sharing[nd.data->buffer.get()].push_back(ValueId(i));
  auto storage = [&](ValueId prm) -> const void* {
    const Node& nd = g.node(prm);
    return nd.data && nd.data->buffer ? nd.data->buffer.get() : nullptr;
  };
  std::vector<std::vector<int>> param_readers(n);  // indexed by the first leaf on each storage
  auto first_leaf = [&](ValueId prm) { return storage(prm) ? sharing[storage(prm)].front() : prm; };
  for (size_t s = 0; s < launches; ++s)
    for (ValueId x : mi.reads[s]) {
      ValueId r = root(x);
      if (g.node(r).op != Op::Param) continue;
      std::vector<int>& rd = param_readers[size_t(first_leaf(r))];
      if (rd.empty() || rd.back() != int(s)) rd.push_back(int(s));
    }

  std::vector<int> named_value(n, 0), named_param(n, 0);
  for (const auto& [v, prm] : pairs) {
    if (v < 0 || prm < 0 || size_t(v) >= n || size_t(prm) >= n) continue;
    ++named_value[size_t(v)], ++named_param[size_t(prm)];
  }
  std::vector<bool> writes(launches, false);
  for (const auto& [v, prm] : pairs) {
    if (v < 0 || prm < 0 || size_t(v) >= n || size_t(prm) >= n) continue;
    const int s = step[size_t(v)];
    const Node &nv = g.node(v), &np = g.node(prm);
    if (s < 0 || !mi.in_arena[size_t(v)] || root(v) != v || np.op != Op::Param || !storage(prm)) continue;
    if (named_value[size_t(v)] != 1 || nv.dtype != np.dtype || nv.shape != np.shape) continue;
    bool safe = true;
    for (ValueId other : sharing[storage(prm)])  // named once, observed by no output
      safe = safe && named_param[size_t(other)] == (other == prm ? 1 : 0) && !mi.observable[size_t(other)];
    const ValueId leaf = first_leaf(prm);
    for (int r : param_readers[size_t(leaf)]) {
      if (r > s) safe = false;
      if (r != s) continue;
      const std::vector<ValueId>& in_place = mi.inplace[size_t(s)];
      int reads_of_leaf = 0;
      for (ValueId y : mi.reads[size_t(s)]) {
        if (g.node(root(y)).op != Op::Param || first_leaf(root(y)) != leaf) continue;
        ++reads_of_leaf;
        if (g.shape(y) != nv.shape || std::find(in_place.begin(), in_place.end(), y) == in_place.end()) safe = false;
      }
      if (!element_by_element(nv) && reads_of_leaf > 1) safe = false;  // one operand would clobber another
    }
    if (!safe) continue;
    into[size_t(v)] = prm;
    writes[size_t(s)] = true;
    mi.in_arena[size_t(v)] = false;
  }
  if (std::none_of(writes.begin(), writes.end(), [](bool w) { return w; })) return into;

  // Which launches move: the writing ones, and those whose every reader moves that read only
  // parameters and constants (not the step's arguments) or other such launches.
  std::vector<std::vector<int>> step_readers(launches);
  std::vector<bool> leafy(launches, true), moves(launches, false);
  for (size_t s = 0; s < launches; ++s)
    for (ValueId x : mi.reads[s]) {
      const int d = producer(x);
      if (d < 0) {
        leafy[s] = leafy[s] && g.node(root(x)).op != Op::Input;  // the step's arguments are computed
        continue;
      }
      leafy[s] = leafy[s] && leafy[size_t(d)];
      if (d != int(s)) step_readers[size_t(d)].push_back(int(s));
    }
  for (size_t s = launches; s-- > 0;) {
    if (writes[s]) {
      moves[s] = true;
      continue;
    }
    const std::vector<int>& rd = step_readers[s];
    moves[s] = leafy[s] && !rd.empty() && std::all_of(rd.begin(), rd.end(), [&](int r) { return moves[size_t(r)]; });
  }
  // A moving launch's place: just after the latest launch it reads from (or, for a writing one,
  // that reads the parameter it overwrites). Sorting by (key, tape position) keeps every launch
  // after the launches it depends on: a key is never below its inputs' keys, and ties go by tape
  // position, where inputs come first.
  std::vector<int> key(launches);
  for (size_t s = 0; s < launches; ++s) {
    if (!moves[s]) {
      key[s] = int(s);
      continue;
    }
    int k = -1;
    for (ValueId x : mi.reads[s])
      if (const int d = producer(x); d >= 0) k = std::max(k, key[size_t(d)]);
    if (writes[s])
      for (int r : param_readers[size_t(first_leaf(into[size_t(mi.order[s])]))])
        if (r != int(s)) k = std::max(k, key[size_t(r)]);
    key[s] = k;
  }
  std::vector<size_t> perm(launches);
  std::iota(perm.begin(), perm.end(), size_t(0));
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  auto permuted = [&](auto& v) {
    std::remove_reference_t<decltype(v)> out;
    out.reserve(v.size());
    for (size_t s : perm) out.push_back(std::move(v[s]));
    v = std::move(out);
  };
  permuted(mi.order);
  permuted(mi.reads);
  permuted(mi.inplace);
  permuted(mi.scratch);
  return into;
}

}  // namespace synoros::passes
