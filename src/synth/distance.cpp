// Shape distance: the exact minimum number of primitives still needed to turn a state's frontier
// into the input shape. It is computed on the state's abstraction (sizes and the facts the rules
// read, without expression identity), by a bounded depth-first search whose results are memoized
// across queries, so the many states sharing an abstraction cost one search.
#include <algorithm>

#include "synth/internal.hpp"

namespace synoros::synth {

namespace {
// A cheap lower bound for view-stage states: every view consumes at most two frontier dims and
// produces at most two, so dims that are not (yet) input dims, and input dims not yet present,
// each need their share of a primitive. Discarding (strided) dims must be consumed too.
int lower_bound(const Synthesizer& syn, const State& s) {
  const Spec& sp = syn.spec();
  if (s.stage < 2 && !(int(s.weights.size()) == syn.options().max_weights && s.stage == 1)) return 0;
  std::vector<Size> want, have;
  for (size_t i = 0; i < sp.input.size(); ++i) {
    bool fx = false;
    for (auto [fo, fi] : sp.fixed)
      if (fi == int(i)) fx = true;
    if (!fx) want.push_back(sp.input[i]);
  }
  int extra_consume = 0;
  for (const Dim& d : s.frontier) {
    if (d.info.kind == Kind::Stride) ++extra_consume;
    else have.push_back(d.info.size);
  }
  std::sort(want.begin(), want.end());
  std::sort(have.begin(), have.end());
  size_t i = 0, j = 0;
  int common = 0;
  while (i < want.size() && j < have.size()) {
    if (want[i] == have[j]) ++common, ++i, ++j;
    else if (want[i] < have[j]) ++i;
    else ++j;
  }
  int a = int(have.size()) - common + extra_consume, b = int(want.size()) - common;
  return std::max((a + 1) / 2, (b + 1) / 2);
}

int dist_rec(Synthesizer& syn, Synthesizer::Impl& impl, const State& abs, int limit) {
  if (syn.complete(abs)) return 0;
  if (limit <= 0) return limit + 1;
  if (lower_bound(syn, abs) > limit) return limit + 1;
  std::string key = syn.state_key(abs);
  auto it = impl.dist_memo.find(key);
  if (it != impl.dist_memo.end()) {
    if (it->second.exact) return std::min(it->second.value, limit + 1);
    if (it->second.value > limit) return limit + 1;
  }
  std::vector<Action> acts;
  syn.actions(abs, acts);
  int best = limit + 1;
  for (const Action& a : acts) {
    if (best <= 1) break;
    State c = syn.apply(abs, a);
    int d = 1 + dist_rec(syn, impl, c, best - 2);
    if (d < best) best = d;
  }
  Synthesizer::Impl::Memo& m = impl.dist_memo[key];
  if (best <= limit) {
    m.value = best;
    m.exact = true;
  } else if (!m.exact) {
    m.value = std::max(m.value, limit + 1);
  }
  return best;
}
}  // namespace

int Synthesizer::distance(const State& s, int limit) {
  if (limit < 0) return complete(s) ? 0 : limit + 1;
  State abs = s.abstract ? s : abstract(s);
  return dist_rec(*this, *impl_, abs, limit);
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
