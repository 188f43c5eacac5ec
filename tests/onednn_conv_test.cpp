// The oneDNN convolution lowering: recognised from the unfold views, checked against float64 on
// awkward geometries, independent of the thread count, selected by measurement and cached.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <tuple>
#include <sstream>

#include "kernels/cpu/conv_direct.hpp"
#include "kernels/kernel_api.hpp"
#include "kernels/onednn_conv.hpp"
#include "kernels/providers.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct Geo {
  int64_t N, C, H, W, O, k, s, p, d;
};

// Direct float64 convolution (PyTorch semantics, no bias).
double ref_at(const HostTensor& x, const HostTensor& w, const Geo& g, int64_t Ho, int64_t Wo, int64_t i) {
  int64_t j = i % Wo, h = i / Wo % Ho, o = i / (Wo * Ho) % g.O, n = i / (Wo * Ho * g.O);
  double acc = 0;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t a = 0; a < g.k; ++a)
      for (int64_t e = 0; e < g.k; ++e) {
        int64_t hi = h * g.s + a * g.d - g.p, wi = j * g.s + e * g.d - g.p;
        if (hi < 0 || hi >= g.H || wi < 0 || wi >= g.W) continue;
        acc += x.get(((n * g.C + c) * g.H + hi) * g.W + wi) * w.get(((o * g.C + c) * g.k + a) * g.k + e);
      }
  return acc;
}

struct Forced {
  explicit Forced(const char* name) { kernels::force_conv_lowering(name); }
  ~Forced() { kernels::force_conv_lowering(""); }
};

bool uses_onednn_conv(Plan& p) {
  for (const LaunchInfo& li : p.launch_info())
    if (li.kernel.rfind("onednn-conv", 0) == 0 || li.kernel.rfind("onednn-wino", 0) == 0 ||
        li.kernel.rfind("onednn-bwd", 0) == 0)
      return true;
  return false;
}

// The kernels of a plan's oneDNN convolutions, joined with ';'.
std::string onednn_kernels(Plan& p) {
  std::string k;
  for (const LaunchInfo& li : p.launch_info())
    if (li.kernel.rfind("onednn", 0) == 0) k += li.kernel + ";";
  return k;
}

// Compiles conv(x) * scale for the geometry; returns the output and whether oneDNN's lowering ran.
HostTensor run_conv(const Geo& g, const HostTensor& x, nn::Conv2d& conv, bool& onednn, double scale = 1.0) {
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{scale == 1.0 ? conv(a[0]) : conv(a[0]) * scale}; },
      {{DType::F32, {g.N, g.C, g.H, g.W}}});
  onednn = uses_onednn_conv(step.plan());
  return step({x})[0];
}

// Computes with 1 and then 2 threads; both must have taken oneDNN's lowering and agree bit for
// bit. `compute(onednn)` returns the result and says whether the lowering ran. Returns 1 thread's.
template <class F>
HostTensor at_one_and_two_threads(F compute, bool need_onednn = true) {
  int saved = num_threads();
  set_num_threads(1);
  bool onednn1 = false, onednn2 = false;
  HostTensor a = compute(onednn1);
  set_num_threads(2);
  HostTensor b = compute(onednn2);
  set_num_threads(saved);
  EXPECT_TRUE((onednn1 && onednn2) || !need_onednn) << "the contraction was not recognised as a convolution";
  EXPECT_EQ(0, std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes())) << "bits differ between 1 and 2 threads";
  return a;
}

// A geometry and the oneDNN algorithm forced for it ("onednn-wino" and "onednn-bwd" fall back to
// the direct one where they do not apply).
class OneDnnConv : public ::testing::TestWithParam<std::tuple<Geo, const char*>> {
 protected:
  void SetUp() override {
    saved_fast_ = kernels::fast_kernels();
    kernels::set_fast_kernels(true);
    if (kernels::active_isa() != kernels::best_isa())
      GTEST_SKIP() << "oneDNN's convolution is offered only in fast mode at the CPU's own ISA";
  }
  void TearDown() override { kernels::set_fast_kernels(saved_fast_); }
  bool saved_fast_ = false;
  static Geo geo() { return std::get<0>(GetParam()); }
  static const char* lowering() { return std::get<1>(GetParam()); }
};

// The weight gradient of loss = sum(conv(x) * r), compiled; whether oneDNN's lowering ran for it.
HostTensor weight_grad(const HostTensor& x, const HostTensor& r, nn::Conv2d& conv, bool& onednn) {
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor loss = (conv(a[0]) * a[1]).sum();
        loss.backward();
        return std::vector<Tensor>{conv.weight.grad()};
      },
      {{DType::F32, x.shape}, {DType::F32, r.shape}});
  onednn = uses_onednn_conv(step.plan());  // the only convolution left: dW (y itself is not needed)
  return step({x, r})[0];
}

TEST_P(OneDnnConv, ForcedWeightGradientMatchesFloat64AndIgnoresTheThreadCount) {
  Geo g = geo();
  Forced f(lowering());
  nn::Conv2d conv(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false);
  HostTensor x = synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 9);
  int64_t Ho = (g.H + 2 * g.p - g.d * (g.k - 1) - 1) / g.s + 1, Wo = (g.W + 2 * g.p - g.d * (g.k - 1) - 1) / g.s + 1;
  HostTensor r = synoros::testing::random_tensor({DType::F32, {g.N, g.O, Ho, Wo}}, 10);
  HostTensor dw1 = at_one_and_two_threads([&](bool& onednn) { return weight_grad(x, r, conv, onednn); });
  if (::testing::Test::HasFailure()) return;
  double klen = double(g.N * Ho * Wo);
  for (int64_t i = 0; i < dw1.numel(); ++i) {
    int64_t e = i % g.k, a = i / g.k % g.k, c = i / (g.k * g.k) % g.C, o = i / (g.k * g.k * g.C);
    double want = 0, mag = 0;
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t h = 0; h < Ho; ++h)
        for (int64_t j = 0; j < Wo; ++j) {
          int64_t hi = h * g.s + a * g.d - g.p, wi = j * g.s + e * g.d - g.p;
          if (hi < 0 || hi >= g.H || wi < 0 || wi >= g.W) continue;
          double t = x.get(((n * g.C + c) * g.H + hi) * g.W + wi) * r.get(((n * g.O + o) * Ho + h) * Wo + j);
          want += t;
          mag += std::fabs(t);
        }
    ASSERT_NEAR(dw1.get(i), want, 4 * 1.2e-7 * (std::sqrt(klen) + 2) * mag + 1e-12) << "element " << i;
  }
}

// The input gradient of loss = sum(conv(x) * r), compiled: it depends on r and the weights only.
// Stride 1 makes it a convolution of r with the window-flipped weights (whose unfolds come in the
// reverse order), a larger stride the fold(fold(einsum)) chain run as oneDNN's backward-data.
HostTensor data_grad(const HostTensor& x, const HostTensor& r, nn::Conv2d& conv, bool& onednn,
                     std::string* kernels = nullptr) {
  Tensor xt = Tensor::from(x).requires_grad();
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor loss = (conv(xt) * a[0]).sum();
        loss.backward();
        return std::vector<Tensor>{xt.grad()};
      },
      {{DType::F32, r.shape}});
  onednn = uses_onednn_conv(step.plan());
  if (kernels)
    for (const LaunchInfo& li : step.plan().launch_info()) *kernels += li.kernel + ";";
  return step({r})[0];
}

int64_t out_size(int64_t n, const Geo& g) { return (n + 2 * g.p - g.d * (g.k - 1) - 1) / g.s + 1; }

TEST_P(OneDnnConv, ForcedDataGradientMatchesFloat64AndIgnoresTheThreadCount) {
  Geo g = geo();
  Forced f(lowering());
  nn::Conv2d conv(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false);
  HostTensor x = synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 9);
  int64_t Ho = out_size(g.H, g), Wo = out_size(g.W, g);
  HostTensor r = synoros::testing::random_tensor({DType::F32, {g.N, g.O, Ho, Wo}}, 10);
  // One input channel: the transposed convolution has one output channel, a window contraction
  // that the engine's window kernel takes before any convolution lowering is considered.
  HostTensor dx = at_one_and_two_threads([&](bool& onednn) { return data_grad(x, r, conv, onednn); }, g.C > 1);
  if (::testing::Test::HasFailure()) return;
  HostTensor w = conv.weight.value();
  double klen = double(g.O * g.k * g.k);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    int64_t q = i % g.W, h = i / g.W % g.H, c = i / (g.W * g.H) % g.C, n = i / (g.W * g.H * g.C);
    double want = 0, mag = 0;
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t a = 0; a < g.k; ++a)
        for (int64_t e = 0; e < g.k; ++e) {
          int64_t hh = h + g.p - a * g.d, ww = q + g.p - e * g.d;
          if (hh < 0 || ww < 0 || hh % g.s || ww % g.s || hh / g.s >= Ho || ww / g.s >= Wo) continue;
          double t = r.get(((n * g.O + o) * Ho + hh / g.s) * Wo + ww / g.s) * w.get(((o * g.C + c) * g.k + a) * g.k + e);
          want += t;
          mag += std::fabs(t);
        }
    ASSERT_NEAR(dx.get(i), want, 4 * 1.2e-7 * (std::sqrt(klen) + 2) * mag + 1e-12) << "element " << i;
  }
}

// With the GEMM lowering forced, the data-gradient chain runs as its own kernels inside one
// launch: the same bits as the unfused plan, where the einsum and both folds are launches.
TEST(OneDnnConvSelection, DataGradientChainKeepsTheBitsOfTheUnfusedPlan) {
  Geo g{4, 8, 12, 12, 16, 3, 2, 1, 1};
  Forced f("gemm");
  HostTensor x = synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 9);
  HostTensor r = synoros::testing::random_tensor({DType::F32, {g.N, g.O, out_size(g.H, g), out_size(g.W, g)}}, 10);
  nn::Conv2d conv(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false), twin(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false);
  bool onednn = false;
  std::string fused_kernels, unfused_kernels, sequence_kernels;
  HostTensor fused = data_grad(x, r, conv, onednn, &fused_kernels);
  EXPECT_FALSE(onednn);
  // The chain ran as one launch: the engine's one-pass kernel where it applies, else the chain's
  // own kernels in sequence.
  const bool vector_isa = kernels::active_isa() != kernels::Isa::Scalar;
  EXPECT_NE(fused_kernels.find(vector_isa ? "engine-conv-data" : "+fold"), std::string::npos) << fused_kernels;
  HostTensor sequence;
  {
    synoros::testing::ConvDirectKernels off(false);
    nn::Conv2d third(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false);
    sequence = data_grad(x, r, third, onednn, &sequence_kernels);
  }
  EXPECT_NE(sequence_kernels.find("+fold"), std::string::npos) << sequence_kernels;
  ASSERT_EQ(sequence.bytes(), fused.bytes());
  EXPECT_EQ(0, std::memcmp(fused.buffer->data(), sequence.buffer->data(), fused.bytes()));
  HostTensor unfused;
  {
    config::ScopedOverride no_fusion("SYNOROS_NO_FUSION", "1");
    unfused = data_grad(x, r, twin, onednn, &unfused_kernels);  // twin: same weights, its own plan
  }
  EXPECT_EQ(unfused_kernels.find("+fold"), std::string::npos) << unfused_kernels;
  ASSERT_EQ(fused.bytes(), unfused.bytes());
  EXPECT_EQ(0, std::memcmp(fused.buffer->data(), unfused.buffer->data(), fused.bytes()));
}

TEST_P(OneDnnConv, ForcedLoweringMatchesFloat64AndIgnoresTheThreadCount) {
  Geo g = geo();
  Forced f(lowering());
  nn::Conv2d conv(g.C, g.O, g.k, 5, g.s, g.p, g.d, 1, false);
  HostTensor x = synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 9);
  HostTensor y1 = at_one_and_two_threads([&](bool& onednn) { return run_conv(g, x, conv, onednn); });
  if (::testing::Test::HasFailure()) return;
  int64_t Ho = y1.shape[2], Wo = y1.shape[3];
  HostTensor w = conv.weight.value();
  double eps = 1.2e-7, klen = double(g.C * g.k * g.k);
  for (int64_t i = 0; i < y1.numel(); ++i) {
    double want = ref_at(x, w, g, Ho, Wo, i);
    ASSERT_NEAR(y1.get(i), want, 8 * eps * (std::sqrt(klen) + 2) * (1 + std::fabs(want)) * 4) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Geometries, OneDnnConv,
                         ::testing::Combine(::testing::Values(Geo{2, 3, 8, 8, 4, 3, 1, 1, 1},     // same 3x3
                                           Geo{3, 4, 9, 7, 6, 3, 2, 1, 1},     // stride 2, odd sizes
                                           Geo{1, 2, 10, 10, 3, 3, 1, 2, 2},   // dilation 2
                                           Geo{2, 3, 7, 7, 5, 1, 2, 0, 1},     // 1x1 stride 2
                                           Geo{5, 1, 12, 12, 6, 5, 1, 2, 1},   // 5x5 pad 2
                                           Geo{2, 2, 6, 5, 3, 3, 1, 0, 1},     // valid (no padding)
                                           Geo{2, 3, 11, 11, 4, 7, 2, 3, 1},   // 7x7 stride 2
                                           Geo{9, 16, 14, 14, 16, 3, 1, 1, 1},   // one chunk of 9
                                           Geo{5, 32, 28, 28, 32, 3, 1, 1, 1},   // 2+2+1 image chunks
                                           Geo{100, 1, 28, 28, 16, 3, 1, 1, 1}),  // many chunks
                                            ::testing::Values("onednn-conv", "onednn-wino", "onednn-bwd")));

// Blocked weights are kept between runs (redone only when the weights change), so they must not
// live where other launches write between runs: a two-layer network run twice gives the same
// bits, and the same values as the GEMM lowering.
TEST(OneDnnConvSelection, KeptWeightsSurviveOtherLaunchesBetweenRuns) {
  synoros::testing::FastKernels fast;
  if (kernels::active_isa() != kernels::best_isa())
    GTEST_SKIP() << "oneDNN's convolution is offered only in fast mode at the CPU's own ISA";
  nn::Conv2d c1(8, 16, 3, 5, 1, 1, 1, 1, false), c2(16, 16, 3, 6, 1, 1, 1, 1, false), c3(16, 16, 3, 7, 1, 1, 1, 1, false);
  HostTensor x = synoros::testing::random_tensor({DType::F32, {6, 8, 20, 20}}, 3);
  auto run = [&](const char* lowering, int times) {
    Forced f(lowering);
    CompiledStep step = compile(
        [&](const std::vector<Tensor>& a) {
          return std::vector<Tensor>{c3(c2((c1(a[0]) * 2.0).relu()).relu()) + 1.0};
        },
        {{DType::F32, x.shape}});
    std::vector<HostTensor> outs;
    for (int i = 0; i < times; ++i) outs.push_back(step({x})[0]);
    return outs;
  };
  std::vector<HostTensor> a = run("onednn-conv", 3), ref = run("gemm", 1);
  for (int i = 1; i < 3; ++i)
    ASSERT_EQ(0, std::memcmp(a[0].buffer->data(), a[size_t(i)].buffer->data(), a[0].bytes())) << "run " << i;
  for (int64_t i = 0; i < ref[0].numel(); ++i)
    ASSERT_NEAR(a[0].get(i), ref[0].get(i), 1e-4 * (1 + std::fabs(ref[0].get(i)))) << "element " << i;
}

// Forced Winograd runs where it applies (3x3, stride 1, no dilation), forward and both gradients,
// and the direct algorithm elsewhere.
TEST(OneDnnConvSelection, WinogradTakesThreeByThreeStrideOneOnly) {
  synoros::testing::FastKernels fast;
  if (kernels::active_isa() != kernels::best_isa())
    GTEST_SKIP() << "oneDNN's convolution is offered only in fast mode at the CPU's own ISA";
  if (kernels::best_isa() != kernels::Isa::Avx512)
    GTEST_SKIP() << "oneDNN 2.6 implements Winograd convolutions for AVX-512 only (a forced Winograd runs direct)";
  Forced f("onednn-wino");
  for (int64_t stride : {1, 2}) {
    nn::Conv2d conv(16, 16, 3, 5, stride, 1, 1, 1, false);
    Tensor x = Tensor::from(synoros::testing::random_tensor({DType::F32, {4, 16, 12, 12}}, 4)).requires_grad();
    CompiledStep step = compile(
        [&](const std::vector<Tensor>& a) {
          Tensor loss = (conv(x) * a[0]).sum();
          loss.backward();
          return std::vector<Tensor>{x.grad(), conv.weight.grad()};
        },
        {{DType::F32, {4, 16, 12 / stride, 12 / stride}}});
    std::string k = onednn_kernels(step.plan());
    if (stride == 1) {
      EXPECT_EQ(k.find("onednn-conv"), std::string::npos) << k;
      EXPECT_NE(k.find("onednn-wino"), std::string::npos) << k;
    } else {
      EXPECT_EQ(k.find("onednn-wino"), std::string::npos) << k;
      EXPECT_NE(k.find("onednn-conv"), std::string::npos) << k;
    }
  }
}

// The transposed lowering (a stride-1 forward convolution as oneDNN's backward-data convolution
// with flipped weights) runs for the stride-1 forward convolution and for the stride-1 data
// gradient, which autodiff writes as a forward convolution; the strided gradient and the weight
// gradient keep the direct algorithm. The values are checked against float64 by the parametrized
// tests above; here, that it is taken where it applies, and that the plan's gradient matches the
// GEMM lowering's.
TEST(OneDnnConvSelection, TransposedLoweringTakesStrideOneForwardConvolutionsOnly) {
  synoros::testing::FastKernels fast;
  if (kernels::active_isa() != kernels::best_isa())
    GTEST_SKIP() << "oneDNN's convolution is offered only in fast mode at the CPU's own ISA";
  for (int64_t stride : {1, 2}) {
    nn::Conv2d conv(6, 16, 5, 5, stride, 0, 1, 1, false);
    HostTensor xh = synoros::testing::random_tensor({DType::F32, {4, 6, 14, 14}}, 4);
    int64_t o = stride == 1 ? 10 : 5;
    HostTensor r = synoros::testing::random_tensor({DType::F32, {4, 16, o, o}}, 6);
    auto grads = [&](const char* lowering, std::string& k) {
      Forced f(lowering);
      bool onednn = false;
      return data_grad(xh, r, conv, onednn, &k);
    };
    std::string k, kg;
    HostTensor dx = grads("onednn-bwd", k), ref = grads("gemm", kg);
    if (stride == 1) {
      EXPECT_NE(k.find("onednn-bwd"), std::string::npos) << k;
    } else {
      EXPECT_EQ(k.find("onednn-bwd"), std::string::npos) << k;
    }
    for (int64_t i = 0; i < dx.numel(); ++i)
      ASSERT_NEAR(dx.get(i), ref.get(i), 1e-4 * (1 + std::fabs(ref.get(i)))) << "stride " << stride << " element " << i;
  }
}

TEST(OneDnnConvSelection, AnUnknownLoweringIsAnError) {
  EXPECT_THROW(kernels::force_conv_lowering("off"), Error);
  EXPECT_NO_THROW(kernels::force_conv_lowering(""));
}

TEST(OneDnnConvSelection, GroupedConvolutionsAreNotTaken) {
  Forced f("onednn-conv");
  nn::Conv2d conv(4, 4, 3, 5, 1, 1, 1, 2, false);
  CompiledStep step = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{conv(a[0])}; },
                              {{DType::F32, {2, 4, 6, 6}}});
  EXPECT_FALSE(uses_onednn_conv(step.plan()));
}

TEST(OneDnnConvSelection, ChoiceIsMeasuredOnceAndCached) {
  synoros::testing::FastKernels fast;
  if (kernels::active_isa() != kernels::best_isa())
    GTEST_SKIP() << "oneDNN's convolution is offered only in fast mode at the CPU's own ISA";
  kernels::clear_tuning_cache();
  nn::Conv2d conv(8, 8, 3, 5, 1, 1, 1, 1, false);
  Geo g{4, 8, 10, 10, 8, 3, 1, 1, 1};
  HostTensor x = synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 2);
  bool first = false, second = false;
  HostTensor y1 = run_conv(g, x, conv, first);
  std::ifstream f(kernels::tuning_cache_path());
  std::stringstream text;
  text << f.rdbuf();
  std::string key = "conv2d N=4 C=8 H=10 W=10 O=8 k=3x3 s=1,1 d=1,1 p=1,1,1,1";
  size_t at = text.str().find(key);
  ASSERT_NE(at, std::string::npos) << "no convolution choice in the tuning cache";
  std::string line = text.str().substr(at, text.str().find('\n', at) - at);
  EXPECT_EQ(first, line.find("\tonednn-conv\t") != std::string::npos ||
                       line.find("\tonednn-wino\t") != std::string::npos ||
                       line.find("\tonednn-bwd\t") != std::string::npos)
      << line;
  // As a new process would: another plan with the same convolution reads the choice from the file.
  kernels::reload_tuning_cache();
  HostTensor y2 = run_conv(g, x, conv, second, 2.0);
  EXPECT_EQ(first, second);
  for (int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(float(y2.get(i)), 2.0f * float(y1.get(i))) << i;
}

}  // namespace
