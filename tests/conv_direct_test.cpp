// The engine's direct convolutions -- the padded implicit GEMM (stride 1, forward and the data
// gradient's convolution of dY with the flipped weights) and the one-pass strided data gradient
// -- taken wherever they apply, within float64's bounds, and exactly the bits of the gather +
// GEMM and fold lowerings, at every thread count, on every instruction set and with non-finite
// values.
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
      // Strided: the forward stays gather + GEMM; the data gradient's fold chain is one pass.
      {"resnet_downsample", 3, 16, 28, 28, 32, 3, 1, 1, 2},
      {"shortcut_1x1", 2, 16, 28, 28, 32, 1, 0, 1, 2},
      {"odd_sizes_stride_2", 2, 5, 13, 11, 7, 3, 1, 1, 2},
      {"dilated_stride_3", 1, 3, 17, 19, 6, 3, 2, 2, 3},
  };
}

int64_t out_size(int64_t n, const Geo& g) {
  return (n + 2 * g.p - g.d * (g.k - 1) - 1) / g.s + 1;
}

struct DirectOff {
  DirectOff() {
    kernels::set_conv_direct(false);
    kernels::set_window_einsum(false);  // the reference: gather + GEMM
  }
  ~DirectOff() {
    kernels::set_conv_direct(true);
    kernels::set_window_einsum(true);
  }
};

bool took_direct(CompiledStep& step) {
  for (const LaunchInfo& li : step.plan().launch_info())
    if (li.kernel.find("engine-conv") != std::string::npos) return true;
  return false;
}

bool direct_applies() {
  return kernels::active_isa() != kernels::Isa::Scalar;
}

// conv(x) (data = false) or d(sum(conv(x) * r))/dx (data = true), compiled in canonical mode.
HostTensor run(const Geo& g, const HostTensor& x, const HostTensor& w, const HostTensor& r,
               bool data, bool& direct) {
  synoros::testing::StrictKernels canonical;
  Tensor wt = Tensor::from(w);
  CompiledStep step = data
                          ? compile(
                                [&](const std::vector<Tensor>& a) {
                                  Tensor xt = a[0];
                                  xt.requires_grad();
                                  Tensor loss = (nn::conv2d(xt, wt, {}, g.s, g.p, g.d) * a[1]).sum();
                                  loss.backward();
                                  return std::vector<Tensor>{xt.grad()};
                                },
                                {{DType::F32, x.shape}, {DType::F32, r.shape}})
                          : compile(
                                [&](const std::vector<Tensor>& a) {
                                  return std::vector<Tensor>{nn::conv2d(a[0], wt, {}, g.s, g.p, g.d)};
                                },
                                {{DType::F32, x.shape}});
  direct = took_direct(step);
  return data ? step({x, r})[0] : step({x})[0];
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
  HostTensor y = run(g, in.x, in.w, in.r, false, direct);
  EXPECT_EQ(direct, direct_applies() && g.s == 1) << g.name;
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, false, off);
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
  HostTensor dx = run(g, in.x, in.w, in.r, true, direct);
  // Stride 1: the gradient's window is the forward's flipped, padded by d (k - 1) - p (a padding
  // wider than "same" leaves it a cropped view, which autodiff writes otherwise). Strided: the
  // fold(fold(einsum)) chain.
  if (g.s > 1 || 2 * g.p <= g.d * (g.k - 1)) {
    EXPECT_EQ(direct, direct_applies()) << g.name;
  }
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, true, off);
  }
  EXPECT_FALSE(off);
  expect_same_bits(dx, ref, g.name);
}

TEST_P(ConvDirect, SameBitsOnEveryIsaAndThreadCount) {
  const Geo& g = GetParam();
  Inputs in = inputs(g);
  bool direct = false;
  HostTensor y = run(g, in.x, in.w, in.r, false, direct),
             dx = run(g, in.x, in.w, in.r, true, direct);
  synoros::testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int t) {
    std::string at = std::string(g.name) + " on " + kernels::isa_name(isa) + " with " +
                     std::to_string(t) + " threads";
    expect_same_bits(run(g, in.x, in.w, in.r, false, direct), y, at);
    EXPECT_EQ(direct, direct_applies() && g.s == 1) << at;
    expect_same_bits(run(g, in.x, in.w, in.r, true, direct), dx, at);
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
  HostTensor y = run(g, in.x, in.w, in.r, false, direct);
  ASSERT_EQ(direct, direct_applies());
  HostTensor ref;
  {
    DirectOff o;
    ref = run(g, in.x, in.w, in.r, false, off);
  }
  expect_same_bits(y, ref, "non-finite");
  EXPECT_TRUE(std::isnan(y.get(0)));  // output (0, 0, 0, 0) reads padding at the infinite tap
  int64_t finite = 0;
  for (int64_t i = 0; i < y.numel(); ++i) finite += std::isfinite(y.get(i));
  EXPECT_GT(finite, 0);  // not everything poisoned: the padding's zeros stay zeros
}

}  // namespace
