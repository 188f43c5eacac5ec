// Primitives: the search state, the legal actions (with the canonicalization rules) and their
// application, bottom-up from the output toward the input.
#include <algorithm>
#include <bit>
#include <cstring>

#include "synth/internal.hpp"

namespace synoros::synth {

const char* act_name(ActType t) {
  switch (t) {
    case ActType::Reduce: return "Reduce";
    case ActType::Weight: return "Share";
    case ActType::Merge: return "Merge";
    case ActType::Split: return "Split";
    case ActType::Shift: return "Shift";
    case ActType::Stride: return "Stride";
    case ActType::Unfold: return "Unfold";
  }
  return "?";
}

Usage size_usage(const Size& z, bool coefficients) {
  Usage u{};
  for (size_t i = 0; i < size_t(kMaxVars); ++i) {
    u[i] = int8_t(std::abs(z.p[i]));
    if (coefficients) u[kMaxVars + i] = int8_t(std::abs(z.c[i]));
  }
  return u;
}

bool within_caps(const Spec& spec, const Usage& usage, const Usage& more) {
  for (size_t i = 0; i < size_t(kMaxVars); ++i) {
    if (more[i] && (i >= spec.primary.size() || usage[i] + more[i] > spec.primary[i].cap)) return false;
    const size_t c = kMaxVars + i;
    if (more[c] && (i >= spec.coefficient.size() || usage[c] + more[c] > spec.coefficient[i].cap)) return false;
  }
  return true;
}

void add_usage(Usage& usage, const Usage& more) {
  for (size_t i = 0; i < usage.size(); ++i) usage[i] = int8_t(usage[i] + more[i]);
}

Usage action_usage(const Spec& sp, const Options& o, const State& s, const Action& a) {
  const int n_out = int(sp.output.size());
  switch (a.type) {
    case ActType::Reduce:
    case ActType::Stride: return size_usage(a.size);
    case ActType::Weight: {  // each shared iterator on its own: exponents do not cancel across them
      Usage u{};
      for (int it = 0; it < iter_count(sp, s); ++it)
        if (a.mask >> it & 1)
          add_usage(u, size_usage(it < n_out ? sp.output[size_t(it)] : s.reduces[size_t(it - n_out)],
                                  o.count_weight_coefficients));
      return u;
    }
    case ActType::Merge: {  // x^(a+b) into x^a and x^b spends (|a| + |b| - |a+b|) / 2 of x
      const Size& whole = s.frontier[size_t(a.a)].info.size;
      const Size major = whole / a.size;
      Usage u{};
      for (size_t i = 0; i < size_t(kMaxVars); ++i) {
        u[i] = int8_t((std::abs(major.p[i]) + std::abs(a.size.p[i]) - std::abs(whole.p[i])) / 2);
        u[kMaxVars + i] = int8_t((std::abs(major.c[i]) + std::abs(a.size.c[i]) - std::abs(whole.c[i])) / 2);
      }
      return u;
    }
    default: return Usage{};
  }
}
std::string size_key(const Size& z) {
  std::string s(2 * kMaxVars, '\0');
  std::memcpy(s.data(), z.p.data(), kMaxVars);
  std::memcpy(s.data() + kMaxVars, z.c.data(), kMaxVars);
  return s;
}
int iter_count(const Spec& spec, const State& s) { return int(spec.output.size() + s.reduces.size()); }

int32_t Synthesizer::Impl::intern(const ExprNode& n0) {
  ExprNode n = n0;
  uint64_t h = hmix(uint64_t(n.kind) + 1, uint64_t(uint32_t(n.iter)));
  h = hmix(h, n.a >= 0 ? arena[size_t(n.a)].hash : 0x1234);
  h = hmix(h, n.b >= 0 ? arena[size_t(n.b)].hash : 0x4321);
  h = hmix(h, n.size.hash());
  h = hmix(h, n.param.hash());
  n.hash = h;
  auto& bucket = by_hash[h];
  for (int32_t id : bucket) {  // structural equality confirms every hash match
    const ExprNode& m = arena[size_t(id)];
    if (m.kind == n.kind && m.a == n.a && m.b == n.b && m.iter == n.iter && m.size == n.size && m.param == n.param)
      return id;
  }
  arena.push_back(n);
  bucket.push_back(int32_t(arena.size() - 1));
  return int32_t(arena.size() - 1);
}

namespace {
void gen_candidates(const Spec& spec, const Options& opt, std::vector<Size>& out) {
  // Every monomial with at most max_vars_in_size variables within the caps, legal and not 1.
  std::vector<std::pair<int, int>> vars;  // (slot, cap): slot < kMaxVars primary else coef
  for (size_t i = 0; i < spec.primary.size(); ++i) vars.push_back({int(i), spec.primary[i].cap});
  for (size_t i = 0; i < spec.coefficient.size(); ++i) vars.push_back({kMaxVars + int(i), spec.coefficient[i].cap});
  Size z;
  std::function<void(size_t, int)> rec = [&](size_t v, int used) {
    if (v == vars.size()) {
      if (z.is_one()) return;
      bool negcoef_only = z.pure_coefficient();
      bool has_neg = false;
      for (int8_t e : z.c)
        if (e < 0) has_neg = true;
      if (negcoef_only && has_neg) return;  // 1/k: an illegal coefficient
      if (spec.legal(z)) out.push_back(z);
      return;
    }
    auto [slot, cap] = vars[v];
    int8_t& e = slot < kMaxVars ? z.p[size_t(slot)] : z.c[size_t(slot - kMaxVars)];
    int hi = std::min(cap, opt.max_exponent);
    int lo = slot < kMaxVars ? 0 : -hi;
    for (int x = lo; x <= hi; ++x) {
      if (x != 0 && used >= opt.max_vars_in_size) continue;
      e = int8_t(x);
      rec(v + 1, used + (x != 0));
    }
    e = 0;
  };
  rec(0, 0);
  std::sort(out.begin(), out.end());
}

bool is_iter(Kind k) { return k == Kind::Out || k == Kind::Red; }
}  // namespace

Synthesizer::Synthesizer(Spec spec, Options opt) : spec_(std::move(spec)), opt_(opt), impl_(std::make_unique<Impl>()) {
  spec_.validate();
  if (opt_.max_depth < 1 || opt_.max_depth > 30) throw Error("synth: max_depth must be in [1, 30]");
  if (opt_.max_reductions < 0 || opt_.max_reductions > 8) throw Error("synth: max_reductions must be in [0, 8]");
  if (opt_.max_weights < 0 || opt_.max_weights > 4) throw Error("synth: max_weights must be in [0, 4]");
  if (spec_.output.size() + size_t(opt_.max_reductions) > 30) throw Error("synth: too many iterators");
  gen_candidates(spec_, opt_, cands_);
  for (size_t i = 0; i < spec_.input.size(); ++i) {
    bool fx = false;
    for (auto [fo, fi] : spec_.fixed)
      if (fi == int(i)) fx = true;
    if (!fx) impl_->want.push_back(spec_.input[i]);
  }
  std::sort(impl_->want.begin(), impl_->want.end());
}
Synthesizer::~Synthesizer() = default;
size_t Synthesizer::arena_size() const { return impl_->arena.size(); }
size_t Synthesizer::distance_memo_size() const { return impl_->dist_memo.size(); }

namespace {
bool fixed_out(const Spec& spec, int o) {
  for (auto [fo, fi] : spec.fixed)
    if (fo == o) return true;
  return false;
}
void sort_frontier(State& s, const std::vector<ExprNode>& arena) {
  if (s.abstract) {
    std::sort(s.frontier.begin(), s.frontier.end(), [](const Dim& x, const Dim& y) { return x.info < y.info; });
  } else {
    std::sort(s.frontier.begin(), s.frontier.end(), [&](const Dim& x, const Dim& y) {
      if (x.expr < 0 || y.expr < 0) return x.info < y.info;
      uint64_t hx = arena[size_t(x.expr)].hash, hy = arena[size_t(y.expr)].hash;
      if (hx != hy) return hx < hy;
      if (x.info.flags != y.info.flags) return x.info.flags < y.info.flags;
      return x.expr < y.expr;
    });
  }
}
}  // namespace

State Synthesizer::root() const {
  State s;
  for (size_t o = 0; o < spec_.output.size(); ++o) {
    if (fixed_out(spec_, int(o))) continue;
    ExprNode n;
    n.kind = Kind::Out;
    n.iter = int32_t(o);
    n.size = spec_.output[o];
    Dim d;
    d.expr = impl_->intern(n);
    d.info.size = n.size;
    d.info.kind = Kind::Out;
    d.info.group = int32_t(o);
    s.frontier.push_back(d);
  }
  sort_frontier(s, impl_->arena);
  return s;
}

namespace {
// Weight configurations that are only reparametrizations of fewer weights are not canonical.
bool weights_valid(const Spec& spec, const Options& opt, const std::vector<Size>& cands, const State& s) {
  if (int(s.weights.size()) < opt.min_weights) return false;
  if (!opt.canonical) return true;
  const int n_out = int(spec.output.size()), n_it = iter_count(spec, s);
  auto readers = [&](int it) {
    uint32_t r = 0;
    for (size_t w = 0; w < s.weights.size(); ++w) r |= uint32_t(s.weights[w] >> it & 1) << w;
    return r;
  };
  for (int it = n_out; it < n_it; ++it) {
    if (!(s.expanded >> it & 1)) continue;
    const uint32_t r = readers(it);
    if (std::popcount(r) < 2) return false;  // Σ_r W[..r..] alone is just a smaller weight
    // Two reductions only weights see, read by the same weights, are one reduction of the
    // product size: Σ_{a<A, b<B} W1[..a,b..] W2[..a,b..] = Σ_{r<AB} W1[..r..] W2[..r..], spelled
    // that way whenever AB is a size the generator makes (fewer primitives, no more usage), and
    // otherwise with the smallest factor that leaves a size the generator makes (A = k, B = g*s
    // rather than g, k*s: the same usage).
    auto made = [&](const Size& z) { return std::find(cands.begin(), cands.end(), z) != cands.end(); };
    for (int jt = it + 1; jt < n_it; ++jt)
      if ((s.expanded >> jt & 1) && readers(jt) == r) {
        const Size& a = s.reduces[size_t(it - n_out)];
        const Size& b = s.reduces[size_t(jt - n_out)];
        const Size ab = a * b;
        if (made(ab)) return false;
        const Size& lo = b < a ? b : a;
        for (const Size& c : cands)
          if (c < lo && made(ab / c)) return false;
      }
  }
  return true;
}
}  // namespace

void Synthesizer::actions(const State& s, std::vector<Action>& out) const {
  out.clear();
  const Spec& sp = spec_;
  const bool canon = opt_.canonical;
  const int n_out = int(sp.output.size());
  // Reductions (a multiset: non-decreasing sizes when canonical).
  if (s.stage == 0 && int(s.reduces.size()) < opt_.max_reductions) {
    for (const Size& z : cands_) {
      if (canon && !s.reduces.empty() && z < s.reduces.back()) continue;
      Action a;
      a.type = ActType::Reduce;
      a.size = z;
      if (within_caps(sp, s.usage, action_usage(sp, opt_, s, a))) out.push_back(a);
    }
  }
  // Weights: each a set of iterators, at least one of them reduced; iterators dropped from the
  // data side (Expand + Share) are chosen with the first weight that holds them.
  if (s.stage <= 1 && int(s.weights.size()) < opt_.max_weights) {
    int n_it = iter_count(sp, s);
    uint32_t avail = 0, red = 0, earlier = 0;
    for (int it = 0; it < n_it; ++it)
      if (it >= n_out || !fixed_out(sp, it)) avail |= 1u << it;
    for (int it = n_out; it < n_it; ++it) red |= 1u << it;
    for (uint32_t m : s.weights) earlier |= m;
    for (uint32_t mask = 1; mask < (1u << n_it); ++mask) {
      if ((mask & ~avail) || !(mask & red) || std::popcount(mask) > opt_.max_weight_rank) continue;
      if (canon) {
        if (!s.weights.empty() && mask <= s.weights.back()) continue;
        bool nested = false;
        for (uint32_t m : s.weights)
          if ((m & mask) == m || (m & mask) == mask) nested = true;
        if (nested) continue;
      }
      Action share;
      share.type = ActType::Weight;
      share.mask = mask;
      if (!within_caps(sp, s.usage, action_usage(sp, opt_, s, share))) continue;
      uint32_t can_expand = mask & ~s.expanded & (canon ? ~earlier : ~0u);
      // Enumerate submasks of can_expand.
      uint32_t sub = 0;
      while (true) {
        Action a;
        a.type = ActType::Weight;
        a.mask = mask;
        a.emask = sub;
        out.push_back(a);
        if (sub == can_expand) break;
        sub = (sub - can_expand) & can_expand;
      }
    }
  }
  // Views.
  if (s.stage < 2 && !weights_valid(sp, opt_, cands_, s)) return;
  const auto& F = s.frontier;
  const size_t n = F.size();
  for (size_t i = 0; i < n; ++i) {
    const DimInfo& d = F[i].info;
    const bool disc = d.kind == Kind::Stride;
    if (disc) continue;  // a discarding dim may only become an Unfold window
    // Merge: the dim is split into major (size / B) and minor (B) coordinates.
    if (!(canon && (d.kind == Kind::Split || d.kind == Kind::Red || d.kind == Kind::Div))) {
      for (const Size& B : cands_) {
        if (B == d.size) continue;
        Size q = d.size / B;
        if (q.is_one() || !sp.legal(q)) continue;
        Action merge;
        merge.type = ActType::Merge;
        merge.a = int16_t(i);
        merge.size = B;
        if (!within_caps(sp, s.usage, action_usage(sp, opt_, s, merge))) continue;
        // mask 0: plain Merge; 1 / 2: Merge whose major / minor half is dropped from the data
        // (Expand + Merge, i.e. tile / repeat).
        for (uint32_t drop = 0; drop < 3; ++drop) {
          // (e mod A) mod B is e mod B (B divides A): a remainder whose quotient was dropped
          // keeps no quotient of its own either; one merge of e spells it.
          if (canon && drop == 1 && d.kind == Kind::Mod && (d.flags & 2)) continue;
          Action a;
          a.type = ActType::Merge;
          a.a = int16_t(i);
          a.size = B;
          a.mask = drop;
          out.push_back(a);
        }
      }
    }
    // (e mod B + 1) mod B is ((e + 1) mod A) mod B: a remainder whose quotient was dropped is
    // shifted by shifting e first, unless e is a shift already (flag 8; shifts do not stack).
    const bool lone_remainder = d.kind == Kind::Mod && (d.flags & 2) && !(d.flags & 8);
    if (opt_.allow_shift && d.kind != Kind::Shift && !(canon && (d.kind == Kind::Red || lone_remainder))) {
      Action a;
      a.type = ActType::Shift;
      a.a = int16_t(i);
      out.push_back(a);
    }
    if (opt_.allow_stride && d.size.pure_coefficient()) {
      for (const Size& f : cands_) {
        if (!f.pure_coefficient()) continue;
        Size r = d.size * f;
        if (sp.eval(r, 0) > opt_.max_window) continue;
        Action a;
        a.type = ActType::Stride;
        a.a = int16_t(i);
        a.size = f;
        if (within_caps(sp, s.usage, action_usage(sp, opt_, s, a))) out.push_back(a);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const DimInfo& x = F[i].info;
    if (x.kind == Kind::Stride) continue;
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const DimInfo& y = F[j].info;
      // Split: x major, y minor -> x * |y| + y.
      if (y.kind != Kind::Stride) {
        bool ok = true;
        if (canon && x.kind == Kind::Split) ok = false;  // (a*B+b)*C+c == a*BC + (b*C+c)
        if (canon && x.kind == Kind::Div && y.kind == Kind::Mod && x.group == y.group) ok = false;  // undoes a Merge
        // Two reductions read by the same weights, combined: one reduction of the product size.
        if (canon && x.kind == Kind::Red && y.kind == Kind::Red && (x.flags >> 4) == (y.flags >> 4)) ok = false;
        if (ok) {
          Action a;
          a.type = ActType::Split;
          a.a = int16_t(i);
          a.b = int16_t(j);
          out.push_back(a);
        }
      }
      // Unfold: x main, y window (a pure coefficient size; not a bare unshared reduction, which
      // would be pooling); the main dim is not a reduction (a window slid over a summed index).
      if (x.kind != Kind::Red && y.size.pure_coefficient() && !(y.kind == Kind::Red && !(y.flags & 1)) &&
          !(y.flags & 4)) {
        int64_t K = sp.eval(y.size, 0);
        if (K < 2 || K > opt_.max_window) continue;
        bool ok = true;
        for (size_t b = 0; b < sp.bindings.size() && ok; ++b)
          if (double(sp.eval(x.size, b)) < opt_.min_unfold_ratio * double(K)) ok = false;
        if (ok && canon && x.kind == Kind::Unfold && y.size < x.param) ok = false;  // windows ordered
        if (!ok) continue;
        Action a;
        a.type = ActType::Unfold;
        a.a = int16_t(i);
        a.b = int16_t(j);
        out.push_back(a);
      }
    }
  }
}

namespace {
State apply_impl(const Spec& sp, const Options& o, State s, const Action& a, Synthesizer::Impl* impl) {
  // impl == nullptr: rule information only (no expressions).
  auto mk = [&](Kind k, int32_t ea, int32_t eb, int32_t iter, Size size, Size param) -> int32_t {
    if (!impl || (ea < 0 && (k != Kind::Out && k != Kind::Red))) return -1;
    if (k == Kind::Split || k == Kind::Unfold)
      if (eb < 0) return -1;
    ExprNode nd;
    nd.kind = k;
    nd.a = ea;
    nd.b = eb;
    nd.iter = iter;
    nd.size = size;
    nd.param = param;
    return impl->intern(nd);
  };
  if (!impl) {
    for (Dim& d : s.frontier) d.expr = -1;
  }
  s.depth += 1;
  add_usage(s.usage, action_usage(sp, o, s, a));
  const int n_out = int(sp.output.size());
  auto& F = s.frontier;
  switch (a.type) {
    case ActType::Reduce: {
      int id = n_out + int(s.reduces.size());
      s.reduces.push_back(a.size);
      Dim d;
      d.info.size = a.size;
      d.info.kind = Kind::Red;
      d.info.group = id;
      d.expr = mk(Kind::Red, -1, -1, id, a.size, Size{});
      F.push_back(d);
      break;
    }
    case ActType::Weight: {
      s.stage = 1;
      s.weights.push_back(a.mask);
      s.expanded |= a.emask;
      std::vector<Dim> nf;
      for (Dim& d : F) {
        if (is_iter(d.info.kind) && d.info.group >= 0 && (a.mask >> d.info.group & 1)) {
          d.info.flags |= uint8_t(1 | 1u << (4 + s.weights.size() - 1));  // shared; which weights
          if (a.emask >> d.info.group & 1) continue;
        }
        nf.push_back(d);
      }
      F = std::move(nf);
      break;
    }
    default: {
      if (s.stage < 2 && !s.abstract) {
        // Entering the view stage: iterator identities no longer matter to the rules.
      }
      s.stage = 2;
      Dim x = F[size_t(a.a)];
      Dim y = a.b >= 0 ? F[size_t(a.b)] : Dim{};
      std::vector<Dim> nf;
      nf.reserve(F.size() + 2);
      for (size_t i = 0; i < F.size(); ++i)
        if (int(i) != a.a && int(i) != a.b) nf.push_back(F[i]);
      auto push = [&](Kind k, Size size, Size param, int32_t group, int32_t expr) {
        Dim d;
        d.info.size = size;
        d.info.param = param;
        d.info.kind = k;
        d.info.group = group;
        d.expr = expr;
        nf.push_back(d);
      };
      switch (a.type) {
        case ActType::Merge: {
          int32_t g = s.next_group++;
          if (a.mask != 1)
            push(Kind::Div, x.info.size / a.size, a.size, g, mk(Kind::Div, x.expr, -1, -1, x.info.size / a.size, a.size));
          if (a.mask != 2) push(Kind::Mod, a.size, a.size, g, mk(Kind::Mod, x.expr, -1, -1, a.size, a.size));
          if (a.mask) nf.back().info.flags |= 2;
          if (a.mask == 1 && x.info.kind == Kind::Shift) nf.back().info.flags |= 8;
          break;
        }
        case ActType::Split: {
          Size z = x.info.size * y.info.size;
          push(Kind::Split, z, y.info.size, -1, mk(Kind::Split, x.expr, y.expr, -1, z, y.info.size));
          break;
        }
        case ActType::Shift:
          push(Kind::Shift, x.info.size, Size{}, -1, mk(Kind::Shift, x.expr, -1, -1, x.info.size, Size{}));
          break;
        case ActType::Stride: {
          Size z = x.info.size * a.size;
          push(Kind::Stride, z, a.size, -1, mk(Kind::Stride, x.expr, -1, -1, z, a.size));
          if (x.info.kind == Kind::Red && !(x.info.flags & 1)) nf.back().info.flags |= 4;  // a strided pooling index
          break;
        }
        case ActType::Unfold:
          push(Kind::Unfold, x.info.size, y.info.size, -1, mk(Kind::Unfold, x.expr, y.expr, -1, x.info.size, y.info.size));
          break;
        default: break;
      }
      F = std::move(nf);
    }
  }
  return s;
}
}  // namespace

State apply_rules_only(const Spec& sp, const Options& o, const State& s, const Action& a) {
  return apply_impl(sp, o, s, a, nullptr);
}

State Synthesizer::apply(const State& s, const Action& a) {
  State r = apply_impl(spec_, opt_, s, a, s.abstract ? nullptr : impl_.get());
  if (r.abstract) return abstract(r);
  sort_frontier(r, impl_->arena);
  return r;
}

State Synthesizer::abstract(const State& s0) const {
  State s = s0;
  s.abstract = true;
  for (Dim& d : s.frontier) d.expr = -1;
  if (s.stage == 2) {
    s.weights.assign(s.weights.size(), 0);  // only the count matters from here on
    s.expanded = 0;
    s.reduces.clear();
    std::vector<int32_t> old;
    old.reserve(s.frontier.size());
    for (Dim& d : s.frontier) {
      if (is_iter(d.info.kind)) d.info.group = -1;
      if (d.info.kind == Kind::Div || d.info.kind == Kind::Mod) old.push_back(d.info.group), d.info.group = -1;
    }
    if (old.empty()) {  // no merge halves: nothing to renumber
      std::sort(s.frontier.begin(), s.frontier.end(), [](const Dim& x, const Dim& y) { return x.info < y.info; });
      s.next_group = 0;
      s.depth = 0;
      return s;
    }
    // Renumber merge groups in order of first appearance after a group-blind sort.
    std::vector<std::pair<DimInfo, int32_t>> tmp;
    tmp.reserve(s.frontier.size());
    size_t k = 0;
    for (Dim& d : s.frontier) {
      int32_t g = (d.info.kind == Kind::Div || d.info.kind == Kind::Mod) ? old[k++] : -1;
      tmp.push_back({d.info, g});
    }
    std::sort(tmp.begin(), tmp.end(), [](auto& x, auto& y) { return x.first < y.first; });
    std::vector<std::pair<int32_t, int32_t>> ren;
    for (auto& [info, g] : tmp) {
      if (g < 0) continue;
      int32_t ng = -1;
      for (auto& [o, nn] : ren)
        if (o == g) ng = nn;
      if (ng < 0) ng = int32_t(ren.size()), ren.push_back({g, ng});
      info.group = ng;
    }
    s.frontier.clear();
    for (auto& [info, g] : tmp) {
      Dim d;
      d.info = info;
      s.frontier.push_back(d);
    }
    s.next_group = int32_t(ren.size());
  }
  std::sort(s.frontier.begin(), s.frontier.end(), [](const Dim& x, const Dim& y) { return x.info < y.info; });
  s.depth = 0;
  return s;
}

std::string Synthesizer::state_key(const State& s) const {
  std::string k;
  k.reserve(64 + 48 * s.frontier.size());
  auto put = [&](const void* p, size_t n) { k.append(static_cast<const char*>(p), n); };
  put(&s.stage, 1);
  put(&s.depth, sizeof s.depth);
  uint8_t nr = uint8_t(s.reduces.size()), nw = uint8_t(s.weights.size());
  put(&nr, 1);
  for (const Size& z : s.reduces) k += size_key(z);
  put(&nw, 1);
  for (uint32_t m : s.weights) put(&m, 4);
  put(&s.expanded, 4);
  put(s.usage.data(), s.usage.size());
  for (const Dim& d : s.frontier) {
    if (d.expr >= 0) {
      put(&d.expr, 4);
    } else {
      k += size_key(d.info.size);
      k += size_key(d.info.param);
      put(&d.info.group, 4);
    }
    uint8_t kk = uint8_t(d.info.kind);
    put(&kk, 1);
    put(&d.info.flags, 1);
  }
  return k;
}

uint64_t Synthesizer::state_hash(const State& s) const {
  uint64_t h = hmix(s.stage, uint64_t(s.depth));
  for (const Size& z : s.reduces) h = hmix(h, z.hash());
  for (uint32_t m : s.weights) h = hmix(h, m);
  h = hmix(h, s.expanded);
  for (int8_t u : s.usage) h = hmix(h, uint64_t(uint8_t(u)));
  for (const Dim& d : s.frontier) {
    h = hmix(h, d.expr >= 0 ? impl_->arena[size_t(d.expr)].hash : d.info.size.hash());
    h = hmix(h, uint64_t(d.info.flags) << 8 | uint64_t(d.info.kind));
  }
  return h;
}

bool Synthesizer::complete(const State& s) const {
  const std::vector<Size>& want = impl_->want;
  if (want.size() != s.frontier.size()) return false;
  if (!weights_valid(spec_, opt_, cands_, s)) return false;
  thread_local std::vector<Size> have;  // reused: this runs for every leaf of the distance search
  have.clear();
  for (const Dim& d : s.frontier) {
    if (d.info.kind == Kind::Stride) return false;
    have.push_back(d.info.size);
  }
  std::sort(have.begin(), have.end());
  return want == have;
}

void Synthesizer::pruned_actions(const State& s, std::vector<Action>& out) {
  std::vector<Action> all;
  actions(s, all);
  out.clear();
  for (const Action& a : all) {
    State c = apply_impl(spec_, opt_, s, a, nullptr);
    int remaining = opt_.max_depth - c.depth;
    if (remaining < 0) continue;
    if (within(c, remaining)) out.push_back(a);
  }
}

std::string Synthesizer::expr_str(int32_t e) const {
  const ExprNode& n = impl_->arena.at(size_t(e));
  switch (n.kind) {
    case Kind::Out: return "o" + std::to_string(n.iter);
    case Kind::Red: return "r" + std::to_string(n.iter);
    case Kind::Split: return "(" + expr_str(n.a) + ")*" + spec_.str(n.param) + "+" + expr_str(n.b);
    case Kind::Div: return "(" + expr_str(n.a) + ")/" + spec_.str(n.param);
    case Kind::Mod: return "(" + expr_str(n.a) + ")%" + spec_.str(n.param);
    case Kind::Shift: return "shift(" + expr_str(n.a) + ")";
    case Kind::Stride: return spec_.str(n.param) + "*(" + expr_str(n.a) + ")";
    case Kind::Unfold: return "unfold(" + expr_str(n.a) + "," + expr_str(n.b) + ")";
  }
  return "?";
}

}  // namespace synoros::synth
