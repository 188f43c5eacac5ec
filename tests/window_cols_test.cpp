// The window contraction's weight-column form (AVX2): convolutions with up to 16 output channels
// (and depthwise ones) over padded windows run without the unfolded gather, match float64, and give exactly the bits
// of the gather + GEMM lowering, at every thread count and on every instruction set.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/window_einsum.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct ColsCase {
  const char* name;
  Shape x, w;
  const char* spec;
  int64_t k, dilation;
  bool taken;  // on AVX2
};

void PrintTo(const ColsCase& c, std::ostream* os) { *os << c.name; }

std::vector<ColsCase> cases() {
  return {
      // LeNet's first layer: one channel in, six out, 5x5 "same" windows over 28-wide rows.
      {"lenet_conv1", {3, 1, 28, 28}, {6, 1, 5, 5}, "nchwxy,ocxy->nohw", 5, 1, true},
      // A stride-1 data gradient: output channels c from the weights, o contracted first.
      {"data_gradient", {2, 16, 14, 14}, {16, 6, 5, 5}, "nohwxy,ocxy->nchw", 5, 1, true},
      {"resnet_16", {2, 16, 28, 28}, {16, 16, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, true},
      {"seven_wide", {2, 8, 7, 7}, {16, 8, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, true},
      {"uneven_blocks", {2, 3, 9, 9}, {7, 3, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, true},
      {"dilated", {1, 4, 12, 20}, {5, 4, 3, 3}, "nchwxy,ocxy->nohw", 3, 2, true},
      {"weights_first", {2, 5, 10, 12}, {4, 5, 3, 3}, "ocxy,nchwxy->nohw", 3, 1, true},
      {"sixty_four_wide", {1, 2, 4, 64}, {3, 2, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, true},
      // Depthwise: blocks of one column.
      {"depthwise", {2, 6, 14, 14}, {6, 3, 3}, "nchwxy,cxy->nchw", 3, 1, true},
      // Many output channels: left to gather + GEMM.
      {"thirty_two_channels_not_taken", {1, 4, 8, 8}, {32, 4, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, false},
      // Rows shorter than 7: left to gather + GEMM.
      {"short_rows_not_taken", {1, 4, 5, 5}, {8, 4, 3, 3}, "nchwxy,ocxy->nohw", 3, 1, false},
  };
}

ValueId unfold(Graph& g, ValueId v, int64_t axis, int64_t k, int64_t d) {
  return g.add(Op::Unfold, {v}, attr::Window{axis, k, d});
}

// The case on fixed random inputs (weights[0] = inf when asked): output bytes and the kernel.
std::vector<char> run_case(const ColsCase& c, std::string& kernel, bool check_oracle = false, bool inf_weight = false) {
  Graph g;
  bool weights_first = std::string(c.spec).rfind("ocxy", 0) == 0;
  ValueId x = g.input(DType::F32, c.x, "x"), w = g.input(DType::F32, c.w, "w");
  ValueId u = unfold(g, unfold(g, x, 2, c.k, c.dilation), 3, c.k, c.dilation);
  ValueId y = g.einsum(c.spec, weights_first ? std::vector<ValueId>{w, u} : std::vector<ValueId>{u, w});
  Plan p(g, {y});
  HostTensor wt = synoros::testing::random_tensor({DType::F32, c.w}, 12);
  if (inf_weight) wt.set(0, std::numeric_limits<double>::infinity());
  p.set_input(x, synoros::testing::random_tensor({DType::F32, c.x}, 11));
  p.set_input(w, wt);
  p.run();
  kernel = p.launch_info().back().kernel;
  if (check_oracle) {
    VerifyResult r = verify(p);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.report;
  }
  const char* d = reinterpret_cast<const char*>(p.data<float>(y));
  return std::vector<char>(d, d + numel(g.shape(y)) * 4);
}

// Full convolutions take the padded implicit GEMM first (conv_direct_test.cpp): off here, so the
// column form is what runs.
struct NoConvDirect {
  synoros::testing::ConvDirectKernels off{false};
};

class WindowCols : public ::testing::TestWithParam<ColsCase> {
  NoConvDirect no_direct_;
};

// The AVX2 kernels for the scope of a test, on any CPU that has them (an AVX-512 CPU too).
struct OnAvx2 {
  kernels::Isa saved = kernels::active_isa();
  OnAvx2() {
    if (int(kernels::best_isa()) >= int(kernels::Isa::Avx2)) kernels::set_isa(kernels::Isa::Avx2);
  }
  ~OnAvx2() { kernels::set_isa(saved); }
};

TEST_P(WindowCols, MatchesFloat64AndTheGemmPathBitForBit) {
  const ColsCase& c = GetParam();
  OnAvx2 avx2;
  if (kernels::active_isa() != kernels::Isa::Avx2) GTEST_SKIP() << "this CPU has no AVX2";
  synoros::testing::StrictKernels canonical;
  std::string kernel, off_kernel;
  std::vector<char> cols = run_case(c, kernel, true);
  EXPECT_EQ(kernel == "window-cols", c.taken) << c.name << ": " << kernel;
  kernels::set_window_einsum(false);
  std::vector<char> gemm = run_case(c, off_kernel, true);
  kernels::set_window_einsum(true);
  EXPECT_NE(off_kernel, "window-cols");
  EXPECT_EQ(cols, gemm) << c.name << ": the column form and gather + GEMM differ";
}

TEST_P(WindowCols, SameBitsOnEveryIsaAndThreadCount) {
  const ColsCase& c = GetParam();
  synoros::testing::StrictKernels canonical;
  std::string kernel;
  std::vector<char> ref = run_case(c, kernel);
  synoros::testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int t) {
    EXPECT_EQ(run_case(c, kernel), ref) << c.name << " on " << kernels::isa_name(isa) << " with " << t << " threads";
    if (isa == kernels::Isa::Avx2) {
      EXPECT_EQ(kernel == "window-cols", c.taken) << c.name << ": " << kernel;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, WindowCols, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<ColsCase>& i) { return std::string(i.param.name); });

// A non-finite weight reaches the outputs whose windows read padding at its tap as NaN (0 * inf),
// exactly as through gather + GEMM.
TEST(WindowColsEdges, InfiniteWeightsPoisonPaddedOutputsLikeGemm) {
  NoConvDirect no_direct;
  OnAvx2 avx2;
  if (kernels::active_isa() != kernels::Isa::Avx2) GTEST_SKIP() << "this CPU has no AVX2";
  synoros::testing::StrictKernels canonical;
  ColsCase c = cases()[2];
  std::string kernel, off_kernel;
  std::vector<char> a = run_case(c, kernel, false, true);
  ASSERT_EQ(kernel, "window-cols");
  kernels::set_window_einsum(false);
  std::vector<char> b = run_case(c, off_kernel, false, true);
  kernels::set_window_einsum(true);
  EXPECT_EQ(a, b);
  float first;
  std::memcpy(&first, a.data(), 4);
  EXPECT_TRUE(std::isnan(first));  // output (0, 0, 0, 0) reads padding at the infinite tap
}

}  // namespace
