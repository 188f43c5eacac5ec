// The front end's index and scan methods (argmax/argmin, cumsum, gather, index_select, indexing
// by an integer tensor), reshape/expand with -1, Python-style slice bounds and printing: values
// against results written here or taken from PyTorch 1.13, gradients against closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "synoros/synoros.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

HostTensor ints64(const std::vector<int64_t>& v, Shape s) {
  HostTensor h(DType::I64, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) h.set(int64_t(i), double(v[i]));
  return h;
}
std::vector<int64_t> ivals(const Tensor& t) {
  HostTensor h = t.value();
  EXPECT_EQ(h.dtype, DType::I64);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < h.numel(); ++i) v.push_back(int64_t(h.get(i)));
  return v;
}

TEST(TensorIndex, ArgmaxFollowsPyTorch) {
  // The first NaN wins for both; otherwise the first extreme; +0 and -0 are equal.
  Tensor x = Tensor::from({1.0f, NAN, 3.0f, NAN}, {4});
  EXPECT_EQ(ivals(x.argmax()), std::vector<int64_t>{1});
  EXPECT_EQ(ivals(x.argmin()), std::vector<int64_t>{1});
  Tensor z = Tensor::from({0.0f, -0.0f, 3.0f, 3.0f}, {4});
  EXPECT_EQ(ivals(z.argmax()), std::vector<int64_t>{2});
  EXPECT_EQ(ivals(z.argmin()), std::vector<int64_t>{0});
  Tensor m = Tensor::from({1, 5, 5, 2, -7, 0}, {2, 3});
  EXPECT_EQ(ivals(m.argmax()), std::vector<int64_t>{1});
  EXPECT_EQ(ivals(m.argmax(1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(ivals(m.argmin(0)), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(m.argmax(1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(m.argmax().shape(), Shape{});
  EXPECT_EQ(ivals(Tensor::scalar(4.0).argmax(0)), std::vector<int64_t>{0});
  // Integer tensors too, and a line longer than one chunk of columns.
  EXPECT_EQ(ivals(Tensor::from(ints64({3, 9, 9, -1}, {4})).argmax()), std::vector<int64_t>{1});
  Tensor wide = Tensor::arange(600).reshape({2, 300}) * -1.0;
  EXPECT_EQ(ivals(wide.argmin(1)), (std::vector<int64_t>{299, 299}));
  EXPECT_EQ(ivals(wide.argmax(0)), std::vector<int64_t>(300, 0));
  EXPECT_THROW(Tensor::zeros({2, 0}).argmax(1), Error);
}

TEST(TensorIndex, CumsumAccumulatesInDoubleAndItsGradientIsTheReverseSum) {
  // float32 sums rounded once per element from a float64 running sum: stepping in float32,
  // 1e8 + 3 + 3 stays 1e8 (the spacing there is 8); the double running sum reaches 100000006,
  // which rounds to 100000008.
  Tensor x = Tensor::from({1e8f, 3.0f, 3.0f}, {3});
  std::vector<float> y = x.cumsum(0).to_vector();
  ASSERT_EQ((1e8f + 3.0f) + 3.0f, 1e8f);
  EXPECT_EQ(y[1], 1e8f);
  EXPECT_EQ(y[2], 100000008.0f);
  Tensor m = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(m.cumsum(1).to_vector(), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(m.cumsum(0).to_vector(), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(Tensor::scalar(2.5).cumsum(0).to_vector(), std::vector<float>{2.5f});
  // d/dx_j sum_i w_i cumsum(x)_i = sum_{i >= j} w_i.
  Tensor leaf = Tensor::from({1, 2, 3, 4}, {4});
  leaf.requires_grad();
  (leaf.cumsum(0) * Tensor::from({1, 10, 100, 1000}, {4})).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{1111, 1110, 1100, 1000}));
  EXPECT_THROW(Tensor::from(ints64({1, 2}, {2})).cumsum(0), Error);
}

TEST(TensorIndex, ProdAndItsGradientAtZeros) {
  Tensor m = Tensor::from({1, 2, 3, 4, 0, 6}, {2, 3});
  EXPECT_EQ(m.prod(1).to_vector(), (std::vector<float>{6, 0}));
  EXPECT_EQ(m.prod(0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(m.prod(0).to_vector(), (std::vector<float>{4, 0, 18}));
  EXPECT_EQ(m.prod().item(), 0.0);
  EXPECT_EQ(Tensor::scalar(3.0).prod(0).item(), 3.0);
  // The gradient is the product of the others: at the zero, 4 * 6; elsewhere 0.
  Tensor leaf = Tensor::from({1, 2, 3, 4, 0, 6}, {2, 3});
  leaf.requires_grad();
  leaf.prod(1).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{6, 3, 2, 0, 24, 0}));
  // Products in float64, rounded once: (1 - 2^-21)(1 - 2^-22) 5 rounds to another float stepwise.
  const float a = 1.0f - 0x1p-21f, b = 1.0f - 0x1p-22f;
  Tensor p = Tensor::from({a, b, 5.0f}, {3});
  float once = float(double(a) * double(b) * 5.0), stepwise = (a * b) * 5.0f;
  ASSERT_NE(once, stepwise);
  EXPECT_EQ(p.prod().item(), double(once));
  EXPECT_EQ(p.cumprod(0).to_vector()[2], once);  // running products in float64 too
}

TEST(TensorIndex, CumprodAndItsGradientAtZeros) {
  Tensor x = Tensor::from({2, 0, 3, 4}, {4});
  EXPECT_EQ(x.cumprod(0).to_vector(), (std::vector<float>{2, 0, 0, 0}));
  EXPECT_EQ(Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}).cumprod(-1).to_vector(), (std::vector<float>{1, 2, 6, 4, 20, 120}));
  EXPECT_EQ(Tensor::scalar(3.0).cumprod(0).item(), 3.0);
  // y = (x0, x0 x1, x0 x1 x2, x0 x1 x2 x3) with x1 = 0: dy/dx1 summed = x0 + x0 x2 + x0 x2 x3 = 2 + 6 + 24;
  // dx0 = 1 (the other terms hold x1 = 0), dx2 = dx3 = 0.
  Tensor leaf = Tensor::from({2, 0, 3, 4}, {4});
  leaf.requires_grad();
  leaf.cumprod(0).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{1, 32, 0, 0}));
  EXPECT_THROW(Tensor::from(ints64({1, 2}, {2})).cumprod(0), Error);
}

TEST(TensorIndex, GatherAndItsScatterAddGradient) {
  Tensor x = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor idx = Tensor::from(ints64({2, 2, 0, 1}, {2, 2}));
  EXPECT_EQ(x.gather(1, idx).to_vector(), (std::vector<float>{3, 3, 4, 5}));
  Tensor idx0 = Tensor::from(ints64({1, 0, 1}, {1, 3}));
  EXPECT_EQ(x.gather(0, idx0).to_vector(), (std::vector<float>{4, 2, 6}));
  Tensor leaf = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  leaf.requires_grad();
  (leaf.gather(1, idx) * Tensor::from({1, 10, 100, 1000}, {2, 2})).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{0, 0, 11, 100, 1000, 0}));
  try {
    x.gather(1, Tensor::from(ints64({3}, {1, 1}))).value();
    FAIL() << "an index past the axis was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 3 is out of range [0, 3)"), std::string::npos)
        << e.what();
  }
  // An index out of range far into a large gather, and its gradient: an error, not a crash.
  HostTensor big(DType::I64, {40000, 1});
  big.set(39999, 5.0);
  Tensor col = Tensor::randn({40000, 3}, 5);
  EXPECT_THROW(col.gather(1, Tensor::from(big)).value(), Error);
  big.set(39999, -1.0);
  Tensor cl = Tensor::randn({40000, 3}, 5);
  cl.requires_grad();
  EXPECT_THROW(cl.gather(1, Tensor::from(big)).sum().backward(), Error);
  // Integer data: bits copied (i64 values beyond float precision survive).
  HostTensor iv(DType::I64, {2, 2});
  int64_t large = (int64_t(1) << 53) + 1;
  iv.set(0, 1.0);
  static_cast<int64_t*>(iv.buffer->data())[1] = large;
  Tensor ig = Tensor::from(iv).gather(1, Tensor::from(ints64({1, 1, 0, 0}, {2, 2})));
  HostTensor igv = ig.value();
  EXPECT_EQ(igv.dtype, DType::I64);
  EXPECT_EQ(static_cast<const int64_t*>(igv.buffer->data())[0], large);
  EXPECT_EQ(to_string(ig), "tensor([[9007199254740993, 9007199254740993],\n        [" +
                               std::string(15, ' ') + "0, " + std::string(15, ' ') + "0]])");
  EXPECT_THROW(x.gather(1, Tensor::from(ints64({0, 0, 0}, {3, 1}))), Error);  // larger off the axis
  EXPECT_THROW(x.gather(1, Tensor::from({0.0f}, {1, 1})), Error);             // float index
}

TEST(TensorIndex, IndexSelectAndIntegerIndexing) {
  Tensor x = Tensor::arange(24).reshape({2, 3, 4});
  Tensor idx = Tensor::from(ints64({2, 0, 2}, {3}));
  Tensor s = x.index_select(1, idx);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 4}));
  std::vector<float> sv = s.to_vector();
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        EXPECT_EQ(sv[size_t((a * 3 + b) * 4 + c)],
                  float(a * 12 + std::vector<int64_t>{2, 0, 2}[size_t(b)] * 4 + c));
  EXPECT_EQ(x.index_select(-1, Tensor::from(ints64({3}, {1}))).to_vector(),
            (std::vector<float>{3, 7, 11, 15, 19, 23}));
  // x[idx] with a 2-D index: shape idx.shape + x.shape[1:]; repeated rows add their gradients.
  Tensor rows = Tensor::from(ints64({1, 1, 0, 1}, {2, 2}));
  EXPECT_EQ(x.index(rows).shape(), (Shape{2, 2, 3, 4}));
  EXPECT_EQ(x.index(rows).to_vector()[0], 12.0f);
  Tensor leaf = Tensor::from({1, 2, 3, 4, 5, 6}, {3, 2});
  leaf.requires_grad();
  leaf.index_select(0, Tensor::from(ints64({2, 2, 0}, {3}))).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{1, 1, 0, 0, 2, 2}));
  // Integer data (no gradient) is selected too, through gather: values beyond 2^53 survive.
  const int64_t big = (int64_t(1) << 60) + 1;
  HostTensor ih(DType::I64, {3, 2});
  std::vector<int64_t> iv = {7, big, -3, 5, 6, 9};
  std::copy(iv.begin(), iv.end(), ih.data<int64_t>());
  Tensor ix = Tensor::from(ih);
  auto i64 = [](const Tensor& t) {
    HostTensor h = t.value();
    EXPECT_EQ(h.dtype, DType::I64);
    return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
  };
  Tensor picked = ix.index(Tensor::from(ints64({2, 0, 1}, {3})));
  EXPECT_EQ(picked.shape(), (Shape{3, 2}));
  EXPECT_EQ(i64(picked), (std::vector<int64_t>{6, 9, 7, big, -3, 5}));
  EXPECT_EQ(i64(ix.index_select(1, Tensor::from(ints64({1}, {1})))), (std::vector<int64_t>{big, 5, 9}));
  EXPECT_THROW(x.index_select(1, Tensor::from({1.0f}, {1})), Error);
  EXPECT_THROW(x.index_select(1, Tensor::from(ints64({0, 1}, {1, 2}))), Error);
  EXPECT_THROW(x.index_select(3, idx), Error);
}

TEST(TensorIndex, ScatterAddsAndRunningSumsHaveOneOrder) {
  // Many positions add into few rows: the same bits under every ISA and thread count.
  HostTensor idx(DType::I64, {64, 700});
  for (int64_t i = 0; i < idx.numel(); ++i) idx.set(i, double((i * 7919) % 5));
  Tensor index = Tensor::from(idx);
  HostTensor want_g, want_c;
  testing::for_every_isa_and_thread_count([&](kernels::Isa, int) {
    Tensor x = Tensor::randn({64, 5}, 3);
    x.requires_grad();
    Tensor y = Tensor::randn({64, 700}, 4);
    (x.gather(1, index) * y).sum().backward();
    HostTensor g = x.grad().value(), c = (y * 1e3).cumsum(1).value();
    if (!want_g.buffer) {
      want_g = g;
      want_c = c;
      return;
    }
    EXPECT_EQ(0, std::memcmp(g.buffer->data(), want_g.buffer->data(), g.bytes()));
    EXPECT_EQ(0, std::memcmp(c.buffer->data(), want_c.buffer->data(), c.bytes()));
  });
}

TEST(TensorIndex, ReshapeExpandAndSliceBoundsAsPyTorch) {
  Tensor x = Tensor::arange(12);
  EXPECT_EQ(x.reshape({3, -1}).shape(), (Shape{3, 4}));
  EXPECT_EQ(x.reshape({-1}).shape(), (Shape{12}));
  EXPECT_THROW(x.reshape({-1, -1}), Error);
  EXPECT_THROW(x.reshape({5, -1}), Error);
  EXPECT_EQ(Tensor::zeros({3, 1}).expand({2, -1, 4}).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.slice(0, -3, 100).to_vector(), (std::vector<float>{9, 10, 11}));
  EXPECT_EQ(x.slice(0, -100, 2).to_vector(), (std::vector<float>{0, 1}));
  EXPECT_EQ(x.slice(0, 5, 2).shape(), (Shape{0}));
  EXPECT_EQ(x.slice(0, 2, -8).to_vector(), (std::vector<float>{2, 3}));
}

TEST(TensorIndex, CrossEntropyForms) {
  // [N, C, d] logits, an ignored target and an infinite logit on the ignored position.
  std::vector<float> l = {0.5f, -1.0f, 2.0f, INFINITY, 0.25f, 0.0f,
                          1.0f, -0.5f, 0.0f, 1.5f,     3.0f,  -2.0f};
  Tensor logits = Tensor::from(l, {2, 3, 2});
  Tensor t = Tensor::from(ints64({1, -100, 2, 0}, {2, 2}));
  CrossEntropyOptions o;
  o.ignore_index = -100;
  o.reduction = Reduction::None;
  std::vector<float> per = cross_entropy(logits, t, o).to_vector();
  ASSERT_EQ(per.size(), 4u);
  auto nll = [&](int n, int d, int c) {  // -log softmax over the 3 classes at (n, d)
    double m = -INFINITY, s = 0;
    for (int k = 0; k < 3; ++k) m = std::max(m, double(l[size_t(n * 6 + k * 2 + d)]));
    for (int k = 0; k < 3; ++k) s += std::exp(double(l[size_t(n * 6 + k * 2 + d)]) - m);
    return m + std::log(s) - double(l[size_t(n * 6 + c * 2 + d)]);
  };
  EXPECT_NEAR(per[0], nll(0, 0, 1), 1e-5);
  EXPECT_EQ(per[1], 0.0f);  // ignored: exactly zero beside the infinite logit
  EXPECT_NEAR(per[2], nll(1, 0, 2), 1e-5);
  EXPECT_NEAR(per[3], nll(1, 1, 0), 1e-5);
  o.reduction = Reduction::Mean;
  EXPECT_NEAR(cross_entropy(logits, t, o).item(), (per[0] + per[2] + per[3]) / 3, 1e-5);
  o.reduction = Reduction::Sum;
  EXPECT_NEAR(cross_entropy(logits, t, o).item(), per[0] + per[2] + per[3], 1e-5);
  // The fused 2-D mean skips the ignored rows too, forward and backward.
  Tensor rows = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  rows.requires_grad();
  CrossEntropyOptions skip;
  skip.ignore_index = 7;
  Tensor loss = cross_entropy(rows, Tensor::from(ints64({7, 0}, {2})), skip);
  loss.backward();
  double s = std::exp(-1.0) + std::exp(0.0) + std::exp(1.0);  // row 1 centred on 5
  EXPECT_NEAR(loss.item(), std::log(s) + 1.0, 1e-5);
  std::vector<float> g = rows.grad().to_vector();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_NEAR(g[3], std::exp(-1.0) / s - 1, 1e-6);
  EXPECT_THROW(cross_entropy(rows, Tensor::from(ints64({0, 1, 2}, {3}))), Error);
  EXPECT_THROW(cross_entropy(Tensor::zeros({3}), Tensor::from(ints64({0}, {1}))), Error);

  // Class weights: each sample scaled by its target's weight; the mean divides by the weights
  // of the counted targets (the ignored one counts nothing).
  CrossEntropyOptions wo = o;
  wo.weight = Tensor::from({0.5, 2.0, 4.0}, {3});
  wo.reduction = Reduction::None;
  std::vector<float> wper = cross_entropy(logits, t, wo).to_vector();
  EXPECT_NEAR(wper[0], 2.0 * nll(0, 0, 1), 1e-5);
  EXPECT_EQ(wper[1], 0.0f);
  EXPECT_NEAR(wper[2], 4.0 * nll(1, 0, 2), 1e-5);
  EXPECT_NEAR(wper[3], 0.5 * nll(1, 1, 0), 1e-5);
  wo.reduction = Reduction::Mean;
  EXPECT_NEAR(cross_entropy(logits, t, wo).item(), (wper[0] + wper[2] + wper[3]) / 6.5, 1e-5);
  wo.weight = Tensor::ones({2});
  EXPECT_THROW(cross_entropy(logits, t, wo), Error);
}

TEST(TensorIndex, LayerNormOverSeveralAxesAndFunctionalBatchNorm) {
  Tensor x = Tensor::randn({2, 3, 4}, 11);
  Tensor w = Tensor::randn({3, 4}, 12), b = Tensor::randn({3, 4}, 13);
  // The same bits as the one-axis op over the flattened trailing axes.
  Tensor y = layer_norm(x, Shape{3, 4}, w, b);
  Tensor want = layer_norm(x.reshape({2, 12}), w.reshape({12}), b.reshape({12})).reshape({2, 3, 4});
  EXPECT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.to_vector(), want.to_vector());
  std::vector<float> plain = layer_norm(x, Shape{4}).to_vector(), xv = x.to_vector();
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 4; ++c) m += xv[size_t(r * 4 + c)] / 4.0;
    for (int c = 0; c < 4; ++c)
      v += (xv[size_t(r * 4 + c)] - m) * (xv[size_t(r * 4 + c)] - m) / 4.0;
    for (int c = 0; c < 4; ++c)
      EXPECT_NEAR(plain[size_t(r * 4 + c)], (xv[size_t(r * 4 + c)] - m) / std::sqrt(v + 1e-5),
                  1e-5);
  }
  EXPECT_THROW(layer_norm(x, Shape{3}), Error);
  EXPECT_THROW(layer_norm(x, Shape{3, 4}, Tensor::ones({12})), Error);

  // batch_norm over [N, C, L]: batch statistics, running ones updated in place, eval with them.
  Tensor z = Tensor::randn({4, 2, 5}, 14);
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  std::vector<float> bn = nn::functional::batch_norm(z, rm, rv, {}, {}, true, 0.5).to_vector(),
                     zv = z.to_vector();
  for (int c = 0; c < 2; ++c) {
    double m = 0, v = 0;
    for (int n = 0; n < 4; ++n)
      for (int l = 0; l < 5; ++l) m += zv[size_t(n * 10 + c * 5 + l)] / 20.0;
    for (int n = 0; n < 4; ++n)
      for (int l = 0; l < 5; ++l) v += std::pow(zv[size_t(n * 10 + c * 5 + l)] - m, 2) / 20.0;
    EXPECT_NEAR(bn[size_t(c * 5)], (zv[size_t(c * 5)] - m) / std::sqrt(v + 1e-5), 1e-5);
    EXPECT_NEAR(rm.to_vector()[size_t(c)], 0.5 * m, 1e-6);
    EXPECT_NEAR(rv.to_vector()[size_t(c)], 0.5 + 0.5 * v * 20.0 / 19.0, 1e-5);
  }
  std::vector<float> ev = nn::functional::batch_norm(z, rm, rv).to_vector(), rmv = rm.to_vector(),
                     rvv = rv.to_vector();
  EXPECT_NEAR(ev[7], (zv[7] - rmv[1]) / std::sqrt(rvv[1] + 1e-5), 1e-5);
  EXPECT_THROW(nn::functional::batch_norm(z, {}, {}), Error);
  EXPECT_THROW(nn::functional::batch_norm(Tensor::ones({1, 2}), {}, {}, {}, {}, true), Error);
}

TEST(TensorIndex, CompiledStepsReturnGradientsOfTheirArguments) {
  Tensor w = Tensor::from({1, -2, 3}, {3});
  w.requires_grad();
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor x = a[0];
        x.requires_grad();
        Tensor loss = (x * x * w).sum();
        loss.backward();
        return std::vector<Tensor>{loss, x.grad(), w.grad()};
      },
      {{DType::F32, {3}}});
  for (float k : {1.0f, 2.0f}) {
    HostTensor x(DType::F32, {3});
    for (int64_t i = 0; i < 3; ++i) x.set(i, double(k * float(i + 1)));
    std::vector<HostTensor> out = step({x});
    const std::vector<float> wv = {1, -2, 3};
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(out[1].get(i), 2.0 * x.get(i) * wv[size_t(i)]);  // d/dx sum(w x^2) = 2 w x
      EXPECT_EQ(out[2].get(i), x.get(i) * x.get(i));             // d/dw = x^2
    }
  }
}

TEST(TensorIndex, ViewMethods) {
  Tensor x = Tensor::arange(5) + 1.0;  // 1 2 3 4 5
  EXPECT_EQ(x.pad(0, 2, 1).to_vector(), (std::vector<float>{0, 0, 1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(x.stride(0, 2).to_vector(), (std::vector<float>{1, 3, 5}));
  EXPECT_EQ(x.shift(0, 2).to_vector(), (std::vector<float>{3, 4, 5, 1, 2}));
  EXPECT_EQ(x.shift(0, -1).to_vector(), (std::vector<float>{5, 1, 2, 3, 4}));
  Tensor u = x.unfold(0, 3);  // windows centred on each position, zero outside
  EXPECT_EQ(u.shape(), (Shape{5, 3}));
  EXPECT_EQ(u.to_vector(), (std::vector<float>{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5, 4, 5, 0}));
  EXPECT_EQ(x.unfold(0, 3, 2).to_vector()[0], 0.0f);       // reads -2, 0, 2
  EXPECT_EQ(x.unfold(0, 3, 2).to_vector()[8], 5.0f);       // position 2 reads 0, 2, 4
  EXPECT_EQ(x.unfold(0, 3, 1, 2).shape(), (Shape{3, 3}));  // positions 0, 2, 4
  EXPECT_EQ(x.unfold(0, 3, 1, 2).to_vector()[3], 2.0f);
  // Gradients are views too: d/dx sum(w * shift(x)) = shift(w) backwards.
  Tensor leaf = Tensor::arange(5);
  leaf.requires_grad();
  (leaf.shift(0, 2) * (Tensor::arange(5) + 1.0)).sum().backward();
  EXPECT_EQ(leaf.grad().to_vector(), (std::vector<float>{4, 5, 1, 2, 3}));
}

TEST(TensorIndex, PrintsAsPyTorch) {
  // Each expected string is str() of the same tensor in PyTorch 1.13 (float64 named without
  // PyTorch's module prefix).
  auto s = [](const Tensor& t) { return to_string(t); };
  EXPECT_EQ(s(Tensor::from({1, 2, 3}, {3})), "tensor([1., 2., 3.])");
  EXPECT_EQ(s(Tensor::from({1.5f, -2.25f, 3.0f, 4.125f}, {2, 2})),
            "tensor([[ 1.5000, -2.2500],\n        [ 3.0000,  4.1250]])");
  EXPECT_EQ(s(Tensor::from({1e-5f, 1.0f, 12345.0f}, {3})),
            "tensor([1.0000e-05, 1.0000e+00, 1.2345e+04])");
  EXPECT_EQ(s(Tensor::from({NAN, INFINITY, -1.5f, 0.0f}, {4})),
            "tensor([    nan,     inf, -1.5000,  0.0000])");
  EXPECT_EQ(s(Tensor::from(ints64({1, -20, 300, 4}, {2, 2}))),
            "tensor([[  1, -20],\n        [300,   4]])");
  EXPECT_EQ(s(Tensor::from({0.5f, 2.0f}, {2}).cast(DType::F64)),
            "tensor([0.5000, 2.0000], dtype=float64)");
  EXPECT_EQ(s(Tensor::scalar(2.5)), "tensor(2.5000)");
  EXPECT_EQ(s(Tensor::zeros({0, 3})), "tensor([], size=(0, 3))");
  EXPECT_EQ(s(Tensor::arange(8).reshape({2, 2, 2})),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  EXPECT_EQ(s(Tensor::arange(2000).reshape({2, 1000})),
            "tensor([[0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 9.9700e+02, 9.9800e+02,\n"
            "         9.9900e+02],\n"
            "        [1.0000e+03, 1.0010e+03, 1.0020e+03,  ..., 1.9970e+03, 1.9980e+03,\n"
            "         1.9990e+03]])");
  EXPECT_EQ(s(Tensor::arange(30) / 7.0),
            "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n"
            "        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,\n"
            "        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714, 3.7143,\n"
            "        3.8571, 4.0000, 4.1429])");
  std::ostringstream os;
  Tensor p = Tensor::from({1, 2}, {2});
  p.requires_grad();
  os << p;
  EXPECT_EQ(os.str(), "tensor([1., 2.], requires_grad=True)");
}

}  // namespace
}  // namespace synoros
