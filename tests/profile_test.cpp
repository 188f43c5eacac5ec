// Measure: the profiler times every launch and accounts for every op's FLOPs.
#include <gtest/gtest.h>

#include "synoros/tiny_mlp.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

TEST(Profiler, CoversEveryLaunchAndEveryFlop) {
  nn::TinyTask task(1);
  nn::TinyMLP m(2);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, 1e-3);
  step.plan().set_input("arg0", task.x);
  step.plan().set_input("arg1", task.target);
  MachinePeak peak{100, 10, "test"};
  Profile p = profile(step.plan(), 5, peak);
  ASSERT_EQ(p.entries.size(), step.plan().launches().size());
  double flops = 0, expect = 0;
  for (const auto& e : p.entries) {
    EXPECT_GT(e.ns, 0);
    EXPECT_GT(e.bytes, 0);
    flops += e.flops;
  }
  // Every op that runs is counted once, whether fused or not.
  for (const LaunchInfo& li : step.plan().launch_info())
    for (ValueId v : li.ops) {
      const Graph& g = step.plan().graph();
      expect += op_info(g.node(v).op).cost(g, g.node(v)).flops;
    }
  EXPECT_EQ(flops, expect);
  // The five matmuls are all there: layer 1 forward and its weight gradient (8x16x32), layer 2
  // forward, its weight gradient and the gradient into layer 1 (8x32x8).
  EXPECT_GE(flops, 2.0 * (2 * 8 * 16 * 32) + 3.0 * (2 * 8 * 32 * 8));
  std::string table = p.table();
  EXPECT_NE(table.find("einsum+add+relu"), std::string::npos) << table;
  std::string trace = p.chrome_trace();
  EXPECT_EQ(trace.rfind("{\"traceEvents\": [", 0), 0u);
  EXPECT_EQ(std::count(trace.begin(), trace.end(), '{'), std::ptrdiff_t(p.entries.size() * 2 + 1));
}

// Time by leading op: a fused group counts under its first op, a kernel's name is not part of
// the op, and the sums come largest first.
TEST(Profiler, SumsTimeByLeadingOp) {
  Profile p;
  p.entries = {{1, "einsum+add+gelu_tanh [engine-packed generated]", false, 50},
               {2, "attention", false, 20},
               {3, "einsum [engine-packed]", false, 30},
               {4, "layernorm", false, 5},
               {5, "add+add", false, 7},
               {6, "attention_grad [attention-grad]", false, 10}};
  std::vector<std::pair<std::string, double>> want = {
      {"einsum", 80}, {"attention", 20}, {"attention_grad", 10}, {"add", 7}, {"layernorm", 5}};
  EXPECT_EQ(p.by_leading_op(), want);
  std::string table = p.by_leading_op_table();
  EXPECT_NE(table.find("einsum"), std::string::npos) << table;
  EXPECT_NE(table.find("65.6%"), std::string::npos) << table;  // 80 of the 122 ns summed
}

TEST(Profiler, MeasuresAPlausiblePeak) {
  MachinePeak p = measure_peak();
  EXPECT_GT(p.gflops, 0.5);  // any CPU that runs this does better than half a GFLOP/s
  EXPECT_GT(p.gbps, 0.5);
  EXPECT_GT(p.read_gbps, 0.5);  // the streaming read is measured too
  EXPECT_FALSE(p.isa.empty());
  EXPECT_EQ(p.threads, 1);
}

TEST(Profiler, MeasuresThePeakOfSeveralThreadsAtOnce) {
  MachinePeak p = measure_peak(3);  // more threads than this machine may have cores: still measured
  EXPECT_EQ(p.threads, 3);
  EXPECT_GT(p.gflops_threads, 0.5);
  EXPECT_GT(p.gbps_threads, 0.5);
  EXPECT_GT(p.read_gbps_threads, 0.5);
  EXPECT_THROW(measure_peak(0), Error);
}

}  // namespace
}  // namespace synoros
