// Operator synthesis: sizes, specs, primitives, canonical forms, enumeration and shape distance.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "synoros/synth.hpp"

namespace synoros::synth {
namespace {

Spec small_spec() {
  return parse_spec(
      "input: C_in, H; output: C_out, H; coef: k=3:2, g=2:2;"
      "bind: C_in=4, C_out=4, H=8; bind: C_in=8, C_out=8, H=6; cap: C_in=2, C_out=2, H=0");
}

TEST(SynthSizes, MonomialsAndLegality) {
  Spec s = conv2d_spec();
  Size cin = s.parse_size("C_in"), g = s.parse_size("g"), k = s.parse_size("k");
  EXPECT_EQ(s.str(cin / g), "C_in/g");
  EXPECT_EQ(s.eval(cin / g, 0), 32 / 8);
  EXPECT_EQ(s.eval(cin / g, 1), 64 / 8);
  EXPECT_TRUE(s.legal(cin / g));
  EXPECT_FALSE(s.legal(cin / k));              // 32/3 is not an integer
  EXPECT_FALSE(s.legal(Size{} / k));           // 1/k < 1
  EXPECT_FALSE(s.legal(s.parse_size("g/C_in")));  // primary in a denominator
  EXPECT_EQ((cin / g) * g, cin);
  EXPECT_EQ(s.parse_size("C_in*k^2/g"), cin * k * k / g);
  EXPECT_TRUE(s.parse_size("1").is_one());
  EXPECT_TRUE(k.pure_coefficient());
  EXPECT_FALSE(cin.pure_coefficient());
  Synthesizer syn(s);
  for (const Size& z : syn.candidate_sizes()) EXPECT_TRUE(s.legal(z)) << s.str(z);
}

TEST(SynthSizes, BadSpecsRaiseErrorsNamingTheCause) {
  auto msg = [](const std::string& text) {
    try {
      parse_spec(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("input: C, H; output: D, H; bind: C=4, H=8").find("unknown variable 'D'"), std::string::npos);
  EXPECT_NE(msg("input: C/k, H; output: C, H; coef: k=3; bind: C=4, H=8").find("not an integer >= 1"), std::string::npos);
  EXPECT_NE(msg("input: C, H; output: C, H; bind: C=4, H=8; bind: C=4").find("lacks a value for 'H'"), std::string::npos);
  EXPECT_NE(msg("input: C; output: C; bind: C=4; frob: 1").find("unknown clause"), std::string::npos);
  EXPECT_NE(msg("input: C; output: C").find("bind"), std::string::npos);
  EXPECT_NE(msg("input: C; output: C; bind: C=0").find("must be >= 1"), std::string::npos);
  EXPECT_NE(msg("input: C*; output: C; bind: C=4").find("ends with an operator"), std::string::npos);
  EXPECT_NE(msg("input: C; output: C; bind: C=4; cap: Q=1").find("unknown variable 'Q'"), std::string::npos);
  // Unreachable: no primitive sequence within the depth turns [C, H] into [C, W].
  Spec bad = parse_spec("input: C, H; output: C, W; bind: C=4, H=8, W=6; cap: H=0, W=0");
  Synthesizer syn(bad);
  EXPECT_THROW(syn.require_reachable(), Error);
}

TEST(SynthPrimitives, EveryBuiltOperatorIsValidByConstruction) {
  Options o;
  o.max_depth = 5;
  Synthesizer syn(conv2d_spec(), o);
  EnumResult r = enumerate(syn);
  ASSERT_GT(r.operators.size(), 50u);
  for (const Operator& op : r.operators) {
    // Exact shapes: every input dim's expression has the input's size symbolically.
    ASSERT_EQ(op.x_root.size(), syn.spec().input.size());
    for (size_t d = 0; d < op.x_root.size(); ++d) EXPECT_EQ(op.nodes[size_t(op.x_root[d])].size, syn.spec().input[d]);
    // Every iterator is read by x or by a weight (nothing summed without being read).
    std::set<int> read;
    for (const IxNode& n : op.nodes)
      if (n.iter >= 0) read.insert(n.iter);
    for (const auto& w : op.weights) read.insert(w.begin(), w.end());
    EXPECT_EQ(read.size(), op.iter_sizes.size()) << op.canonical;
    // No strided (discarding) index survives outside an unfold window.
    for (size_t i = 0; i < op.nodes.size(); ++i) {
      if (op.nodes[i].kind != Kind::Stride) continue;
      bool windowed = false;
      for (const IxNode& n : op.nodes) windowed = windowed || (n.kind == Kind::Unfold && n.b == int32_t(i));
      EXPECT_TRUE(windowed) << op.canonical;
    }
    // Replaying the recorded path (also through its text form) gives the same operator.
    Operator again = build_from_actions(syn, decode_actions(encode_actions(op.path)));
    EXPECT_EQ(again.canonical, op.canonical);
    EXPECT_EQ(canonical_form(again), op.canonical);
  }
  EXPECT_THROW(decode_actions("2 0,1"), Error);
  EXPECT_THROW(decode_actions("x"), Error);
  // A path that is not legal here is refused with the step named.
  std::vector<Action> bad = r.operators.back().path;
  std::reverse(bad.begin(), bad.end());
  EXPECT_THROW(build_from_actions(syn, bad), Error);
}

TEST(SynthCanonical, RulesOnlyRemoveSpellingsAndCountsAreConsistent) {
  Options o;
  o.max_depth = 4;
  Synthesizer canon(conv2d_spec(), o);
  o.canonical = false;
  Synthesizer raw(conv2d_spec(), o);
  EnumResult rc = enumerate(canon), rr = enumerate(raw);
  std::set<std::string> c_ops, r_ops;
  for (auto& op : rc.operators) EXPECT_TRUE(c_ops.insert(op.canonical).second) << "duplicate " << op.canonical;
  for (auto& op : rr.operators) r_ops.insert(op.canonical);
  // Every canonical operator is also in the unrestricted space.
  for (auto& c : c_ops) EXPECT_TRUE(r_ops.count(c)) << c;
  uint64_t cs = 0, rs = 0, cops = 0;
  for (size_t d = 0; d < rc.per_depth.size(); ++d) {
    cs += rc.per_depth[d].sequences;
    rs += rr.per_depth[d].sequences;
    cops += rc.per_depth[d].operators;
    EXPECT_LE(rc.per_depth[d].operators, rc.per_depth[d].sequences);
  }
  EXPECT_EQ(cops, c_ops.size());
  EXPECT_GT(rs, cs);          // the restrictions cut spellings...
  EXPECT_GE(r_ops.size(), c_ops.size());
  // Commuting spellings collapse: the two orders of the conv's two unfolds reach one state.
  Synthesizer syn(conv2d_spec());
  auto pick = [&](const State& st, ActType t, const std::function<bool(const Action&)>& f) {
    std::vector<Action> acts;
    syn.actions(st, acts);
    for (const Action& a : acts)
      if (a.type == t && f(a)) return a;
    ADD_FAILURE() << "no such action";
    return Action{};
  };
  const Spec& sp = syn.spec();
  Size k = sp.parse_size("k"), cin = sp.parse_size("C_in"), H = sp.parse_size("H"), W = sp.parse_size("W");
  State s = syn.root();
  for (Size z : {k, k, cin}) s = syn.apply(s, pick(s, ActType::Reduce, [&](const Action& a) { return a.size == z; }));
  s = syn.apply(s, pick(s, ActType::Weight, [&](const Action& a) { return a.mask == 0b1110010u && a.emask == 0b10u; }));
  auto unfold = [&](const State& st, Size main, int window_iter) {
    return syn.apply(st, pick(st, ActType::Unfold, [&](const Action& a) {
      return st.frontier[size_t(a.a)].info.size == main && st.frontier[size_t(a.b)].info.group == window_iter;
    }));
  };
  State hw = unfold(unfold(s, H, 4), W, 5), wh = unfold(unfold(s, W, 5), H, 4);
  EXPECT_EQ(syn.state_key(hw), syn.state_key(wh));
  ASSERT_TRUE(syn.complete(hw));
  EXPECT_EQ(syn.finalize(hw)[0].canonical, syn.finalize(wh)[0].canonical);
}

// The usage caps have one definition: every action the legality check lets through leaves the
// usage within the caps, and usage only grows.
void walk_usage(Synthesizer& syn, const State& s, int depth, int64_t& checked) {
  if (depth == 0) return;
  const Spec& sp = syn.spec();
  std::vector<Action> acts;
  syn.actions(s, acts);
  for (const Action& a : acts) {
    State c = syn.apply(s, a);
    for (size_t i = 0; i < size_t(kMaxVars); ++i) {
      int cap_p = i < sp.primary.size() ? sp.primary[i].cap : 0;
      int cap_c = i < sp.coefficient.size() ? sp.coefficient[i].cap : 0;
      ASSERT_LE(c.usage[i], cap_p) << sp.primary[i].name << " after " << act_name(a.type) << " at depth " << c.depth;
      ASSERT_LE(c.usage[kMaxVars + i], cap_c)
          << sp.coefficient[i].name << " after " << act_name(a.type) << " at depth " << c.depth;
      ASSERT_GE(c.usage[i], s.usage[i]);
      ASSERT_GE(c.usage[kMaxVars + i], s.usage[kMaxVars + i]);
    }
    ++checked;
    walk_usage(syn, c, depth - 1, checked);
  }
}

TEST(SynthUsage, TheLegalityCheckAndTheBookkeepingAgree) {
  for (bool coefficients : {false, true}) {
    Options o;
    o.count_weight_coefficients = coefficients;
    Synthesizer syn(conv2d_spec(false, 8), o);
    int64_t checked = 0;
    walk_usage(syn, syn.root(), 4, checked);
    EXPECT_GT(checked, 10000) << "too few states to mean anything";
  }
}

TEST(SynthUsage, SharingAGroupSpendsWhatSynoSpends) {
  // Reduce g, Reduce C_in/g, Share both: the reductions spend g twice and C_in once; the weight
  // spends the primary variables of its iterators (C_in once more), and with coefficients
  // counted g twice more, which the cap of 3 on g refuses.
  for (bool coefficients : {false, true}) {
    Options o;
    o.count_weight_coefficients = coefficients;
    Synthesizer syn(conv2d_spec(false, 8), o);
    const Spec& sp = syn.spec();
    Size g = sp.parse_size("g"), cin_g = sp.parse_size("C_in/g");
    const size_t ig = size_t(kMaxVars + sp.find_coefficient("g")), icin = size_t(sp.find_primary("C_in"));
    State s = syn.root();
    std::vector<Action> acts;
    for (Size z : {std::min(g, cin_g), std::max(g, cin_g)}) {
      syn.actions(s, acts);
      auto it = std::find_if(acts.begin(), acts.end(),
                             [&](const Action& a) { return a.type == ActType::Reduce && a.size == z; });
      ASSERT_NE(it, acts.end()) << sp.str(z);
      s = syn.apply(s, *it);
    }
    EXPECT_EQ(s.usage[ig], 2);
    EXPECT_EQ(s.usage[icin], 1);
    const uint32_t both = 1u << sp.output.size() | 1u << (sp.output.size() + 1);
    syn.actions(s, acts);
    auto share = std::find_if(acts.begin(), acts.end(),
                              [&](const Action& a) { return a.type == ActType::Weight && a.mask == both && !a.emask; });
    if (coefficients) {
      EXPECT_EQ(share, acts.end()) << "g would be spent 4 times against a cap of 3";
      continue;
    }
    ASSERT_NE(share, acts.end());
    State w = syn.apply(s, *share);
    EXPECT_EQ(w.usage[ig], 2);
    EXPECT_EQ(w.usage[icin], 2);
  }
}

TEST(SynthUsage, AMergeSpendsWhatItsDivisionIntroduces) {
  // C_out = (C_out/g) * g spends one g and no C_out (the primary variable is only split, as in
  // Syno's (|a| + |b| - |a+b|) / 2 per variable).
  Synthesizer syn(conv2d_spec(false, 8));
  const Spec& sp = syn.spec();
  State s = syn.root();
  std::vector<Action> acts;
  syn.actions(s, acts);
  auto red = std::find_if(acts.begin(), acts.end(), [&](const Action& a) {
    return a.type == ActType::Reduce && a.size == sp.parse_size("C_in");
  });
  ASSERT_NE(red, acts.end());
  s = syn.apply(s, *red);
  syn.actions(s, acts);  // the weight stage comes before the views
  auto share = std::find_if(acts.begin(), acts.end(), [&](const Action& a) { return a.type == ActType::Weight; });
  ASSERT_NE(share, acts.end());
  s = syn.apply(s, *share);
  syn.actions(s, acts);
  Size cout = sp.parse_size("C_out"), g = sp.parse_size("g");
  auto merge = std::find_if(acts.begin(), acts.end(), [&](const Action& a) {
    return a.type == ActType::Merge && a.mask == 0 && s.frontier[size_t(a.a)].info.size == cout && a.size == g;
  });
  ASSERT_NE(merge, acts.end());
  State m = syn.apply(s, *merge);
  EXPECT_EQ(m.usage[size_t(kMaxVars + sp.find_coefficient("g"))], s.usage[size_t(kMaxVars + sp.find_coefficient("g"))] + 1);
  EXPECT_EQ(m.usage[size_t(sp.find_primary("C_out"))], s.usage[size_t(sp.find_primary("C_out"))]);
}

// Brute force over concrete states (no abstraction, no pruning): the minimum number of further
// primitives to a complete state. The shape distance must equal it exactly.
int brute(Synthesizer& syn, const State& s, int rem, std::map<std::string, int>& memo, int& checked) {
  std::string key = syn.state_key(s) + char(rem);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  int best;
  if (syn.complete(s)) {
    best = 0;
  } else if (rem == 0) {
    best = 1;
  } else {
    best = rem + 1;
    std::vector<Action> acts;
    syn.actions(s, acts);
    for (const Action& a : acts) best = std::min(best, 1 + brute(syn, syn.apply(s, a), rem - 1, memo, checked));
  }
  EXPECT_EQ(syn.distance(s, rem), std::min(best, rem + 1)) << "depth " << s.depth;
  ++checked;
  memo[key] = best;
  return best;
}

TEST(SynthDistance, ExactAgainstBruteForce) {
  for (bool canonical : {true, false}) {
    Options o;
    o.max_depth = 5;
    o.canonical = canonical;
    Synthesizer syn(small_spec(), o);
    std::map<std::string, int> memo;
    int checked = 0;
    int d = brute(syn, syn.root(), o.max_depth, memo, checked);
    EXPECT_LE(d, o.max_depth);
    EXPECT_GT(checked, 1000);
    // Pruning by the distance never loses an operator: the pruned enumeration finds as many.
    EnumResult r = enumerate(syn, false);
    uint64_t ops = 0;
    for (auto& pd : r.per_depth) ops += pd.operators;
    EXPECT_GT(ops, 0u);
  }
  // Hand examples (the shape complexity cases of the Syno dossier).
  // [N,H,W] -> [N,H,W] with H usable three times: Reduce r<H, Share W[h,r] dropping h from x.
  Synthesizer dense(parse_spec("input: N, H, W; output: N, H, W; coef: k=3; bind: N=2, H=8, W=8; cap: H=3; fixed: N"));
  EXPECT_EQ(dense.distance(dense.root(), 8), 2);
  // With H usable once, the cheapest is Reduce r<k, Share W[r], Unfold(h, r).
  Synthesizer blur(parse_spec("input: N, H, W; output: N, H, W; coef: k=3; bind: N=2, H=8, W=8; fixed: N"));
  EXPECT_EQ(blur.distance(blur.root(), 8), 3);
}

TEST(SynthEnumerate, DeterministicAndPrunedEqualsUnpruned) {
  Options o;
  o.max_depth = 4;
  Synthesizer a(small_spec(), o), b(small_spec(), o);
  EnumResult ra = enumerate(a), rb = enumerate(b);
  ASSERT_EQ(ra.operators.size(), rb.operators.size());
  for (size_t i = 0; i < ra.operators.size(); ++i) EXPECT_EQ(ra.operators[i].canonical, rb.operators[i].canonical);
  // Unpruned exhaustive DFS finds exactly the same set of canonical operators.
  std::set<std::string> dfs;
  std::function<void(const State&)> rec = [&](const State& s) {
    if (a.complete(s))
      for (auto& op : a.finalize(s)) dfs.insert(op.canonical);
    if (s.depth == o.max_depth) return;
    std::vector<Action> acts;
    a.actions(s, acts);
    for (auto& act : acts) rec(a.apply(s, act));
  };
  rec(a.root());
  std::set<std::string> bfs;
  for (auto& op : ra.operators) bfs.insert(op.canonical);
  EXPECT_EQ(dfs, bfs);
}

}  // namespace
}  // namespace synoros::synth
