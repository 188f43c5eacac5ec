// Canonical forms of finished operators, and breadth-first enumeration of the state DAG.
#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <unordered_set>

#include "synth/internal.hpp"

namespace synoros::synth {

namespace {
std::string zs(const Size& z) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (int8_t e : z.p) s += hex[uint8_t(e) >> 4], s += hex[uint8_t(e) & 15];
  s += '.';
  for (int8_t e : z.c) s += hex[uint8_t(e) >> 4], s += hex[uint8_t(e) & 15];
  return s;
}

struct Canon {
  const Operator& op;
  std::vector<int> name;  // iterator -> canonical reduction index (-1: unnamed)
  int next = 0;
  std::string tok(int it) {
    if (it < op.n_out) return "o" + std::to_string(it);
    if (name[size_t(it)] < 0) name[size_t(it)] = next++;
    return "r" + std::to_string(name[size_t(it)]) + ":" + zs(op.iter_sizes[size_t(it)]);
  }
  std::string ser(int32_t i) {
    const IxNode& n = op.nodes[size_t(i)];
    switch (n.kind) {
      case Kind::Out:
      case Kind::Red: return tok(n.iter);
      case Kind::Split: { std::string a = ser(n.a); return "S(" + a + "," + ser(n.b) + ")"; }
      case Kind::Div: return "D" + zs(n.param) + "(" + ser(n.a) + ")";
      case Kind::Mod: return "M" + zs(n.param) + "(" + ser(n.a) + ")";
      case Kind::Shift: return "H(" + ser(n.a) + ")";
      case Kind::Stride: return "T" + zs(n.param) + "(" + ser(n.a) + ")";
      case Kind::Unfold: { std::string a = ser(n.a); return "U(" + a + "," + ser(n.b) + ")"; }
    }
    return "?";
  }
};
}  // namespace

// x part: the index expression of every input dim in input order, reduction iterators named by
// first occurrence. Reductions that only weights see are named by trying every order and keeping
// the smallest serialization, so the form does not depend on how the operator was spelled.
std::string canonical_string(const Operator& op) {
  Canon c{op, std::vector<int>(op.iter_sizes.size(), -1)};
  std::string x;
  for (int32_t r : op.x_root) x += c.ser(r) + ";";
  std::vector<int> unnamed;
  for (size_t it = size_t(op.n_out); it < op.iter_sizes.size(); ++it)
    if (c.name[it] < 0) unnamed.push_back(int(it));
  std::string best;
  bool first = true;
  std::sort(unnamed.begin(), unnamed.end());
  do {
    Canon d = c;
    for (int it : unnamed) d.tok(it);
    std::vector<std::string> ws;
    for (const auto& w : op.weights) {
      std::vector<std::string> t;
      for (int32_t it : w) t.push_back(d.tok(it));
      std::sort(t.begin(), t.end());
      std::string s;
      for (auto& q : t) s += q + ",";
      ws.push_back(s);
    }
    std::sort(ws.begin(), ws.end());
    std::string all;
    for (auto& w : ws) all += "[" + w + "]";
    if (first || all < best) best = all;
    first = false;
  } while (unnamed.size() <= 5 && std::next_permutation(unnamed.begin(), unnamed.end()));
  // Reductions nobody reads would be a constant factor; they cannot arise, but name them anyway.
  return x + "|" + best;
}

std::vector<Operator> Synthesizer::finalize(const State& s, const std::vector<Action>& path) const {
  std::vector<Operator> out;
  if (!complete(s) || s.abstract) return out;
  Operator base;
  base.n_out = int(spec_.output.size());
  base.iter_sizes = spec_.output;
  for (const Size& z : s.reduces) base.iter_sizes.push_back(z);
  for (uint32_t m : s.weights) {
    std::vector<int32_t> w;
    for (int it = 0; it < int(base.iter_sizes.size()); ++it)
      if (m >> it & 1) w.push_back(it);
    base.weights.push_back(w);
  }
  base.depth = s.depth;
  base.path = path;
  std::unordered_map<int32_t, int32_t> local;
  std::function<int32_t(int32_t)> copy = [&](int32_t e) -> int32_t {
    auto it = local.find(e);
    if (it != local.end()) return it->second;
    const ExprNode& n = impl_->arena[size_t(e)];
    IxNode m;
    m.kind = n.kind;
    m.iter = n.iter;
    m.size = n.size;
    m.param = n.param;
    if (n.a >= 0) m.a = copy(n.a);
    if (n.b >= 0) m.b = copy(n.b);
    base.nodes.push_back(m);
    int32_t id = int32_t(base.nodes.size() - 1);
    local[e] = id;
    return id;
  };
  std::vector<int32_t> roots(s.frontier.size());
  for (size_t i = 0; i < s.frontier.size(); ++i) roots[i] = copy(s.frontier[i].expr);
  // Fixed dims read their output iterator directly.
  std::vector<int32_t> x_root(spec_.input.size(), -1);
  for (auto [fo, fi] : spec_.fixed) {
    IxNode m;
    m.kind = Kind::Out;
    m.iter = fo;
    m.size = spec_.output[size_t(fo)];
    base.nodes.push_back(m);
    x_root[size_t(fi)] = int32_t(base.nodes.size() - 1);
  }
  // Every assignment of frontier dims to input dims of the same size.
  std::vector<bool> used(s.frontier.size(), false);
  std::function<void(size_t)> rec = [&](size_t j) {
    if (j == spec_.input.size()) {
      Operator op = base;
      op.x_root = x_root;
      op.canonical = canonical_string(op);
      op.hash = std::hash<std::string>()(op.canonical);
      out.push_back(std::move(op));
      return;
    }
    if (x_root[j] >= 0) return rec(j + 1);
    for (size_t i = 0; i < s.frontier.size(); ++i) {
      if (used[i] || !(s.frontier[i].info.size == spec_.input[j])) continue;
      used[i] = true;
      x_root[j] = roots[i];
      rec(j + 1);
      x_root[j] = -1;
      used[i] = false;
    }
  };
  rec(0);
  return out;
}

std::string canonical_form(const Operator& op) { return canonical_string(op); }

Operator build_from_actions(Synthesizer& syn, const std::vector<Action>& path) {
  State s = syn.root();
  std::vector<Action> acts;
  for (size_t i = 0; i < path.size(); ++i) {
    syn.actions(s, acts);
    if (std::find(acts.begin(), acts.end(), path[i]) == acts.end())
      throw Error("synth: step " + std::to_string(i) + " (" + act_name(path[i].type) + ") is not a legal action here");
    s = syn.apply(s, path[i]);
  }
  auto ops = syn.finalize(s, path);
  if (ops.empty()) throw Error("synth: the actions do not end in a complete operator");
  return ops.front();
}

EnumResult enumerate(Synthesizer& syn, bool keep_operators, size_t max_operators, const State* start,
                     const std::vector<Action>& start_path) {
  auto t0 = std::chrono::steady_clock::now();
  EnumResult res;
  const int D = syn.options().max_depth;
  struct Entry {
    State s;
    uint64_t ways;
  };
  struct Back {
    int32_t parent;
    Action a;
  };
  std::vector<std::vector<Back>> back(size_t(D) + 1);
  State s0 = start ? *start : syn.root();
  const int d0 = s0.depth;
  if (d0 > D) throw Error("synth: the start state is deeper than max_depth");
  std::vector<Entry> layer{{s0, 1}};
  back[size_t(d0)].push_back({-1, Action{}});
  std::unordered_set<std::string> seen_ops;
  std::vector<Action> acts;
  for (int d = d0; d <= D; ++d) {
    DepthCount dc;
    dc.depth = d;
    dc.states = layer.size();
    res.total_states += layer.size();
    std::vector<Entry> next;
    std::unordered_map<std::string, size_t> index;
    for (size_t i = 0; i < layer.size(); ++i) {
      const State& s = layer[i].s;
      if (syn.complete(s)) {
        dc.sequences += layer[i].ways;
        std::vector<Action> path;
        for (int dd = d, k = int(i); dd > d0; --dd) {
          path.push_back(back[size_t(dd)][size_t(k)].a);
          k = back[size_t(dd)][size_t(k)].parent;
        }
        path.insert(path.end(), start_path.rbegin(), start_path.rend());
        std::reverse(path.begin(), path.end());
        for (Operator& op : syn.finalize(s, path)) {
          if (seen_ops.insert(op.canonical).second) {
            ++dc.operators;
            if (keep_operators && res.operators.size() < max_operators) res.operators.push_back(std::move(op));
          }
        }
      }
      if (d == D) continue;
      syn.pruned_actions(s, acts);
      for (const Action& a : acts) {
        State c = syn.apply(s, a);
        std::string key = syn.state_key(c);
        auto [it, fresh] = index.try_emplace(key, next.size());
        if (fresh) {
          next.push_back({std::move(c), 0});
          back[size_t(d) + 1].push_back({int32_t(i), a});
        }
        next[it->second].ways += layer[i].ways;
      }
    }
    res.per_depth.push_back(dc);
    layer = std::move(next);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace synoros::synth
