// The canonicalization-gap finder (operators grouped by the function they compute, up to a
// re-layout of their weights) and the rules that close the gaps it found.
#include <gtest/gtest.h>

#include <algorithm>

#include "synoros/synth.hpp"

namespace synoros::synth {
namespace {

// Coefficient values and bindings chosen so that no two different sizes agree at both bindings
// (k, g, s and their products are all distinct): equal outputs then mean equal functions.
Spec tiny_conv() {
  return parse_spec(
      "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:2, g=2:3, s=5:2;"
      "bind: N=1, C_in=4, C_out=6, H=10, W=15; bind: N=1, C_in=6, C_out=4, H=15, W=10;"
      "cap: C_in=2, C_out=4, H=0, W=0; fixed: N");
}

// The conv2d spec's coefficients (s divides g) with small, unequal channel counts.
Spec small_conv() {
  return parse_spec(
      "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:2, g=8:3, s=2:2;"
      "bind: N=1, C_in=16, C_out=32, H=8, W=12; bind: N=1, C_in=32, C_out=16, H=12, W=8;"
      "cap: C_in=2, C_out=4, H=0, W=0; fixed: N");
}

size_t group_of(const std::vector<std::vector<size_t>>& groups, size_t i) {
  for (size_t g = 0; g < groups.size(); ++g)
    if (std::find(groups[g].begin(), groups[g].end(), i) != groups[g].end()) return g;
  return SIZE_MAX;
}

TEST(SynthGaps, ASpellingWithTheWeightsSwappedIsTheSameFunctionAndDistinctOperatorsAreNot) {
  Options o;
  o.max_depth = 4;
  Synthesizer syn(tiny_conv(), o);
  std::vector<Operator> ops = enumerate(syn).operators;
  const size_t n = ops.size();
  ASSERT_GT(n, 40u);
  // Every canonical operator to depth 4 computes its own function: the finder tells them apart.
  EXPECT_EQ(equal_functions(syn.spec(), ops).size(), n);
  std::vector<size_t> twin_of;
  for (size_t i = 0; i < n; ++i)
    if (ops[i].weights.size() >= 2) {
      Operator t = ops[i];
      std::reverse(t.weights.begin(), t.weights.end());
      ops.push_back(t);
      twin_of.push_back(i);
    }
  ASSERT_GE(twin_of.size(), 5u);
  const auto groups = equal_functions(syn.spec(), ops);
  EXPECT_EQ(groups.size(), n);
  for (size_t j = 0; j < twin_of.size(); ++j)
    EXPECT_EQ(group_of(groups, n + j), group_of(groups, twin_of[j])) << ops[twin_of[j]].canonical;
}

// Two spellings of one function: the finder groups them, the rules keep only the first.
void expect_one_spelling_kept(const Spec& spec, const std::string& kept,
                              const std::string& dropped) {
  Options raw;
  raw.max_depth = 6;
  raw.canonical = false;
  Synthesizer rsyn(spec, raw);
  const std::vector<Operator> both = {build_from_actions(rsyn, decode_actions(kept)),
                                      build_from_actions(rsyn, decode_actions(dropped))};
  EXPECT_NE(both[0].canonical, both[1].canonical);
  EXPECT_EQ(equal_functions(rsyn.spec(), both).size(), 1u)
      << formula(rsyn.spec(), both[0]) << " vs " << formula(rsyn.spec(), both[1]);
  Options canon;
  canon.max_depth = 6;
  Synthesizer syn(spec, canon);
  EXPECT_EQ(build_from_actions(syn, decode_actions(kept)).canonical, both[0].canonical);
  EXPECT_THROW(build_from_actions(syn, decode_actions(dropped)), Error)
      << formula(syn.spec(), both[1]);
}

TEST(SynthGaps, ReductionsOnlyWeightsReadAreOneReductionOfTheProductSize) {
  // Σ_{r<k*g} W1[c_out,r] W2[r,c_in]  against  Σ_{a<k, b<g} W1[c_out,a,b] W2[a,b,c_in].
  expect_one_spelling_kept(
      tiny_conv(),
      "4 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,1,0,0,0,0,0,0 0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "1,-1,-1,18,18,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,48,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
      "5 0,-1,-1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0 0,-1,-1,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0 "
      "0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,50,50,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "1,-1,-1,112,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0");
}

TEST(SynthGaps, AShiftedRemainderIsTheRemainderOfAShift) {
  // x[.., h + ((c_out + 1) mod C_out) mod g, ..]  against  x[.., h + (c_out mod g + 1) mod g, ..].
  expect_one_spelling_kept(
      tiny_conv(),
      "5 0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,16,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "4,2,-1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 2,3,-1,1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0 "
      "6,0,3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
      "5 0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,16,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "2,2,-1,1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0 4,3,-1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "6,0,3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0");
}

TEST(SynthGaps, ARemainderOfARemainderIsOneRemainder) {
  // x[.., h + c_out mod s, ..]  against  x[.., h + (c_out mod g) mod s, ..].
  expect_one_spelling_kept(
      small_conv(),
      "4 0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,16,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "2,2,-1,1,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0 6,0,3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
      "5 0,-1,-1,0,0,0,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0 1,-1,-1,16,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0 "
      "2,2,-1,1,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0,0 2,3,-1,1,0,0,0,0,0,0,0,0,0,0,0,1,0,0,0,0,0 "
      "6,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0");
}

TEST(SynthGaps, TheCanonicalOperatorsToDepthFiveLeaveFewSpellingsOfOneFunction) {
  Options o;
  o.max_depth = 5;
  Synthesizer syn(small_conv(), o);
  const std::vector<Operator> ops = enumerate(syn).operators;
  const auto groups = equal_functions(syn.spec(), ops);
  // 513 canonical operators with 91 redundant spellings before the three rules above; 422
  // functions either way. What is left (docs/synthesis.md): shifts a weight absorbs, and
  // weight-only reductions whose products agree only through the coefficients' values.
  EXPECT_EQ(groups.size(), 422u);
  EXPECT_LE(ops.size() - groups.size(), 21u);
}

}  // namespace
}  // namespace synoros::synth
