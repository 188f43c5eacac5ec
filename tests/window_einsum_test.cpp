// Window contractions (depthwise, channel-window and 1-D convolutions, matrix-vector products
// along rows): the AVX-512 kernel is taken, matches float64, and gives exactly the bits of the
// gather + GEMM lowering, which the other instruction sets use, at every thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <functional>

#include "kernels/cpu/window_einsum.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct Case {
  const char* name;
  Shape x, w;
  // Builds the contraction from the two inputs.
  std::function<ValueId(Graph&, ValueId, ValueId)> build;
  bool window;  // whether the window kernel must take it
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ValueId unfold(Graph& g, ValueId v, int64_t axis, int64_t k, int64_t d = 1) {
  return g.add(Op::Unfold, {v}, attr::Window{axis, k, d});
}

std::vector<Case> cases() {
  return {
      {"depthwise3x3", {2, 3, 9, 11}, {3, 3, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w}); },
       true},
      {"depthwise5x5_dilated", {2, 4, 12, 20}, {4, 5, 5},
       [](Graph& g, ValueId x, ValueId w) {
         return g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 5, 2), 3, 5, 2), w});
       },
       true},
      {"channel_window", {2, 6, 5, 16}, {6, 3, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwab,cab->nchw", {unfold(g, unfold(g, x, 1, 3), 2, 3), w}); },
       true},
      {"row_conv_one_output", {2, 5, 3, 33}, {1, 5, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwy,ocy->nohw", {unfold(g, x, 3, 3), w}); }, true},
      {"row_conv_three_outputs_not_taken", {2, 5, 3, 33}, {3, 5, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwy,ocy->nohw", {unfold(g, x, 3, 3), w}); }, false},
      {"matrix_vector_rows", {3, 40, 21}, {40},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nkw,k->nw", {x, w}); }, true},
      // One long output row: latency-bound here, the GEMM providers take it.
      {"vector_times_matrix_not_taken", {40, 100}, {1, 40},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("kn,mk->mn", {x, w}); }, false},
      {"weights_first", {7, 3, 3}, {2, 7, 6, 18},
       [](Graph& g, ValueId w, ValueId x) { return g.einsum("cxy,nchwxy->nchw", {w, unfold(g, unfold(g, x, 2, 3), 3, 3)}); },
       true},
      {"short_rows", {2, 3, 6, 5}, {3, 3, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w}); },
       true},
      {"wide_rows", {1, 2, 7, 50}, {2, 3, 3},  // four vectors per row, blocks of two rows
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w}); },
       true},
      {"long_rows", {1, 2, 4, 150}, {2, 3, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w}); },
       true},
      // A full convolution (many output channels from the weights): left to the GEMM path.
      {"full_conv_not_taken", {2, 4, 8, 8}, {8, 4, 3, 3},
       [](Graph& g, ValueId x, ValueId w) { return g.einsum("nchwxy,ocxy->nohw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w}); },
       false},
  };
}

bool took_window(Plan& p) {
  for (const LaunchInfo& li : p.launch_info())
    if (li.kernel.rfind("window", 0) == 0 && li.kernel != "window-cols") return true;  // (AVX2: window_cols_test)
  return false;
}

struct Built {
  Graph g;
  ValueId a, b, y;
};

// Runs the case on fixed random inputs; returns the output bytes and whether the kernel ran.
std::vector<char> run_case(const Case& c, bool& window, bool check_oracle = false) {
  Graph g;
  ValueId a = g.input(DType::F32, c.x, "a"), b = g.input(DType::F32, c.w, "b");
  ValueId y = c.build(g, a, b);
  Plan p(g, {y});
  p.set_input(a, synoros::testing::random_tensor({DType::F32, c.x}, 11));
  p.set_input(b, synoros::testing::random_tensor({DType::F32, c.w}, 12));
  p.run();
  window = took_window(p);
  if (check_oracle) {
    VerifyResult r = verify(p);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.report;
  }
  const float* d = p.data<float>(y);
  size_t bytes = size_t(numel(g.shape(y))) * 4;
  return std::vector<char>(reinterpret_cast<const char*>(d), reinterpret_cast<const char*>(d) + bytes);
}

class WindowEinsum : public ::testing::TestWithParam<Case> {};

TEST_P(WindowEinsum, MatchesFloat64AndTheGemmPathBitForBit) {
  const Case& c = GetParam();
  if (kernels::active_isa() != kernels::Isa::Avx512) GTEST_SKIP() << "the window kernel is AVX-512 only";
  synoros::testing::StrictKernels strict;  // the GEMM path with the canonical kernel, for the bit check
  bool window = false;
  std::vector<char> fast = run_case(c, window, true);
  EXPECT_EQ(window, c.window) << c.name;
  kernels::set_window_einsum(false);
  bool off = true;
  std::vector<char> gemm = run_case(c, off, true);
  kernels::set_window_einsum(true);
  EXPECT_FALSE(off);
  EXPECT_EQ(fast, gemm) << c.name << ": the window kernel and gather + GEMM differ";
}

TEST_P(WindowEinsum, SameBitsOnEveryIsaAndThreadCount) {
  const Case& c = GetParam();
  synoros::testing::StrictKernels strict;  // (the GEMM path of the last case picks per ISA otherwise)
  bool window = false;
  std::vector<char> ref = run_case(c, window);
  synoros::testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int t) {
    bool w = false;
    EXPECT_EQ(run_case(c, w), ref) << c.name << " on " << kernels::isa_name(isa) << " with " << t << " threads";
    EXPECT_EQ(w, c.window && isa == kernels::Isa::Avx512);  // other ISAs: gather + GEMM, same bits
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, WindowEinsum, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Non-finite weights reach every output they touch exactly as through the GEMM path (a padded
// position contributes 0 * inf = NaN there too).
TEST(WindowEinsumEdges, InfiniteWeightsPoisonPaddedOutputsLikeGemm) {
  if (kernels::active_isa() != kernels::Isa::Avx512) GTEST_SKIP() << "the window kernel is AVX-512 only";
  synoros::testing::StrictKernels strict;
  auto run = [](bool on) {
    kernels::set_window_einsum(on);
    Graph g;
    ValueId x = g.input(DType::F32, {1, 2, 5, 9}, "x"), w = g.input(DType::F32, {2, 3, 3}, "w");
    ValueId y = g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w});
    Plan p(g, {y});
    HostTensor wt = synoros::testing::random_tensor({DType::F32, {2, 3, 3}}, 3);
    wt.set(0, std::numeric_limits<double>::infinity());
    p.set_input(x, synoros::testing::random_tensor({DType::F32, {1, 2, 5, 9}}, 4));
    p.set_input(w, wt);
    p.run();
    std::vector<float> out(p.data<float>(y), p.data<float>(y) + 90);
    kernels::set_window_einsum(true);
    return out;
  };
  std::vector<float> a = run(true), b = run(false);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
  EXPECT_TRUE(std::isnan(a[0]));  // top-left output reads padding at the infinite weight's tap
}

// Stride-1 3x3 windows (depthwise, with the image rows along the output's second-innermost
// label) take the grid form, which loads each input row once per column shift; its bits are
// checked with every other case above. Other windows keep the generic form.
TEST(WindowEinsumEdges, ThreeByThreeWindowsTakeTheGridForm) {
  if (kernels::active_isa() != kernels::Isa::Avx512) GTEST_SKIP() << "the window kernel is AVX-512 only";
  auto kernel_of = [](const char* name) {
    for (const Case& c : cases())
      if (std::string(c.name) == name) {
        Graph g;
        ValueId a = g.input(DType::F32, c.x, "a"), b = g.input(DType::F32, c.w, "b");
        Plan p(g, {c.build(g, a, b)});
        for (const LaunchInfo& li : p.launch_info())
          if (li.kernel.rfind("window", 0) == 0) return li.kernel;
      }
    return std::string("none");
  };
  EXPECT_EQ(kernel_of("depthwise3x3"), "window-3x3");
  EXPECT_EQ(kernel_of("short_rows"), "window-3x3");
  EXPECT_EQ(kernel_of("weights_first"), "window-3x3");
  EXPECT_EQ(kernel_of("wide_rows"), "window-3x3");
  EXPECT_EQ(kernel_of("depthwise5x5_dilated"), "window");
  EXPECT_EQ(kernel_of("channel_window"), "window");
}

// A depthwise convolution with a batch-norm + ReLU epilogue (what resnet-mini's searched layers
// run): the epilogue runs on each chunk of the window kernel's output while it is in cache, with
// exactly the bits of the unfused plan and of the gather + GEMM path, at every thread count.
TEST(WindowEinsumEdges, StreamedEpilogueKeepsTheBitsOfTheUnfusedPlan) {
  if (kernels::active_isa() != kernels::Isa::Avx512) GTEST_SKIP() << "the window kernel is AVX-512 only";
  synoros::testing::StrictKernels strict;
  int threads = num_threads();
  const Shape xs = {3, 16, 28, 28};
  auto run = [&](bool window, bool fuse, int t, std::string* kernel) {
    kernels::set_window_einsum(window);
    set_num_threads(t);
    Graph g;
    ValueId x = g.input(DType::F32, xs, "x"), w = g.input(DType::F32, {16, 3, 3}, "w");
    ValueId m = g.input(DType::F32, {16, 1, 1}, "mean"), s = g.input(DType::F32, {16, 1, 1}, "scale");
    ValueId y = g.einsum("nchwxy,cxy->nchw", {unfold(g, unfold(g, x, 2, 3), 3, 3), w});
    y = g.add(Op::Relu, {g.add(Op::Mul, {g.add(Op::Sub, {y, m}), s})});
    CompileOptions o;
    o.fuse = fuse;
    Plan p(g, {y}, o);
    p.set_input(x, synoros::testing::random_tensor({DType::F32, xs}, 5));
    p.set_input(w, synoros::testing::random_tensor({DType::F32, {16, 3, 3}}, 6));
    p.set_input(m, synoros::testing::random_tensor({DType::F32, {16, 1, 1}}, 7));
    p.set_input(s, synoros::testing::random_tensor({DType::F32, {16, 1, 1}}, 8));
    p.run();
    if (kernel)
      for (const LaunchInfo& li : p.launch_info())
        if (li.ops.size() > 1) *kernel = li.kernel;
    const char* d = reinterpret_cast<const char*>(p.data<float>(y));
    kernels::set_window_einsum(true);
    set_num_threads(threads);
    return std::vector<char>(d, d + numel(xs) * 4);
  };
  std::string kernel;
  std::vector<char> streamed = run(true, true, 1, &kernel);
  EXPECT_EQ(kernel, "window-3x3 streamed");  // the 3x3 grid form, its epilogue per chunk
  EXPECT_EQ(run(true, true, 2, nullptr), streamed);
  EXPECT_EQ(run(true, false, 1, nullptr), streamed) << "the unfused plan differs";
  EXPECT_EQ(run(false, true, 2, nullptr), streamed) << "the gather + GEMM path differs";
}

}  // namespace
