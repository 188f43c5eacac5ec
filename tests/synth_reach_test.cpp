// Reachability in the conv2d spec's space: the classic convolutions are found by enumeration and
// recognised through their canonical forms, which are built here by hand from index expressions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "synoros/synth.hpp"
#include "test_util.hpp"

namespace synoros::synth {
namespace {

struct Hand {
  const Spec& sp;
  Operator op;
  explicit Hand(const Spec& s, std::vector<std::string> reduces) : sp(s) {
    op.n_out = int(sp.output.size());
    op.iter_sizes = sp.output;
    for (auto& r : reduces) op.iter_sizes.push_back(sp.parse_size(r));
  }
  int32_t add(Kind k, int32_t a, int32_t b, int32_t iter, Size size, Size param = {}) {
    op.nodes.push_back({k, a, b, iter, size, param});
    return int32_t(op.nodes.size() - 1);
  }
  int32_t it(int i) { return add(i < op.n_out ? Kind::Out : Kind::Red, -1, -1, i, op.iter_sizes[size_t(i)]); }
  int32_t unfold(int main, int window) {
    return add(Kind::Unfold, it(main), it(window), -1, op.iter_sizes[size_t(main)], op.iter_sizes[size_t(window)]);
  }
  std::string canonical(std::vector<int32_t> roots, std::vector<std::vector<int32_t>> weights) {
    op.x_root = roots;
    op.weights = weights;
    return canonical_form(op);
  }
};

// Enumerates everything below the given reductions (weights and views exhaustively, with the
// shape-distance pruning) and returns the operator whose canonical form is `want`, if any.
const Operator* find(Synthesizer& syn, const std::vector<std::string>& reduces, const std::string& want,
                     EnumResult& store, bool from_root = false) {
  State s = syn.root();
  std::vector<Action> path;
  std::vector<Size> sizes;
  for (auto& r : reduces) sizes.push_back(syn.spec().parse_size(r));
  std::sort(sizes.begin(), sizes.end());
  if (!from_root) {
    for (const Size& z : sizes) {
      Action a;
      a.type = ActType::Reduce;
      a.size = z;
      path.push_back(a);
      s = syn.apply(s, a);
    }
  }
  store = enumerate(syn, true, SIZE_MAX, from_root ? nullptr : &s, path);
  for (const Operator& op : store.operators)
    if (op.canonical == want) return &op;
  return nullptr;
}

TEST(SynthReach, ConvPointwiseGroupedLowRankDepthwise) {
  Spec sp = conv2d_spec();
  Options o;
  o.max_depth = 6;
  Synthesizer full(sp, o);  // the whole space, from the root
  EnumResult r;

  // k×k convolution: y[n,co,h,w] = Σ x[n,c,h+i−1,w+j−1] · W[co,c,i,j]
  Hand conv(sp, {"C_in", "k", "k"});
  std::string conv_c = conv.canonical({conv.it(0), conv.it(4), conv.unfold(2, 5), conv.unfold(3, 6)}, {{1, 4, 5, 6}});
  const Operator* c = find(full, {}, conv_c, r, true);
  ASSERT_NE(c, nullptr) << "k×k convolution not found";
  EXPECT_EQ(c->depth, 6);
  // It computes a convolution: compare with a direct loop on random data (a small spec with the
  // same variables in the same order, so the operator's sizes mean the same there).
  {
    Spec small = parse_spec(
        "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3, g=8, s=2; bind: N=1, C_in=3, C_out=2, H=5, W=4;"
        "fixed: N");
    Binding sb = binding(small, 0);
    HostTensor x = testing::random_tensor({DType::F32, {1, 3, 5, 4}}, 1);
    auto ws = weight_shapes(small, *c, sb);
    ASSERT_EQ(ws.size(), 1u);
    HostTensor w = testing::random_tensor({DType::F32, ws[0]}, 2);
    HostTensor y = reference_eval(small, *c, sb, x, {w});
    const auto& N = c->nodes;
    int32_t ci_it = N[size_t(c->x_root[1])].iter;
    int32_t ri = N[size_t(N[size_t(c->x_root[2])].b)].iter, rj = N[size_t(N[size_t(c->x_root[3])].b)].iter;
    double worst = 0;
    for (int co = 0; co < 2; ++co)
      for (int h = 0; h < 5; ++h)
        for (int ww = 0; ww < 4; ++ww) {
          double acc = 0;
          for (int ci = 0; ci < 3; ++ci)
            for (int i = 0; i < 3; ++i)
              for (int j = 0; j < 3; ++j) {
                int hh = h + i - 1, wx = ww + j - 1;
                if (hh < 0 || hh >= 5 || wx < 0 || wx >= 4) continue;
                int64_t flat = 0;
                for (size_t q = 0; q < ws[0].size(); ++q) {
                  int32_t itr = c->weights[0][q];
                  int64_t v = itr == 1 ? co : itr == ci_it ? ci : itr == ri ? i : itr == rj ? j : -1000;
                  flat = flat * ws[0][q] + v;
                }
                acc += x.get((ci * 5 + hh) * 4 + wx) * w.get(flat);
              }
          worst = std::max(worst, std::fabs(acc - y.get((co * 5 + h) * 4 + ww)));
        }
    EXPECT_LT(worst, 1e-9);
  }

  // Pointwise (1×1) convolution: y = Σ_c x[n,c,h,w] · W[co,c]
  Hand pw(sp, {"C_in"});
  std::string pw_c = pw.canonical({pw.it(0), pw.it(4), pw.it(2), pw.it(3)}, {{1, 4}});
  const Operator* p = find(full, {}, pw_c, r, true);
  ASSERT_NE(p, nullptr) << "pointwise convolution not found";
  EXPECT_EQ(p->depth, 2);

  // Grouped convolution with g groups: x channel = ⌊co / (C_out/g)⌋ · (C_in/g) + c'
  o.max_depth = 8;
  Synthesizer deep(sp, o);
  Hand gr(sp, {"C_in/g", "k", "k"});
  int32_t grp = gr.add(Kind::Div, gr.it(1), -1, -1, sp.parse_size("g"), sp.parse_size("C_out/g"));
  int32_t ch = gr.add(Kind::Split, grp, gr.it(4), -1, sp.parse_size("C_in"), sp.parse_size("C_in/g"));
  std::string gr_c = gr.canonical({gr.it(0), ch, gr.unfold(2, 5), gr.unfold(3, 6)}, {{1, 4, 5, 6}});
  const Operator* g = find(deep, {"C_in/g", "k", "k"}, gr_c, r);
  ASSERT_NE(g, nullptr) << "grouped convolution not found";
  EXPECT_EQ(g->depth, 8);

  // Low-rank factorized convolution, rank g: y = Σ x[n,c,h+i−1,w+j−1] · W1[c,i,j,r] · W2[co,r]
  Hand lr(sp, {"C_in", "k", "k", "g"});
  std::string lr_c = lr.canonical({lr.it(0), lr.it(4), lr.unfold(2, 5), lr.unfold(3, 6)}, {{4, 5, 6, 7}, {1, 7}});
  const Operator* l = find(deep, {"C_in", "k", "k", "g"}, lr_c, r);
  ASSERT_NE(l, nullptr) << "low-rank convolution not found";
  EXPECT_EQ(l->depth, 8);
  EXPECT_EQ(l->weights.size(), 2u);

  // Depthwise convolution needs C_in = C_out symbolically: the same-channel spec.
  Spec same = conv2d_spec(true);
  Options od;
  od.max_depth = 5;
  Synthesizer dsyn(same, od);
  Hand dw(same, {"k", "k"});
  std::string dw_c = dw.canonical({dw.it(0), dw.it(1), dw.unfold(2, 4), dw.unfold(3, 5)}, {{1, 4, 5}});
  const Operator* d = find(dsyn, {}, dw_c, r, true);
  ASSERT_NE(d, nullptr) << "depthwise convolution not found";
  EXPECT_EQ(d->depth, 5);
}

}  // namespace
}  // namespace synoros::synth
