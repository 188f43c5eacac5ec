// The data-driven op harness: every op over several shapes runs through the fast path and is
// compared with the float64 oracle; every differentiable op is gradient-checked against float64
// central finite differences, and its gradient graph also runs through the fast path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <tuple>

#include "test_util.hpp"

namespace synoros {
namespace {
using testing::InputSpec;
using testing::random_tensor;

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<ValueId(Graph&, const std::vector<ValueId>&)> build;
  bool differentiable = true;
};

InputSpec f32(Shape s, double lo = -1, double hi = 1, double avoid = 0) {
  return {DType::F32, std::move(s), lo, hi, avoid};
}
InputSpec i64(Shape s, double hi) { return {DType::I64, std::move(s), 0, hi, 0}; }

OpCase unary(Op op, Shape s, double lo = -2, double hi = 2, double avoid = 0) {
  return {std::string(op_name(op)) + shape_str(s), {f32(s, lo, hi, avoid)},
          [op](Graph& g, const std::vector<ValueId>& x) { return g.unary(op, x[0]); }};
}
OpCase binary(Op op, Shape a, Shape b, double lo = -2, double hi = 2, bool diff = true) {
  return {std::string(op_name(op)) + shape_str(a) + shape_str(b), {f32(a, lo, hi), f32(b, lo, hi)},
          [op](Graph& g, const std::vector<ValueId>& x) { return g.binary(op, x[0], x[1]); }, diff};
}
OpCase with_attrs(const std::string& name, Op op, std::vector<InputSpec> in, Attrs at, bool diff = true) {
  return {name, std::move(in),
          [op, at](Graph& g, const std::vector<ValueId>& x) { return g.add(op, x, at); }, diff};
}
OpCase einsum(const std::string& spec, std::vector<Shape> shapes) {
  std::vector<InputSpec> in;
  for (auto& s : shapes) in.push_back(f32(s));
  return {"einsum " + spec, in,
          [spec](Graph& g, const std::vector<ValueId>& x) { return g.einsum(spec, x); }};
}

std::vector<OpCase> all_cases() {
  std::vector<OpCase> c;
  for (Shape s : {Shape{1}, Shape{3, 5}, Shape{2, 3, 7}}) {
    c.push_back(unary(Op::Neg, s));
    c.push_back(unary(Op::Exp, s));
    c.push_back(unary(Op::Log, s, 0.2, 3));
    c.push_back(unary(Op::Sqrt, s, 0.2, 3));
    c.push_back(unary(Op::Rsqrt, s, 0.2, 3));
    c.push_back(unary(Op::Abs, s, -2, 2, 0.05));
    c.push_back(unary(Op::Relu, s, -2, 2, 0.05));
    c.push_back(unary(Op::Gelu, s));
    c.push_back(unary(Op::GeluTanh, s));
    c.push_back(unary(Op::Sigmoid, s));
    c.push_back(unary(Op::Tanh, s));
  }
  c.push_back(unary(Op::Exp, {0, 3}));
  for (auto [a, b] : std::vector<std::pair<Shape, Shape>>{
           {{3, 5}, {3, 5}}, {{3, 5}, {5}}, {{4, 1, 3}, {1, 5, 1}}, {{1}, {2, 3}}, {{0, 3}, {3}}}) {
    for (Op op : {Op::Add, Op::Sub, Op::Mul}) c.push_back(binary(op, a, b));
    c.push_back(binary(Op::Div, a, b, 0.5, 2));
    c.push_back(binary(Op::Pow, a, b, 0.5, 2));
    c.push_back(binary(Op::Max, a, b));
    c.push_back(binary(Op::Min, a, b));
    c.push_back(binary(Op::CmpLt, a, b, -2, 2, false));
    c.push_back(binary(Op::CmpEq, a, b, -2, 2, false));
    c.push_back(binary(Op::ReluGrad, a, b, -2, 2, false));
    c.push_back(binary(Op::GeluGrad, a, b, -2, 2, false));
    c.push_back(binary(Op::GeluTanhGrad, a, b, -2, 2, false));
  }
  c.push_back({"where", {f32({3, 5}), f32({3, 5}), f32({5})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId cond = g.binary(Op::CmpLt, x[0], g.scalar(0.0));
                 return g.add(Op::Where, {cond, x[1], x[2]});
               }});
  c.push_back({"cast f32->f64->f32", {f32({3, 4})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 return g.cast(g.binary(Op::Mul, g.cast(x[0], DType::F64), g.scalar(3.0, DType::F64)), DType::F32);
               }});
  c.push_back({"cast f32->i32", {f32({7}, -5, 5)},
               [](Graph& g, const std::vector<ValueId>& x) { return g.cast(x[0], DType::I32); }, false});
  for (Op op : {Op::Sum, Op::Mean, Op::ReduceMax}) {
    for (auto [s, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
             {{3, 5, 7}, {}}, {{3, 5, 7}, {1}}, {{3, 5, 7}, {0, 2}}, {{3, 5, 7}, {-1}},
             {{1, 4}, {0}}, {{2, 9000}, {1}}, {{0, 3}, {1}}}) {
      for (bool keep : {false, true}) {
        const attr::Reduce at{axes, keep};
        c.push_back(with_attrs(std::string(op_name(op)) + shape_str(s) + shape_str(axes) + (keep ? "k" : ""),
                               op, {f32(s)}, at));
      }
    }
  }
  c.push_back(with_attrs("reshape", Op::Reshape, {f32({3, 4})}, attr::Target{{2, 6}}));
  c.push_back(with_attrs("permute", Op::Permute, {f32({2, 3, 4})}, attr::Permute{{2, 0, 1}}));
  c.push_back(with_attrs("expand", Op::Expand, {f32({3, 1})}, attr::Target{{2, 3, 4}}));
  c.push_back(with_attrs("slice", Op::Slice, {f32({5, 6})}, attr::Slice{1, 1, 4}));
  c.push_back(with_attrs("slice empty", Op::Slice, {f32({5, 6})}, attr::Slice{0, 2, 2}));
  c.push_back(with_attrs("pad", Op::Pad, {f32({3, 4})}, attr::Pad{0, 2, 1}));
  c.push_back(with_attrs("stride", Op::Stride, {f32({7, 3})}, attr::Stride{0, 3}));
  c.push_back(with_attrs("stride even", Op::Stride, {f32({4, 6})}, attr::Stride{1, 2}));
  c.push_back(with_attrs("shift", Op::Shift, {f32({5, 3})}, attr::Shift{0, -2}));
  c.push_back(with_attrs("shift 1", Op::Shift, {f32({2, 5})}, attr::Shift{1, 1}));
  c.push_back(with_attrs("unfold k3", Op::Unfold, {f32({2, 6})}, attr::Window{1, 3, 1}));
  c.push_back(with_attrs("unfold k2 d2", Op::Unfold, {f32({5, 2})}, attr::Window{0, 2, 2}));
  c.push_back(with_attrs("unfold k3 s2", Op::Unfold, {f32({2, 7})}, attr::Window{1, 3, 1, 2}));
  c.push_back(with_attrs("unfold k3 d2 s3", Op::Unfold, {f32({8, 2})}, attr::Window{0, 3, 2, 3}));
  c.push_back(with_attrs("fold k3 s2", Op::Fold, {f32({2, 4, 3})}, attr::Window{1, 3, 1, 2, 7}));
  c.push_back(with_attrs("fold k2 s2 even", Op::Fold, {f32({3, 2})}, attr::Window{0, 2, 1, 2, 6}));
  c.push_back(with_attrs("fold k3", Op::Fold, {f32({2, 6, 3})}, attr::Window{1, 3, 1}));
  c.push_back(einsum("mk,kn->mn", {{3, 4}, {4, 5}}));
  c.push_back(einsum("mk,nk->mn", {{8, 16}, {32, 16}}));
  c.push_back(einsum("mk,nk->mn", {{5, 13}, {19, 13}}));  // transpose with ragged edges
  c.push_back(einsum("km,kn->mn", {{7, 13}, {7, 17}}));
  c.push_back(einsum("bmk,bkn->bmn", {{2, 3, 4}, {2, 4, 5}}));
  c.push_back(einsum("ij,jk->ki", {{3, 4}, {4, 5}}));
  c.push_back(einsum("ij,j->i", {{6, 5}, {5}}));
  c.push_back(einsum("i,j->ij", {{3}, {4}}));
  c.push_back(einsum("abc,cd->abd", {{2, 3, 4}, {4, 5}}));
  c.push_back(einsum("ij,k->i", {{3, 4}, {2}}));
  c.push_back(einsum("ij->j", {{3, 4}}));
  c.push_back(einsum("mk,kn->mn", {{37, 129}, {129, 35}}));
  c.push_back(einsum("mk,kn->mn", {{9, 600}, {600, 21}}));  // several K blocks
  c.push_back({"conv via unfold", {f32({2, 3, 5, 5}), f32({4, 3, 3, 3})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId u = g.add(Op::Unfold, {x[0]}, attr::Window{2, 3, 1});
                 u = g.add(Op::Unfold, {u}, attr::Window{3, 3, 1});
                 return g.einsum("nchwxy,ocxy->nohw", {u, x[1]});
               }});
  c.push_back({"strided conv via unfold", {f32({2, 3, 7, 6}), f32({4, 3, 3, 3})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId u = g.add(Op::Unfold, {x[0]}, attr::Window{2, 3, 1});
                 u = g.add(Op::Unfold, {u}, attr::Window{3, 3, 1});
                 u = g.add(Op::Stride, {u}, attr::Stride{2, 2});
                 u = g.add(Op::Stride, {u}, attr::Stride{3, 2});
                 return g.einsum("nchwxy,ocxy->nohw", {u, x[1]});
               }});
  c.push_back({"dilated conv via unfold", {f32({1, 2, 6, 7}), f32({3, 2, 3, 2})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId u = g.add(Op::Unfold, {x[0]}, attr::Window{2, 3, 2});
                 u = g.add(Op::Unfold, {u}, attr::Window{3, 2, 1});
                 return g.einsum("nchwxy,ocxy->nohw", {u, x[1]});
               }});
  c.push_back({"grouped conv via unfold", {f32({2, 4, 5, 5}), f32({2, 3, 2, 3, 3})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId r = g.add(Op::Reshape, {x[0]}, attr::Target{{2, 2, 2, 5, 5}});
                 ValueId u = g.add(Op::Unfold, {r}, attr::Window{3, 3, 1});
                 u = g.add(Op::Unfold, {u}, attr::Window{4, 3, 1});
                 return g.einsum("ngchwxy,gocxy->ngohw", {u, x[1]});
               }});
  c.push_back({"matmul over a padded operand", {f32({3, 4}), f32({6, 5})},
               [](Graph& g, const std::vector<ValueId>& x) {
                 ValueId p = g.add(Op::Pad, {x[0]}, attr::Pad{1, 1, 1});
                 return g.einsum("ij,jk->ik", {p, x[1]});
               }});
  for (int64_t axis : {-1, 0}) {
    c.push_back(with_attrs("softmax" + std::to_string(axis), Op::Softmax, {f32({4, 7}, -3, 3)}, attr::Axis{axis}));
    c.push_back(with_attrs("log_softmax" + std::to_string(axis), Op::LogSoftmax, {f32({4, 7}, -3, 3)}, attr::Axis{axis}));
  }
  const attr::Eps ln{1e-5};
  c.push_back(with_attrs("layernorm", Op::LayerNorm, {f32({3, 8})}, ln));
  c.push_back(with_attrs("layernorm affine", Op::LayerNorm, {f32({2, 3, 8}), f32({8}), f32({8})}, ln));
  {  // attention: one key block and several (kBlock is 64), causal and not, Tq != Tk
    auto att = [](bool causal, double scale) { return attr::Attention{causal, scale}; };
    c.push_back(with_attrs("attention", Op::Attention, {f32({2, 5, 4}), f32({2, 7, 4}), f32({2, 7, 4})}, att(false, 0.5)));
    c.push_back(with_attrs("attention causal", Op::Attention, {f32({1, 2, 6, 3}), f32({1, 2, 6, 3}), f32({1, 2, 6, 3})},
                           att(true, 0.7)));
    c.push_back(with_attrs("attention causal blocks", Op::Attention, {f32({1, 70, 2}), f32({1, 70, 2}), f32({1, 70, 2})},
                           att(true, 1.5)));
    // queries at positions offset + i over a longer key cache (decoding)
    c.push_back(with_attrs("attention at an offset", Op::Attention, {f32({2, 3, 4}), f32({2, 9, 4}), f32({2, 9, 4}), i64({1}, 6)},
                           att(true, 0.6)));
    c.push_back(with_attrs("attention at an offset past the keys", Op::Attention,  // clamped to Tk
                           {f32({2, 3, 4}), f32({2, 9, 4}), f32({2, 9, 4}), {DType::I64, {1}, 20, 30, 0}}, att(true, 0.6)));
    c.push_back(with_attrs("attention at an offset blocks", Op::Attention,
                           {f32({5, 3}), f32({140, 3}), f32({140, 3}), i64({1}, 100)}, att(true, 0.8)));
    c.push_back(with_attrs("attention blocks", Op::Attention, {f32({66, 3}, -2, 2), f32({130, 3}, -2, 2), f32({130, 3})},
                           att(false, 0.9)));
    // keys in several splits of 256: walked by one task, and as tasks of their own (<= 4 queries)
    c.push_back(with_attrs("attention splits", Op::Attention, {f32({6, 2}, -2, 2), f32({600, 2}, -2, 2), f32({600, 2})},
                           att(false, 0.9)));
    c.push_back(with_attrs("attention split tasks", Op::Attention, {f32({2, 2}, -2, 2), f32({600, 2}, -2, 2), f32({600, 2})},
                           att(false, 0.9)));
    c.push_back(with_attrs("attention at an offset split tasks", Op::Attention,
                           {f32({1, 2}), f32({600, 2}), f32({600, 2}), i64({1}, 530)}, att(true, 0.8)));
  }
  // conv3x3 (Winograd F(4x4, 3x3)): every padding, odd and even sizes (partial tiles), both forms.
  c.push_back(with_attrs("conv3x3 p1", Op::Conv3x3, {f32({2, 3, 5, 6}), f32({4, 3, 3, 3})}, attr::Conv3x3{1, 0}));
  c.push_back(with_attrs("conv3x3 p0", Op::Conv3x3, {f32({1, 2, 7, 4}), f32({3, 2, 3, 3})}, attr::Conv3x3{0, 0}));
  c.push_back(with_attrs("conv3x3 p2", Op::Conv3x3, {f32({2, 2, 3, 3}), f32({2, 2, 3, 3})}, attr::Conv3x3{2, 0}));
  c.push_back(with_attrs("conv3x3 flipped", Op::Conv3x3, {f32({2, 4, 5, 4}), f32({4, 3, 3, 3})}, attr::Conv3x3{1, 1}));
  c.push_back(with_attrs("conv3x3 flipped p0", Op::Conv3x3, {f32({1, 3, 6, 5}), f32({3, 2, 3, 3})}, attr::Conv3x3{0, 1}));
  // batchnorm with the batch statistics of x, as BatchNorm2d builds it: its gradient is the
  // total derivative through the statistics, so finite differences see the whole composition.
  for (Shape xs : {Shape{4, 3, 5, 5}, Shape{6, 2}, Shape{1, 3, 2, 7}}) {
    int64_t C = xs[1];
    c.push_back({"batchnorm " + shape_str(xs), {f32(xs), f32({C}, 0.5, 2), f32({C})},
                 [xs, C](Graph& g, const std::vector<ValueId>& x) {
                   std::vector<int64_t> axes;
                   for (size_t d = 0; d < xs.size(); ++d)
                     if (d != 1) axes.push_back(int64_t(d));
                   ValueId m = g.mean(x[0], axes, true);
                   ValueId cen = g.binary(Op::Sub, x[0], g.expand(m, xs));
                   ValueId v = g.mean(g.binary(Op::Mul, cen, cen), axes, true);
                   return g.add(Op::BatchNorm, {x[0], g.reshape(m, {C}), g.reshape(v, {C}), x[1], x[2]},
                                attr::BatchNorm{1e-5, true});
                 }});
  }
  {  // given statistics (running ones, say): every input gets its partial derivative
    const attr::BatchNorm bn{1e-5, false};
    c.push_back(with_attrs("batchnorm given statistics", Op::BatchNorm,
                           {f32({3, 4, 5, 2}), f32({4}), f32({4}, 0.3, 2), f32({4}), f32({4})}, bn));
  }
  {
    const attr::Eps bn{1e-5};
    OpCase sums = with_attrs("batchnorm_sums", Op::BatchNormSums,
                             {f32({3, 4, 37, 41}), f32({3, 4, 37, 41}), f32({4}), f32({4}, 0.2, 2)}, bn);
    sums.differentiable = false;  // a gradient's building block (see vjp_batchnorm)
    c.push_back(sums);
  }
  // reduce_max_grad(x, max(x), g): pooling tiles (the tile form) and axes that need the general one.
  for (auto [shape, axes, gshape] : std::vector<std::tuple<Shape, std::vector<int64_t>, Shape>>{
           {{2, 3, 4, 2, 5, 2}, {3, 5}, {2, 3, 4, 5}}, {{3, 4, 5, 6}, {0, 2}, {4, 6}}}) {
    OpCase mg{"reduce_max_grad " + shape_str(shape), {f32(shape), f32(gshape)},
              [axes](Graph& g, const std::vector<ValueId>& x) {
                const attr::Reduce a{axes};
                return g.add(Op::ReduceMaxGrad, {x[0], g.add(Op::ReduceMax, {x[0]}, a), x[1]}, a);
              }};
    mg.differentiable = false;  // a gradient's building block (see vjp_reduce_max)
    c.push_back(mg);
  }
  c.push_back(with_attrs("cross_entropy i64", Op::CrossEntropy, {f32({5, 7}, -3, 3), i64({5}, 7)}, {}));
  c.push_back(with_attrs("cross_entropy i32", Op::CrossEntropy,
                         {f32({4, 3}, -3, 3), InputSpec{DType::I32, {4}, 0, 3, 0}}, {}));
  c.push_back(with_attrs("embedding", Op::Embedding, {f32({6, 4}), i64({2, 5}, 6)}, {}));
  // The rows' sums added to a gradient (a tied table's other contribution), 70 columns wide.
  c.push_back(with_attrs("embedding_grad into a gradient", Op::EmbeddingGrad,
                         {f32({2, 5, 70}), i64({2, 5}, 6), f32({6, 70})}, attr::Rows{6}, false));
  c.push_back(with_attrs("cross_entropy ignoring 2", Op::CrossEntropy, {f32({9, 4}, -3, 3), i64({9}, 4)}, attr::CrossEntropy{2}));
  // argmax/argmin (integer results: checked against the oracle, no gradient), running sums
  // forward and reverse along each axis, gather with an index smaller than the data off its axis
  // (its gradient, the scatter-add, runs through the gradient graph).
  for (int64_t axis : {0, 1, -1})
    for (bool want_min : {false, true}) {
      c.push_back(with_attrs("argmax" + std::to_string(axis) + std::to_string(want_min), Op::ArgMax,
                             {f32({4, 300, 3})}, attr::ArgMax{axis, want_min}, false));
      c.push_back(with_attrs("cumsum" + std::to_string(axis) + std::to_string(want_min), Op::Cumsum,
                             {f32({3, 5, 300})}, attr::Scan{axis, want_min}));
    }
  // Running products forward and reverse (values near 1 keep 300-long products finite), and the
  // zero-safe gradient with zeros in the line.
  for (int64_t axis : {0, 2})
    for (bool rev : {false, true})
      c.push_back(with_attrs("cumprod" + std::to_string(axis) + std::to_string(rev), Op::Cumprod,
                             {f32({3, 5, 300}, 0.9, 1.1)}, attr::Scan{axis, rev}));
  c.push_back(with_attrs("cumprod of mixed signs", Op::Cumprod, {f32({6, 7}, -1.5, 1.5)}, attr::Scan{1, 0}));
  for (bool rev : {false, true})
    c.push_back(with_attrs("cumprod_grad" + std::to_string(rev), Op::CumprodGrad,
                           {f32({4, 9}, -1.5, 1.5), f32({4, 9}, -1.5, 1.5)}, attr::Scan{1, rev}, false));
  c.push_back(with_attrs("argmax i64", Op::ArgMax, {i64({5, 7}, 4)}, attr::ArgMax{1, 0}, false));
  for (int64_t axis : {0, 1, 2}) c.push_back(with_attrs("prod" + std::to_string(axis), Op::Prod, {f32({3, 4, 300}, 0.5, 1.5)}, attr::Axis{axis}));
  c.push_back(with_attrs("prod of mixed signs", Op::Prod, {f32({6, 5}, -1, 1)}, attr::Axis{1}));  // zeros: TensorIndex tests
  c.push_back(with_attrs("gather axis 0", Op::Gather, {f32({4, 3}), i64({6, 3}, 4)}, attr::Axis{0}));
  c.push_back(with_attrs("gather axis 1", Op::Gather, {f32({3, 5, 4}), i64({2, 7, 3}, 5)}, attr::Axis{1}));
  c.push_back(with_attrs("gather axis -1", Op::Gather, {f32({2, 3, 5}), i64({2, 2, 9}, 5)}, attr::Axis{-1}));
  const attr::Dropout dp{0.3, 1234};
  c.push_back(with_attrs("dropout", Op::Dropout, {f32({4, 50})}, dp));
  return c;
}

class OpCases : public ::testing::TestWithParam<size_t> {};

// Builds case + loss = sum(out * w); returns (graph, inputs, out, loss).
struct Built {
  Graph g;
  std::vector<ValueId> in;
  ValueId out, loss;
};
Built build(const OpCase& oc) {
  Built b;
  for (size_t i = 0; i < oc.inputs.size(); ++i)
    b.in.push_back(b.g.input(oc.inputs[i].dtype, oc.inputs[i].shape, "x" + std::to_string(i)));
  b.out = oc.build(b.g, b.in);
  b.loss = kNoValue;
  if (oc.differentiable && is_float(b.g.dtype(b.out))) {
    HostTensor w = random_tensor(f32(b.g.shape(b.out), -1, 1), 99);
    ValueId wc = b.g.constant(b.g.dtype(b.out) == DType::F32 ? w : testing::to_f64(w));
    b.loss = b.g.sum(b.g.binary(Op::Mul, b.out, wc), {});
  }
  return b;
}

TEST_P(OpCases, FastPathMatchesOracle) {
  const OpCase oc = all_cases()[GetParam()];
  SCOPED_TRACE(oc.name);
  Built b = build(oc);
  CompileOptions keep;
  keep.keep_intermediates = true;
  Plan plan(b.g, {b.out}, keep);
  for (size_t i = 0; i < b.in.size(); ++i) plan.set_input(b.in[i], random_tensor(oc.inputs[i], 7 + i));
  plan.run();
  VerifyResult r = verify(plan, true);
  EXPECT_TRUE(r.ok) << r.report;
}

// The default plan (fused, memory planned) gives the same bits as the unfused, unplanned one,
// for the op and for its gradient graph.
TEST_P(OpCases, FusedAndPlannedMatchUnfusedBitForBit) {
  testing::StrictKernels strict;
  const OpCase oc = all_cases()[GetParam()];
  SCOPED_TRACE(oc.name);
  Built b = build(oc);
  std::vector<ValueId> outs = {b.out};
  if (b.loss != kNoValue) {
    std::vector<ValueId> wrt;
    for (size_t i = 0; i < b.in.size(); ++i)
      if (is_float(oc.inputs[i].dtype)) wrt.push_back(b.in[i]);
    for (ValueId gv : grad(b.g, b.loss, wrt)) outs.push_back(gv);
  }
  CompileOptions plain;
  plain.fuse = false;
  plain.plan_memory = false;
  Plan fast(b.g, outs), ref(b.g, outs, plain);
  for (size_t i = 0; i < b.in.size(); ++i) {
    HostTensor x = random_tensor(oc.inputs[i], 7 + i);
    fast.set_input(b.in[i], x);
    ref.set_input(b.in[i], x);
  }
  fast.run();
  ref.run();
  for (ValueId o : outs) {
    HostTensor a = fast.read(o), e = ref.read(o);
    EXPECT_EQ(0, std::memcmp(a.buffer->data(), e.buffer->data(), a.bytes())) << "value %" << o;
  }
}

TEST_P(OpCases, GradientMatchesFiniteDifferences) {
  const OpCase oc = all_cases()[GetParam()];
  SCOPED_TRACE(oc.name);
  Built b = build(oc);
  if (b.loss == kNoValue) GTEST_SKIP() << "not differentiable";
  std::vector<ValueId> wrt;
  for (size_t i = 0; i < b.in.size(); ++i)
    if (is_float(oc.inputs[i].dtype)) wrt.push_back(b.in[i]);
  std::vector<ValueId> grads = grad(b.g, b.loss, wrt);
  std::map<ValueId, HostTensor> feeds;
  for (size_t i = 0; i < b.in.size(); ++i) feeds[b.in[i]] = random_tensor(oc.inputs[i], 7 + i);

  // 1. The autodiff graph, evaluated by the oracle in float64, against central differences.
  std::vector<HostTensor> ad = oracle_eval(b.g, grads, feeds);
  for (size_t w = 0; w < wrt.size(); ++w) {
    HostTensor x = testing::to_f64(feeds[wrt[w]]);
    const HostTensor& gw = ad[size_t(grads[w])];
    double ss = 0;
    for (int64_t i = 0; i < gw.numel(); ++i) ss += gw.get(i) * gw.get(i);
    double rms = gw.numel() ? std::sqrt(ss / double(gw.numel())) : 0;
    int64_t step = std::max<int64_t>(1, x.numel() / 24);  // sample large inputs
    for (int64_t i = 0; i < x.numel(); i += step) {
      double x0 = x.get(i), h = 1e-6 * std::max(1.0, std::fabs(x0));
      auto f = [&](double v) {
        HostTensor xp = x;
        xp.set(i, v);
        auto fd = feeds;
        fd[wrt[w]] = xp;
        return oracle_eval(b.g, {b.loss}, fd)[size_t(b.loss)].get(0);
      };
      double num = (f(x0 + h) - f(x0 - h)) / (2 * h);
      EXPECT_NEAR(gw.get(i), num, 1e-5 * (std::fabs(num) + rms) + 1e-8)
          << "input " << w << " element " << i;
    }
  }
  // 2. The same gradient graph through the fast path, checked against the oracle.
  CompileOptions keep;
  keep.keep_intermediates = true;
  Plan plan(b.g, grads, keep);
  for (size_t i = 0; i < b.in.size(); ++i) plan.set_input(b.in[i], feeds[b.in[i]]);
  plan.run();
  VerifyResult r = verify(plan, true);
  EXPECT_TRUE(r.ok) << r.report;
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpCases, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& p) {
                           std::string n = all_cases()[p.param].name;
                           std::string out;
                           for (char ch : n) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return out + "_" + std::to_string(p.param);
                         });

// Every op of the table appears in at least one case (directly or through a gradient graph).
TEST(OpCoverage, EveryOpIsExercised) {
  std::set<Op> seen;
  for (const OpCase& oc : all_cases()) {
    Built b = build(oc);
    if (b.loss != kNoValue) {
      std::vector<ValueId> wrt;
      for (size_t i = 0; i < b.in.size(); ++i)
        if (is_float(oc.inputs[i].dtype)) wrt.push_back(b.in[i]);
      grad(b.g, b.loss, wrt);
    }
    for (const Node& n : b.g.nodes()) seen.insert(n.op);
  }
  for (size_t i = 0; i < kOpCount; ++i) {
    if (Op(i) == Op::Param) continue;  // leaves bound to storage; covered by the MLP tests
    EXPECT_TRUE(seen.count(Op(i))) << "op " << op_name(Op(i)) << " has no case";
  }
}

}  // namespace
}  // namespace synoros
