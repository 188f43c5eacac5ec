// Shape distance: the exact minimum number of primitives still needed to turn a state's frontier
// into the input shape. It is computed on the state's abstraction (sizes and the facts the rules
// read, without expression identity), by a bounded depth-first search whose results are memoized
// across queries, so the many states sharing an abstraction cost one search.
#include <algorithm>

#include "synth/internal.hpp"

namespace synoros::synth {

uint16_t Synthesizer::Impl::size_id(const Size& z) {
  auto [it, fresh] = size_ids.try_emplace(z, uint16_t(size_ids.size()));
  if (size_ids.size() >= 65535) throw Error("synth: too many distinct sizes");
  (void)fresh;
  return it->second;
}

namespace {
// The memo key of an abstract state: sizes as small ids, 7 bytes per frontier dim.
std::string memo_key(Synthesizer::Impl& impl, const State& s) {
  std::string k;
  k.reserve(24 + 7 * s.frontier.size() + 6 * s.reduces.size());
  auto put = [&](const void* p, size_t n) { k.append(static_cast<const char*>(p), n); };
  auto put16 = [&](uint16_t v) { put(&v, 2); };
  put(&s.stage, 1);
  uint8_t nr = uint8_t(s.reduces.size()), nw = uint8_t(s.weights.size());
  put(&nr, 1);
  for (const Size& z : s.reduces) put16(impl.size_id(z));
  put(&nw, 1);
  if (s.stage < 2) {
    for (uint32_t m : s.weights) put(&m, 4);
    put(&s.expanded, 4);
  }
  put(s.usage.data(), s.usage.size());
  for (const Dim& d : s.frontier) {
    put16(impl.size_id(d.info.size));
    put16(impl.size_id(d.info.param));
    uint8_t b[3] = {uint8_t(d.info.kind), d.info.flags, uint8_t(d.info.group + 1)};
    put(b, 3);
  }
  return k;
}

// A cheap lower bound for view-stage states: every view consumes at most two frontier dims and
// produces at most two, so dims that are not (yet) input dims, and input dims not yet present,
// each need their share of a primitive. Discarding (strided) dims must be consumed too.
int lower_bound(const Synthesizer& syn, Synthesizer::Impl& impl, const State& s) {
  const bool views_only = s.stage == 2 || (s.stage == 1 && int(s.weights.size()) == syn.options().max_weights);
  const std::vector<Size>& want = impl.want;
  thread_local std::vector<Size> have;  // reused: this runs for most nodes of the search
  have.clear();
  int extra_consume = 0;
  for (const Dim& d : s.frontier) {
    if (d.info.kind == Kind::Stride) ++extra_consume;
    else have.push_back(d.info.size);
  }
  std::sort(have.begin(), have.end());
  size_t i = 0, j = 0;
  int common = 0;
  while (i < want.size() && j < have.size()) {
    if (want[i] == have[j]) ++common, ++i, ++j;
    else if (want[i] < have[j]) ++i;
    else ++j;
  }
  int a = int(have.size()) - common + extra_consume, b = int(want.size()) - common;
  if (!views_only) {
    // Weights may still drop any dims, and reductions add one dim each: only the missing input
    // dims bound the rest (a reduction supplies at most one, a view at most two), plus the
    // weights still required and, with none yet, a reduction for them to read.
    const int weights = std::max(0, syn.options().min_weights - int(s.weights.size()));
    const bool reduce = s.stage == 0 && s.reduces.empty() && weights > 0;
    return weights + (reduce ? 1 + b / 2 : (b + 1) / 2);
  }
  int lb = std::max((a + 1) / 2, (b + 1) / 2);
  // Views never create primary variables: only Merge-with-drop removes them (Stride and Unfold
  // only touch coefficients). So the frontier's product must cover the input's primaries, and
  // any surplus needs at least one drop.
  Size pf, pt;
  for (const Dim& d : s.frontier) pf = pf * d.info.size;
  for (const Size& z : want) pt = pt * z;
  bool surplus = false;
  for (size_t v = 0; v < size_t(kMaxVars); ++v) {
    if (pf.p[v] < pt.p[v]) return 1 << 20;
    if (pf.p[v] > pt.p[v]) surplus = true;
  }
  if (surplus) lb = std::max(lb, 1);
  return lb;
}

// Is a complete state reachable within `limit` more primitives? A depth-limited search that
// stops at the first success; bounds learnt on the way are memoized per abstract state.
bool reach(Synthesizer& syn, Synthesizer::Impl& impl, const State& abs, int limit) {
  if (syn.complete(abs)) return true;
  if (limit <= 0) return false;
  if (lower_bound(syn, impl, abs) > limit) return false;
  // One lookup: the entry (default: nothing known) stays put while the search below inserts others.
  Synthesizer::Impl::Memo& m = impl.dist_memo[memo_key(impl, abs)];
  if (m.ub <= limit) return true;
  if (m.lb > limit) return false;
  std::vector<Action> acts;
  syn.actions(abs, acts);
  bool found = false;
  for (const Action& a : acts) {
    // Leaves decided before the child is abstracted (sorting and renumbering it is the costly
    // part of a step, and most children end here).
    State c = apply_rules_only(syn.spec(), syn.options(), abs, a);
    if (syn.complete(c)) {
      found = true;
      break;
    }
    if (limit <= 1 || lower_bound(syn, impl, c) > limit - 1) continue;
    if (reach(syn, impl, syn.abstract(c), limit - 1)) {
      found = true;
      break;
    }
  }
  if (found) m.ub = std::min(m.ub, limit);
  else m.lb = std::max(m.lb, limit + 1);
  return found;
}
}  // namespace

int Synthesizer::distance(const State& s, int limit) {
  State abs = s.abstract ? s : abstract(s);
  for (int l = 0; l <= limit; ++l)  // iterative deepening: the first l that succeeds is exact
    if (reach(*this, *impl_, abs, l)) return l;
  return std::max(limit, -1) + 1;
}

bool Synthesizer::within(const State& s, int limit) {
  if (limit < 0) return false;
  State abs = s.abstract ? s : abstract(s);
  // Iterative deepening here too: a state that can be completed far within the limit is found
  // by shallow searches, where a search at the full limit would first wander down long dead ends.
  for (int l = 0; l <= limit; ++l)
    if (reach(*this, *impl_, abs, l)) return true;
  return false;
}

void Synthesizer::require_reachable() {
  int d = distance(root(), opt_.max_depth);
  if (d <= opt_.max_depth) return;
  auto shape = [&](const std::vector<Size>& v) {
    std::string t = "[";
    for (size_t i = 0; i < v.size(); ++i) t += (i ? ", " : "") + spec_.str(v[i]);
    return t + "]";
  };
  throw Error("synth: the input shape " + shape(spec_.input) + " cannot be reached from the output shape " +
              shape(spec_.output) + " within depth " + std::to_string(opt_.max_depth) +
              " (check the usage caps, the coefficients and the depth)");
}

}  // namespace synoros::synth
