// Known operator families: built by hand in a spec's variables, found by the search, and used to
// name a found operator known (by canonical form or by the function it computes) or new.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "synoros/synth.hpp"

namespace synoros::synth {
namespace {

// Small bindings, so that evaluating operators is quick; the coefficients differ in value, so no
// two families compute the same function (with g = s, g groups and s groups would).
Spec small_spec() {
  return parse_spec(
      "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3, g=2, s=4; bind: N=1, C_in=4, C_out=6, H=9, W=8;"
      "fixed: N");
}

std::map<std::string, const Operator*> by_name(const std::vector<KnownFamily>& fams) {
  std::map<std::string, const Operator*> m;
  for (const KnownFamily& f : fams) m[f.name] = &f.op;
  return m;
}

TEST(SynthKnown, TheFamiliesOfTheConvolutionSpecs) {
  std::vector<KnownFamily> two = known_families(conv2d_spec());
  std::map<std::string, const Operator*> m = by_name(two);
  for (const char* name : {"pointwise", "shifted pointwise (H)", "shifted pointwise (W)", "grouped pointwise (g groups)",
                           "low-rank pointwise (rank g)", "low-rank pointwise (rank k)", "standard kxk", "separable kx1",
                           "separable 1xk", "grouped kxk (g groups)", "low-rank kxk (rank g)", "dilated kxk"})
    EXPECT_TRUE(m.count(name)) << name;
  EXPECT_FALSE(m.count("depthwise kxk"));          // C_in and C_out are two sizes
  EXPECT_FALSE(m.count("grouped pointwise (k groups)"));  // C_in / 3 is not an integer there
  EXPECT_TRUE(by_name(known_families(conv2d_spec(true))).count("depthwise kxk"));
  // Every family is a different function (the canonical forms differ, and so do the functions).
  Spec sp = small_spec();
  std::vector<KnownFamily> fams = known_families(sp);
  std::vector<Operator> ops;
  for (const KnownFamily& f : fams) ops.push_back(f.op);
  EXPECT_EQ(equal_functions(sp, ops).size(), fams.size());
  EXPECT_FALSE(by_name(fams).count("grouped pointwise (s groups)"));  // 6 output channels in groups of 1.5
  // A spec of another layout has none.
  EXPECT_TRUE(known_families(parse_spec("input: N, C; output: N, D; bind: N=2, C=4, D=3; fixed: N")).empty());
}

TEST(SynthKnown, TheSearchFindsThemAndTheyAreNamed) {
  Spec sp = conv2d_spec();
  Options o;
  o.max_depth = 6;
  Synthesizer syn(sp, o);
  EnumResult r = enumerate(syn, true);
  std::vector<KnownFamily> fams = known_families(sp);
  std::map<std::string, std::string> canonical;
  for (const KnownFamily& f : fams) canonical[f.op.canonical] = f.name;
  std::map<std::string, int> found;
  std::vector<std::string> names = known_family_names(sp, {}, fams);
  EXPECT_TRUE(names.empty());
  for (const Operator& op : r.operators)
    if (auto it = canonical.find(op.canonical); it != canonical.end()) ++found[it->second];
  for (const char* name : {"pointwise", "standard kxk", "separable kx1", "separable 1xk", "shifted pointwise (H)",
                           "low-rank pointwise (rank g)", "low-rank pointwise (rank k)"})
    EXPECT_EQ(found[name], 1) << name << " is not among the " << r.operators.size() << " operators to depth 6";
}

TEST(SynthKnown, AnotherSpellingOfAKnownFunctionIsKnownAndAStrangerIsNew) {
  Spec sp = small_spec();
  std::vector<KnownFamily> fams = known_families(sp);
  const Size ci = sp.input[1];
  Size g;
  g.c[size_t(sp.find_coefficient("g"))] = 1;
  // Pointwise spelled with two reductions (input channel = a * (C_in/g) + b): the same function
  // up to the weight's layout, a spelling the generation rules leave out.
  Operator split;
  split.n_out = 4;
  split.iter_sizes = sp.output;
  split.iter_sizes.push_back(g);
  split.iter_sizes.push_back(ci / g);
  auto node = [](Operator& op, Kind k, int32_t a, int32_t b, int32_t iter, Size size, Size param = {}) {
    op.nodes.push_back({k, a, b, iter, size, param});
    return int32_t(op.nodes.size() - 1);
  };
  auto it = [&](Operator& op, int i) {
    return node(op, i < op.n_out ? Kind::Out : Kind::Red, -1, -1, i, op.iter_sizes[size_t(i)]);
  };
  int32_t ch = node(split, Kind::Split, it(split, 4), it(split, 5), -1, ci, ci / g);
  split.x_root = {it(split, 0), ch, it(split, 2), it(split, 3)};
  split.weights = {{1, 4, 5}};
  split.canonical = canonical_form(split);
  // A pointwise convolution reading the input shifted along H twice: no family of the library.
  Operator twice;
  twice.n_out = 4;
  twice.iter_sizes = sp.output;
  twice.iter_sizes.push_back(ci);
  int32_t h = node(twice, Kind::Shift, node(twice, Kind::Shift, it(twice, 2), -1, -1, sp.output[2]), -1, -1, sp.output[2]);
  twice.x_root = {it(twice, 0), it(twice, 4), h, it(twice, 3)};
  twice.weights = {{1, 4}};
  twice.canonical = canonical_form(twice);
  std::map<std::string, const Operator*> m = by_name(fams);
  ASSERT_TRUE(m.count("pointwise"));
  EXPECT_NE(split.canonical, m["pointwise"]->canonical);
  std::vector<std::string> names = known_family_names(sp, {*m["standard kxk"], split, twice}, fams);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], "standard kxk");  // by its canonical form
  EXPECT_EQ(names[1], "pointwise");     // by its function
  EXPECT_EQ(names[2], "");              // new
}

}  // namespace
}  // namespace synoros::synth
