// Search: MCTS over the state DAG (UCT with virtual loss, transposition sharing, progressive
// widening, checkpoint/resume), plus random sampling and beam search as baselines.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <unistd.h>

#include "synth/internal.hpp"
#include "synth/lower_plan.hpp"

namespace synoros::synth {

// ------------------------------------------------------------------ paths and fingerprints
std::string encode_actions(const std::vector<Action>& p) {
  std::ostringstream o;
  o << p.size();
  for (const Action& a : p) {
    o << ' ' << int(a.type) << ',' << a.a << ',' << a.b << ',' << a.mask << ',' << a.emask;
    for (int8_t e : a.size.p) o << ',' << int(e);
    for (int8_t e : a.size.c) o << ',' << int(e);
  }
  return o.str();
}

std::vector<Action> decode_actions(const std::string& s) {
  std::istringstream in(s);
  size_t n = 0;
  if (!(in >> n) || n > 64)
    throw Error("corrupt action path: it starts with the number of actions (at most 64), then that many "
                "actions separated by spaces, each a comma-separated list of integers, as a trials report writes "
                "them");
  std::vector<Action> out;
  for (size_t i = 0; i < n; ++i) {
    std::string tok;
    if (!(in >> tok)) throw Error("truncated action path: " + std::to_string(n) + " actions announced, " + std::to_string(i) + " given");
    std::vector<long> v;
    std::istringstream t(tok);
    std::string f;
    while (std::getline(t, f, ',')) {
      try {
        v.push_back(std::stol(f));
      } catch (...) {
        throw Error("corrupt action '" + tok + "' in an action path");
      }
    }
    if (v.size() != 5 + 2 * kMaxVars || v[0] < 0 || v[0] > int(ActType::Unfold))
      throw Error("corrupt action '" + tok + "' in an action path");
    Action a;
    a.type = ActType(v[0]);
    a.a = int16_t(v[1]);
    a.b = int16_t(v[2]);
    a.mask = uint32_t(v[3]);
    a.emask = uint32_t(v[4]);
    for (int k = 0; k < kMaxVars; ++k) a.size.p[size_t(k)] = int8_t(v[5 + size_t(k)]);
    for (int k = 0; k < kMaxVars; ++k) a.size.c[size_t(k)] = int8_t(v[5 + kMaxVars + size_t(k)]);
    out.push_back(a);
  }
  return out;
}

namespace {
uint64_t fingerprint(const Synthesizer& syn) {
  const Spec& s = syn.spec();
  const Options& o = syn.options();
  uint64_t h = 0xF1;
  for (const Var& v : s.primary) h = hmix(h, std::hash<std::string>()(v.name) + uint64_t(v.cap));
  for (const Var& v : s.coefficient) h = hmix(h, std::hash<std::string>()(v.name) + uint64_t(v.cap) * 131 + uint64_t(v.value));
  for (auto& b : s.bindings)
    for (int64_t v : b) h = hmix(h, uint64_t(v));
  for (const Size& z : s.input) h = hmix(h, z.hash());
  for (const Size& z : s.output) h = hmix(h, z.hash() * 3);
  for (auto [a, b] : s.fixed) h = hmix(h, uint64_t(a * 64 + b));
  h = hmix(h, uint64_t(o.max_depth) | uint64_t(o.max_reductions) << 8 | uint64_t(o.max_weights) << 16 |
                  uint64_t(o.min_weights) << 24 | uint64_t(o.max_weight_rank) << 32 | uint64_t(o.canonical) << 40 |
                  uint64_t(o.allow_shift) << 41 | uint64_t(o.allow_stride) << 42 | uint64_t(o.max_vars_in_size) << 48 |
                  uint64_t(o.max_exponent) << 56);
  return h;
}

void keep_best(std::vector<std::pair<double, Operator>>& best, double r, const Operator& op, size_t k) {
  for (auto& [br, bo] : best)
    if (bo.canonical == op.canonical) return;
  best.push_back({r, op});
  std::stable_sort(best.begin(), best.end(), [](auto& x, auto& y) { return x.first > y.first; });
  if (best.size() > k) best.resize(k);
}

// Random descent to a complete state: uniform over the legal options that can still be
// completed within the depth, where stopping at a complete state is one option. Options are
// drawn uniformly and rejected when the shape distance rules them out, which gives the same
// distribution as filtering first but tests only the options actually drawn.
bool rollout(Synthesizer& syn, State s, std::vector<Action> path, std::mt19937_64& rng, Operator& out) {
  std::vector<Action> acts;
  const int D = syn.options().max_depth;
  for (int guard = 0; guard < 64; ++guard) {
    syn.actions(s, acts);
    bool done = syn.complete(s);
    while (true) {
      size_t options = acts.size() + (done ? 1 : 0);
      if (options == 0) return false;
      size_t pick = std::uniform_int_distribution<size_t>(0, options - 1)(rng);
      if (done && pick == acts.size()) {
        out = syn.finalize(s, path).front();
        return true;
      }
      State c = syn.apply(s, acts[pick]);
      if (syn.within(c, D - c.depth)) {
        path.push_back(acts[pick]);
        s = std::move(c);
        break;
      }
      acts.erase(acts.begin() + long(pick));
    }
  }
  return false;
}
}  // namespace

Reward flops_proxy_reward(const Synthesizer& syn, double reference_flops, double lo, double hi) {
  const Spec spec = syn.spec();
  return [spec, reference_flops, lo, hi](const Operator& op) {
    double ratio = stats(spec, op, binding(spec, 0)).flops / reference_flops;
    if (ratio >= lo && ratio <= hi) return 1.0;
    double edge = ratio < lo ? lo : hi;
    return std::exp(-std::fabs(std::log(ratio / edge)));
  };
}

bool sample(Synthesizer& syn, std::mt19937_64& rng, Operator& out) { return rollout(syn, syn.root(), {}, rng, out); }

// ------------------------------------------------------------------ MCTS
struct Mcts::Impl {
  Synthesizer& syn;
  Reward reward;
  MctsOptions opt;
  std::mt19937_64 rng;
  struct Node {
    State state;
    std::vector<Action> path;      // first path that reached it
    bool expanded = false;
    bool complete = false;
    std::vector<Action> acts;      // legal actions in a seeded order
    size_t verified = 0;           // acts[0, verified) can still be completed
    std::vector<int32_t> child;    // node per action (-1: not created yet)
    double n = 0, w = 0, vl = 0;   // visits, reward sum, in-flight (virtual loss)
    double fn = 0, fw = 0;         // the "stop here" (finalize) option
  };
  std::vector<Node> nodes;
  std::unordered_map<std::string, int32_t> table;  // transpositions: state key -> node
  std::unordered_map<std::string, double> cache;   // canonical form -> reward
  std::vector<std::pair<double, Operator>> best;
  uint64_t iterations = 0, evaluations = 0;

  Impl(Synthesizer& s, Reward r, MctsOptions o) : syn(s), reward(std::move(r)), opt(std::move(o)), rng(opt.seed) {
    get_node(syn.root(), {});
  }

  int32_t get_node(const State& s, const std::vector<Action>& path) {
    std::string key = syn.state_key(s);
    auto it = table.find(key);
    if (it != table.end()) return it->second;
    Node nd;
    nd.state = s;
    nd.path = path;
    nd.complete = syn.complete(s);
    nodes.push_back(std::move(nd));
    table[key] = int32_t(nodes.size() - 1);
    return int32_t(nodes.size() - 1);
  }

  void expand(int32_t id) {
    Node& nd = nodes[size_t(id)];
    if (nd.expanded) return;
    std::vector<Action> acts;
    syn.actions(nd.state, acts);
    // Reveal order for progressive widening: seeded by the search seed and the state itself, so
    // it does not depend on the order in which nodes were created (resume-safe). Actions are
    // checked against the shape distance lazily, when widening first reveals them.
    std::mt19937_64 r(hmix(opt.seed, syn.state_hash(nd.state)));
    std::shuffle(acts.begin(), acts.end(), r);
    Node& again = nodes[size_t(id)];
    again.acts = std::move(acts);
    again.child.assign(again.acts.size(), -1);
    again.verified = 0;
    again.expanded = true;
  }

  // Makes sure the first `k` actions of a node can still be completed; returns how many there are.
  size_t verify(int32_t id, size_t k) {
    Node& nd = nodes[size_t(id)];
    const int D = syn.options().max_depth;
    while (nd.verified < k && nd.verified < nd.acts.size()) {
      State c = syn.apply(nd.state, nd.acts[nd.verified]);
      if (syn.within(c, D - c.depth)) {
        ++nd.verified;
      } else {
        nd.acts.erase(nd.acts.begin() + long(nd.verified));
        nd.child.erase(nd.child.begin() + long(nd.verified));
      }
    }
    return std::min(k, nd.verified);
  }

  double uct(double parent_n, double n, double w, double vl) const {
    double ne = n + vl;
    if (ne <= 0) return 1e18;
    double q = w / ne;  // in-flight visits count as losses (reward 0)
    return q + opt.c_uct * std::sqrt(std::log(parent_n + 1) / ne);
  }

  struct Leaf {
    std::vector<int32_t> path;  // nodes from the root
    bool finalize = false;      // the last node was stopped at
    Operator op;
    bool ok = false;
  };

  Leaf select() {
    Leaf leaf;
    int32_t id = 0;
    for (int guard = 0; guard < 64; ++guard) {
      leaf.path.push_back(id);
      expand(id);
      Node& nd0 = nodes[size_t(id)];
      size_t want = size_t(std::ceil(opt.widening_c * std::pow(nd0.n + nd0.vl + 1, opt.widening_alpha)));
      want = std::max<size_t>(1, want);
      size_t fin = nd0.complete ? 1 : 0;
      size_t acts_ok = verify(id, want > fin ? want - fin : 0);
      Node& nd = nodes[size_t(id)];
      if (acts_ok == 0 && !nd.complete) return leaf;  // dead end (exact pruning rules it out)
      size_t reveal = std::min(want, acts_ok + fin);
      double pn = nd.n + nd.vl;
      double best_s = -1;
      size_t best_k = 0;
      for (size_t k = 0; k < reveal; ++k) {
        double s;
        if (nd.complete && k == 0) {
          s = uct(pn, nd.fn, nd.fw, 0);
        } else {
          size_t a = k - (nd.complete ? 1 : 0);
          int32_t c = nd.child[a];
          if (c < 0) {
            // A transposition may already hold this child (reached from another parent, or
            // restored from a checkpoint): link it so its statistics are shared.
            auto it = table.find(syn.state_key(syn.apply(nd.state, nd.acts[a])));
            if (it != table.end()) c = nd.child[a] = it->second;
          }
          s = c < 0 ? 1e18 : uct(pn, nodes[size_t(c)].n, nodes[size_t(c)].w, nodes[size_t(c)].vl);
        }
        if (s > best_s) best_s = s, best_k = k;
      }
      if (nd.complete && best_k == 0) {
        leaf.finalize = true;
        leaf.op = syn.finalize(nd.state, nd.path).front();
        leaf.ok = true;
        return leaf;
      }
      size_t a = best_k - (nd.complete ? 1 : 0);
      int32_t c = nd.child[a];
      if (c < 0) {
        State cs = syn.apply(nd.state, nd.acts[a]);
        std::vector<Action> cp = nodes[size_t(id)].path;
        cp.push_back(nodes[size_t(id)].acts[a]);
        int32_t cid = get_node(cs, cp);
        nodes[size_t(id)].child[a] = cid;
        leaf.path.push_back(cid);
        Node& cn = nodes[size_t(cid)];
        leaf.ok = rollout(syn, cn.state, cn.path, rng, leaf.op);
        return leaf;
      }
      id = c;
    }
    return leaf;
  }

  double evaluate(const Operator& op) {
    auto it = cache.find(op.canonical);
    if (it != cache.end()) return it->second;
    double r = reward(op);
    ++evaluations;
    cache[op.canonical] = r;
    keep_best(best, r, op, opt.keep_best);
    return r;
  }

  void step() {
    std::vector<Leaf> leaves;
    for (int b = 0; b < std::max(1, opt.batch); ++b) {
      Leaf l = select();
      for (int32_t id : l.path) nodes[size_t(id)].vl += opt.virtual_loss;
      leaves.push_back(std::move(l));
    }
    for (Leaf& l : leaves) {
      double r = l.ok ? evaluate(l.op) : 0.0;
      for (int32_t id : l.path) {
        Node& nd = nodes[size_t(id)];
        nd.vl -= opt.virtual_loss;
        nd.n += 1;
        nd.w += r;
      }
      if (l.finalize) {
        Node& nd = nodes[size_t(l.path.back())];
        nd.fn += 1;
        nd.fw += r;
      }
      ++iterations;
    }
  }
};

Mcts::Mcts(Synthesizer& syn, Reward reward, MctsOptions opt) : impl_(std::make_unique<Impl>(syn, std::move(reward), std::move(opt))) {}
Mcts::~Mcts() = default;
uint64_t Mcts::iterations() const { return impl_->iterations; }
size_t Mcts::nodes() const { return impl_->nodes.size(); }

SearchResult Mcts::run(uint64_t iterations) {
  auto t0 = std::chrono::steady_clock::now();
  uint64_t last_save = impl_->iterations;
  while (impl_->iterations < iterations) {
    impl_->step();
    if (!impl_->opt.checkpoint.empty() && impl_->opt.checkpoint_every &&
        impl_->iterations - last_save >= impl_->opt.checkpoint_every) {
      save(impl_->opt.checkpoint);
      last_save = impl_->iterations;
    }
  }
  if (!impl_->opt.checkpoint.empty()) save(impl_->opt.checkpoint);
  SearchResult r;
  r.best = impl_->best;
  r.iterations = impl_->iterations;
  r.evaluations = impl_->evaluations;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void Mcts::save(const std::string& path) const {
  const Impl& m = *impl_;
  std::ostringstream o;
  o.precision(17);
  o << "synoros-mcts 1\n" << fingerprint(m.syn) << ' ' << m.opt.seed << ' ' << m.iterations << ' ' << m.evaluations << '\n';
  o << m.rng << '\n';
  o << m.nodes.size() << '\n';
  for (const auto& nd : m.nodes) o << nd.n << ' ' << nd.w << ' ' << nd.fn << ' ' << nd.fw << ' ' << encode_actions(nd.path) << '\n';
  o << m.cache.size() << '\n';
  std::vector<std::pair<std::string, double>> cached(m.cache.begin(), m.cache.end());
  std::sort(cached.begin(), cached.end());
  for (auto& [k, v] : cached) o << v << ' ' << k << '\n';
  o << m.best.size() << '\n';
  for (auto& [r, op] : m.best) o << r << ' ' << encode_actions(op.path) << '\n';
  o << "end\n";
  // Write to a temporary file, flush it to disk, then rename: a crash never leaves half a file.
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("synth: cannot write checkpoint '" + tmp + "'");
  std::string text = o.str();
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("synth: writing checkpoint '" + path + "' failed");
}

namespace {
// A number filling the whole text (std::stod accepts a prefix and throws std::invalid_argument
// or std::out_of_range, not Error). As save() writes them, "inf" and "nan" are numbers too.
bool parse_number(const std::string& text, double& out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && p == end;
}
}  // namespace

void Mcts::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("synth: cannot read checkpoint '" + path + "'");
  Impl& m = *impl_;
  auto corrupt = [&](const std::string& what) {
    return Error("synth: checkpoint '" + path + "' is corrupt (" + what + ")");
  };
  auto truncated = [&] { return Error("synth: checkpoint '" + path + "' is truncated"); };
  auto decode = [&](const std::string& text) {
    try {
      return decode_actions(text);
    } catch (const Error& e) {
      throw corrupt(e.what());
    }
  };
  std::string magic;
  int version = 0;
  uint64_t fp = 0, seed = 0, iters = 0, evals = 0;
  if (!(in >> magic >> version) || magic != "synoros-mcts" || version != 1)
    throw Error("synth: '" + path + "' is not an MCTS checkpoint");
  if (!(in >> fp >> seed >> iters >> evals)) throw corrupt("header");
  if (fp != fingerprint(m.syn)) throw Error("synth: checkpoint '" + path + "' was written for a different spec or options");
  if (seed != m.opt.seed) throw Error("synth: checkpoint '" + path + "' was written with seed " + std::to_string(seed));
  std::mt19937_64 rng;
  if (!(in >> rng)) throw corrupt("generator state");
  size_t count = 0;
  if (!(in >> count) || count == 0 || count > (1u << 26)) throw corrupt("nodes");
  // Everything is read into a fresh search (holding the root as node 0, as the search expects)
  // and taken over only at the end: a refused file leaves this search as it was.
  Impl r(m.syn, m.reward, m.opt);
  std::string line;
  std::getline(in, line);
  for (size_t i = 0; i < count; ++i) {
    double n, w, fn, fw;
    if (!std::getline(in, line)) throw truncated();
    std::istringstream ls(line);
    // Visit counts feed pow() and a conversion to size_t when the search widens a node.
    constexpr double kMaxVisits = double(uint64_t(1) << 53);
    if (!(ls >> n >> w >> fn >> fw) || !(n >= 0 && n <= kMaxVisits && fn >= 0 && fn <= kMaxVisits) ||
        !std::isfinite(w) || !std::isfinite(fw))
      throw corrupt("node stats");
    std::string rest;
    std::getline(ls, rest);
    std::vector<Action> p = decode(rest);
    State s = r.syn.root();
    std::vector<Action> acts;
    for (const Action& a : p) {
      r.syn.actions(s, acts);
      if (std::find(acts.begin(), acts.end(), a) == acts.end())
        throw Error("synth: checkpoint '" + path + "' holds an illegal action path");
      s = r.syn.apply(s, a);
    }
    int32_t id = r.get_node(s, p);
    auto& nd = r.nodes[size_t(id)];
    nd.n = n, nd.w = w, nd.fn = fn, nd.fw = fw;
  }
  if (!(in >> count)) throw corrupt("cache");
  std::getline(in, line);
  for (size_t i = 0; i < count; ++i) {
    if (!std::getline(in, line)) throw truncated();
    size_t sp = line.find(' ');
    double v;
    if (sp == std::string::npos || !parse_number(line.substr(0, sp), v)) throw corrupt("cache");
    r.cache[line.substr(sp + 1)] = v;
  }
  if (!(in >> count)) throw corrupt("best");
  std::getline(in, line);
  for (size_t i = 0; i < count; ++i) {
    if (!std::getline(in, line)) throw truncated();
    std::istringstream ls(line);
    double v;
    if (!(ls >> v) || !std::isfinite(v)) throw corrupt("best");
    std::string rest;
    std::getline(ls, rest);
    std::vector<Action> p = decode(rest);
    try {
      r.best.push_back({v, build_from_actions(r.syn, p)});
    } catch (const Error& e) {
      throw corrupt(std::string("best: ") + e.what());
    }
  }
  if (!(in >> magic) || magic != "end") throw truncated();
  m.nodes = std::move(r.nodes);
  m.table = std::move(r.table);
  m.cache = std::move(r.cache);
  m.best = std::move(r.best);
  m.rng = rng;
  m.iterations = iters;
  m.evaluations = evals;
}

// ------------------------------------------------------------------ baselines
SearchResult random_search(Synthesizer& syn, const Reward& reward, uint64_t samples, uint64_t seed, size_t k) {
  auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  std::mt19937_64 rng(seed);
  std::unordered_map<std::string, double> cache;
  for (uint64_t i = 0; i < samples; ++i) {
    Operator op;
    ++res.iterations;
    if (!sample(syn, rng, op)) continue;
    if (cache.count(op.canonical)) continue;
    double r = reward(op);
    cache[op.canonical] = r;
    ++res.evaluations;
    keep_best(res.best, r, op, k);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

SearchResult beam_search(Synthesizer& syn, const Reward& reward, size_t width, uint64_t seed, size_t k) {
  // Level by level: every child of the beam is scored by one seeded rollout; the best `width`
  // children form the next beam. Complete states met on the way are evaluated too.
  auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  std::mt19937_64 rng(seed);
  std::unordered_map<std::string, double> cache;
  auto eval = [&](const Operator& op) {
    auto it = cache.find(op.canonical);
    if (it != cache.end()) return it->second;
    double r = reward(op);
    cache[op.canonical] = r;
    ++res.evaluations;
    keep_best(res.best, r, op, k);
    return r;
  };
  struct Item {
    State s;
    std::vector<Action> path;
    double score;
  };
  std::vector<Item> beam{{syn.root(), {}, 0}};
  std::vector<Action> acts;
  for (int d = 0; d < syn.options().max_depth && !beam.empty(); ++d) {
    std::vector<Item> next;
    std::set<std::string> seen;
    for (const Item& it : beam) {
      syn.pruned_actions(it.s, acts);
      for (const Action& a : acts) {
        Item c{syn.apply(it.s, a), it.path, 0};
        c.path.push_back(a);
        if (!seen.insert(syn.state_key(c.s)).second) continue;
        ++res.iterations;
        if (syn.complete(c.s)) c.score = std::max(c.score, eval(syn.finalize(c.s, c.path).front()));
        Operator op;
        if (rollout(syn, c.s, c.path, rng, op)) c.score = std::max(c.score, eval(op));
        next.push_back(std::move(c));
      }
    }
    std::stable_sort(next.begin(), next.end(), [](const Item& x, const Item& y) { return x.score > y.score; });
    if (next.size() > width) next.resize(width);
    beam = std::move(next);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace synoros::synth
