// The engine's direct convolutions -- the padded implicit GEMM (stride 1, forward and the data
// gradient's convolution of dY with the flipped weights), the one-pass strided data gradient and
// the weight gradient -- taken wherever they apply, within float64's bounds, and exactly the bits
// of the gather + GEMM and fold lowerings, at every thread count, on every instruction set and with
// non-finite values.
#include "kernels/cpu/conv_direct.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "kernels/cpu/window_einsum.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct Geo {
  const char* name;
  int64_t N, C, H, W, O, k, p, d, s = 1;
};

void PrintTo(const Geo& g, std::ostream* os) {
  *os << g.name;
}

std::vector<Geo> geos() {
  return {
      {"resnet_16", 3, 16, 28, 28, 16, 3, 1, 1},
      // 7 x 7 images share chunks of eight; eleven images leave the last chunk partial.
      {"seven_by_seven_chunks", 11, 24, 7, 7, 40, 3, 1, 1},
      {"lenet_conv1", 3, 1, 28, 28, 6, 5, 2, 1},
      {"lenet_conv2_valid", 2, 6, 14, 14, 16, 5, 0, 1},
      {"uneven_channels", 2, 3, 9, 11, 7, 3, 1, 1},
      {"dilated", 1, 4, 12, 20, 5, 3, 2, 2},
      {"wide_padding", 2, 3, 6, 5, 9, 3, 2, 1},
      {"pointwise", 2, 12, 10, 10, 17, 1, 0, 1},
      {"one_output_channel", 1, 5, 16, 3, 1, 3, 1, 1},
      // The weight gradient's chains continue across chunks of ten images.
      {"weight_chunks", 12, 4, 24, 24, 12, 3, 1, 1},
      // Strided: phase planes forward; the data gradient's fold chain in one pass.
      {"resnet_downsample", 3, 16, 28, 28, 32, 3, 1, 1, 2},
      {"shortcut_1x1", 2, 16, 28, 28, 32, 1, 0, 1, 2},
      {"odd_sizes_stride_2", 2, 5, 13, 11, 7, 3, 1, 1, 2},
      {"dilated_stride_3", 1, 3, 17, 19, 6, 3, 2, 2, 3},
      // The strided input gradient over several blocks of channels.
      {"channel_blocks_stride_2", 2, 64, 28, 28, 32, 3, 1, 1, 2},
      // Rows of several 16-lane blocks per phase, and a stride-2 row whose last 32 outputs are
      // partial past their first 16 (50 = 32 + 18), and a wide stride of 3.
      {"wide_stride_2", 2, 8, 20, 70, 8, 3, 1, 1, 2},
      {"width_50_stride_2", 1, 4, 9, 50, 6, 3, 1, 1, 2},
      {"wide_stride_3", 1, 3, 8, 61, 5, 3, 1, 1, 3},
  };
}

int64_t out_size(int64_t n, const Geo& g) {
  return (n + 2 * g.p - g.d * (g.k - 1) - 1) / g.s + 1;
}

// The reference: gather + GEMM (the direct and window kernels off, restored afterwards).
struct DirectOff {
  synoros::testing::ConvDirectKernels off{false};
  bool window = kernels::window_einsum_enabled();
  DirectOff() { kernels::set_window_einsum(false); }
  ~DirectOff() { kernels::set_window_einsum(window); }
};

// Whether the plan ran `kernel` (the direct kernels' labels all start "engine-conv").
bool took(CompiledStep& step, const std::string& kernel) {
  for (const LaunchInfo& li : step.plan().launch_info())
    if (li.kernel == kernel) return true;
  return false;
}

bool direct_applies() {
  return kernels::active_isa() != kernels::Isa::Scalar;
}

enum class What { Forward, Data, Weights };

// conv(x), or the input or weight gradient of sum(conv(x) * r), compiled in canonical mode;
// `direct`: whether the engine's direct kernel for it ran.
HostTensor run(const Geo& g, const HostTensor& x, const HostTensor& w, const HostTensor& r,
               What what, bool& direct) {
  synoros::testing::StrictKernels canonical;
  synoros::testing::WinogradConvolutions contraction{false};  // these tests are of its kernels
  Tensor wt = Tensor::from(w);
  if (what == What::Weights) wt.requires_grad();
  auto conv = [&](const Tensor& in) { return nn::conv2d(in, wt, {}, g.s, g.p, g.d); };
  CompiledStep step =
      what == What::Forward
          ? compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{conv(a[0])}; },
                    {{DType::F32, x.shape}})
          : compile(
                [&](const std::vector<Tensor>& a) {
                  Tensor xt = a[0];
                  if (what == What::Data) xt.requires_grad();
                  Tensor loss = (conv(xt) * a[1]).sum();
                  loss.backward();
                  return std::vector<Tensor>{what == What::Data ? xt.grad() : wt.grad()};
                },
                {{DType::F32, x.shape}, {DType::F32, r.shape}});
  direct = what == What::Forward   ? took(step, "engine-conv")
           : what == What::Weights ? took(step, "engine-conv-weights")
                                   : took(step, g.s == 1 ? "engine-conv" : "engine-conv-data");
  return what == What::Forward ? step({x})[0] : step({x, r})[0];
}

struct Inputs {
  HostTensor x, w, r;
};

Inputs inputs(const Geo& g) {
  return {synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 21),
          synoros::testing::random_tensor({DType::F32, {g.O, g.C, g.k, g.k}}, 22),
          synoros::testing::random_tensor(
              {DType::F32, {g.N, g.O, out_size(g.H, g), out_size(g.W, g)}}, 23)};
}

void expect_same_bits(const HostTensor& a, const HostTensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double u = a.get(i), v = b.get(i);
    if (std::isnan(u) && std::isnan(v)) continue;
    ASSERT_EQ(std::signbit(u), std::signbit(v)) << what << ": element " << i;
    ASSERT_EQ(u, v) << what << ": element " << i;
  }
}

class ConvDirect : public ::testing::TestWithParam<Geo> {};

TEST_P(ConvDirect, ForwardMatchesFloat64AndTheGatherGemmBitForBit) {
  const Geo& g = GetParam();
  Inputs in = inputs(g);
  bool direct = false, off = true;
  HostTensor y = run(g, in.x, in.w, in.r, What::Forward, direct);
  EXPECT_EQ(direct, direct_applies() && (g.s == 1 || g.k > 1)) << g.name;
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, What::Forward, off);
  }
  EXPECT_FALSE(off);
  expect_same_bits(y, ref, g.name);
  const int64_t OH = out_size(g.H, g), OW = out_size(g.W, g);
  for (int64_t i = 0; i < y.numel(); ++i) {
    int64_t ow = i % OW, oh = i / OW % OH, o = i / (OW * OH) % g.O, n = i / (OW * OH * g.O);
    double want = 0, mag = 0;
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t a = 0; a < g.k; ++a)
        for (int64_t b = 0; b < g.k; ++b) {
          int64_t h = oh * g.s + a * g.d - g.p, w = ow * g.s + b * g.d - g.p;
          if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
          double t = in.x.get(((n * g.C + c) * g.H + h) * g.W + w) *
                     in.w.get(((o * g.C + c) * g.k + a) * g.k + b);
          want += t, mag += std::fabs(t);
        }
    ASSERT_NEAR(y.get(i), want, 1.2e-7 * double(g.C * g.k * g.k + 2) * mag + 1e-30)
        << g.name << " element " << i;
  }
}

TEST_P(ConvDirect, DataGradientMatchesTheGatherGemmBitForBit) {
  const Geo& g = GetParam();
  Inputs in = inputs(g);
  bool direct = false, off = true;
  HostTensor dx = run(g, in.x, in.w, in.r, What::Data, direct);
  // Stride 1: the gradient's window is the forward's flipped, padded by d (k - 1) - p (a padding
  // wider than "same" leaves it a cropped view, which autodiff writes otherwise). Strided: the
  // fold(fold(einsum)) chain.
  if (g.s > 1 || 2 * g.p <= g.d * (g.k - 1)) {
    EXPECT_EQ(direct, direct_applies()) << g.name;
  }
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, What::Data, off);
  }
  EXPECT_FALSE(off);
  expect_same_bits(dx, ref, g.name);
}

TEST_P(ConvDirect, WeightGradientMatchesFloat64AndTheGatherGemmBitForBit) {
  const Geo& g = GetParam();
  Inputs in = inputs(g);
  bool direct = false, off = true;
  HostTensor dw = run(g, in.x, in.w, in.r, What::Weights, direct);
  // Windows only: a 1 x 1 convolution's gather is no larger than its input.
  EXPECT_EQ(direct, direct_applies() && g.k > 1) << g.name;
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, What::Weights, off);
  }
  EXPECT_FALSE(off);
  expect_same_bits(dw, ref, g.name);
  const int64_t OH = out_size(g.H, g), OW = out_size(g.W, g);
  for (int64_t i = 0; i < dw.numel(); ++i) {
    int64_t b = i % g.k, a = i / g.k % g.k, c = i / (g.k * g.k) % g.C, o = i / (g.k * g.k * g.C);
    double want = 0, mag = 0;
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t h = oh * g.s + a * g.d - g.p, w = ow * g.s + b * g.d - g.p;
          if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
          double t = in.x.get(((n * g.C + c) * g.H + h) * g.W + w) *
                     in.r.get(((n * g.O + o) * OH + oh) * OW + ow);
          want += t, mag += std::fabs(t);
        }
    ASSERT_NEAR(dw.get(i), want, 1.2e-7 * double(g.N * OH * OW + 2) * mag + 1e-30)
        << g.name << " element " << i;
  }
}

TEST_P(ConvDirect, SameBitsOnEveryIsaAndThreadCount) {
  const Geo& g = GetParam();
  Inputs in = inputs(g);
  bool direct = false;
  HostTensor y = run(g, in.x, in.w, in.r, What::Forward, direct),
             dx = run(g, in.x, in.w, in.r, What::Data, direct),
             dw = run(g, in.x, in.w, in.r, What::Weights, direct);
  synoros::testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int t) {
    std::string at = std::string(g.name) + " on " + kernels::isa_name(isa) + " with " +
                     std::to_string(t) + " threads";
    expect_same_bits(run(g, in.x, in.w, in.r, What::Forward, direct), y, at);
    EXPECT_EQ(direct, direct_applies() && (g.s == 1 || g.k > 1)) << at;
    expect_same_bits(run(g, in.x, in.w, in.r, What::Data, direct), dx, at);
    expect_same_bits(run(g, in.x, in.w, in.r, What::Weights, direct), dw, at);
  });
}

INSTANTIATE_TEST_SUITE_P(Geometries, ConvDirect, ::testing::ValuesIn(geos()),
                         [](const ::testing::TestParamInfo<Geo>& i) {
                           return std::string(i.param.name);
                         });

// Infinite weights meet padding (0 * inf = NaN) and a NaN pixel spreads over its window exactly
// as through gather + GEMM; the positions the kernel computes and throws away change nothing.
TEST(ConvDirectEdges, NonFiniteValuesReachTheSameOutputsAsGatherGemm) {
  Geo g = geos()[0];
  Inputs in = inputs(g);
  in.w.set(0, std::numeric_limits<double>::infinity());
  in.w.set(5, -std::numeric_limits<double>::infinity());
  in.x.set(3 * g.W + 27, std::numeric_limits<double>::quiet_NaN());         // the end of a row
  in.x.set(g.H * g.W + 10 * g.W, std::numeric_limits<double>::infinity());  // the start of one
  bool direct = false, off = true;
  HostTensor y = run(g, in.x, in.w, in.r, What::Forward, direct);
  ASSERT_EQ(direct, direct_applies());
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, What::Forward, off);
  }
  expect_same_bits(y, ref, "non-finite");
  EXPECT_TRUE(std::isnan(y.get(0)));  // output (0, 0, 0, 0) reads padding at the infinite tap
  int64_t finite = 0;
  for (int64_t i = 0; i < y.numel(); ++i) finite += std::isfinite(y.get(i));
  EXPECT_GT(finite, 0);  // not everything poisoned: the padding's zeros stay zeros
}

// The strided input gradient with infinite weights and NaN and infinite upstream values: each
// reaches dX's pixels through its taps and folds exactly as through the fold chain.
TEST(ConvDirectEdges, NonFiniteGradientsOfAStridedConvolutionFoldAsTheChainDoes) {
  for (const Geo& g : {geos()[10], Geo{"wide_stride_2", 2, 8, 20, 70, 8, 3, 1, 1, 2}}) {
    Inputs in = inputs(g);
    in.w.set(1, std::numeric_limits<double>::infinity());
    in.w.set(7, -std::numeric_limits<double>::infinity());
    const int64_t OW = out_size(g.W, g);
    in.r.set(OW - 1, std::numeric_limits<double>::quiet_NaN());  // the end of a row
    in.r.set(3 * OW, std::numeric_limits<double>::infinity());   // the start of one
    bool direct = false, off = true;
    HostTensor dx = run(g, in.x, in.w, in.r, What::Data, direct);
    ASSERT_EQ(direct, direct_applies()) << g.name;
    HostTensor ref;
    {
      DirectOff o;
      ref = run(g, in.x, in.w, in.r, What::Data, off);
    }
    expect_same_bits(dx, ref, g.name);
    int64_t nan = 0;
    for (int64_t i = 0; i < dx.numel(); ++i) nan += std::isnan(dx.get(i));
    EXPECT_GT(nan, 0) << g.name;
  }
}

}  // namespace
