// The engine refuses what it cannot do correctly, with an Error naming the cause: shapes whose
// size overflows, allocations past the memory limit, thread counts out of range, bad settings.
// And results a user reported wrong stay right: layer norm of a vector, gradients after reading
// a value, one-point curves.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>

#include "io/atomic_file.hpp"
#include "synoros/checkpoint.hpp"
#include "synoros/plot.hpp"
#include "synoros/trials.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {
using testing::expect_error;
using testing::TempDir;

TEST(Trust, ShapesWhoseSizeOverflowsAreRefused) {
  const int64_t big = int64_t(1) << 62;
  expect_error([&] { Tensor::zeros({big + 1, 4}); }, {"more than 2^63 elements", "[4611686018427387905,4]"});
  expect_error([&] { Tensor::randn({int64_t(1) << 40, int64_t(1) << 30}, 1); }, {"more than 2^63 elements"});
  expect_error([&] { Tensor::zeros({big, 1}, DType::F64); }, {"more than 2^63 bytes"});
  expect_error([&] { HostTensor(DType::F32, {3, -1}); }, {"negative dimension", "[3,-1]"});
  // A view whose result overflows is refused where it is built.
  Tensor s = Tensor::zeros({1, 1});
  expect_error([&] { s.expand({big, 4}); }, {"more than 2^63 elements"});
  Graph g;
  expect_error([&] { g.input(DType::F32, {big, big}, "x"); }, {"input 'x'", "more than 2^63"});
}

TEST(Trust, AllocationsPastTheMemoryLimitAreErrors) {
  size_t saved = memory_limit();
  set_memory_limit(live_buffer_bytes() + (size_t(1) << 20));
  expect_error([&] { HostTensor(DType::F32, {1 << 20}); }, {"out of memory", "SYNOROS_MAX_MEMORY_BYTES"});
  size_t before = live_buffer_bytes();
  { HostTensor ok(DType::F32, {1024}); }  // within the limit, and given back
  EXPECT_EQ(live_buffer_bytes(), before);
  set_memory_limit(saved);
}

TEST(Trust, ASmallBufferAllocatedAgainStartsAtZeroAndIsCountedOnce) {
  // Small buffers freed by a thread may be handed to its next allocation of the same size:
  // that one must start at zero like any other, and the live count must not drift.
  const size_t before = live_buffer_bytes();
  for (int round = 0; round < 40; ++round) {  // more rounds than the thread keeps buffers
    std::vector<HostTensor> held;
    for (int64_t n : {1, 16, 100, 1000}) {
      HostTensor h(DType::F32, {n});
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(h.get(i), 0.0) << "round " << round << ", size " << n;
      for (int64_t i = 0; i < n; ++i) h.set(i, 1.0 + double(i));
      held.push_back(h);
    }
    EXPECT_GT(live_buffer_bytes(), before);
  }
  EXPECT_EQ(live_buffer_bytes(), before);
}

TEST(Trust, ThreadCountsOutOfRangeAreErrors) {
  int n = num_threads();
  expect_error([] { set_num_threads(0); }, {"threads", "out of range"});
  expect_error([] { set_num_threads(100000); }, {"threads", "100000", "1 to 1024"});
  EXPECT_EQ(num_threads(), n);  // the pool in use is kept
}

TEST(Trust, SettingsAreCheckedAndNameTheVariable) {
  {
    config::ScopedOverride o("SYNOROS_STRICT", "yes");
    expect_error([] { config::flag("SYNOROS_STRICT"); }, {"SYNOROS_STRICT='yes'", "0|1"});
    expect_error([] { config::check_environment(); }, {"SYNOROS_STRICT"});
  }
  {
    config::ScopedOverride o("SYNOROS_MAX_PLAN_BYTES", "2G");
    EXPECT_EQ(*config::integer("SYNOROS_MAX_PLAN_BYTES"), int64_t(2) << 30);
  }
  for (const char* bad : {"abc", "0", "12Q", "99999999999999999999", "-5"}) {
    config::ScopedOverride o("SYNOROS_MAX_PLAN_BYTES", bad);
    expect_error([] { config::integer("SYNOROS_MAX_PLAN_BYTES"); }, {"SYNOROS_MAX_PLAN_BYTES", bad});
  }
  for (const char* bad : {"0", "1025", "x", "4 "}) {
    config::ScopedOverride o("SYNOROS_NUM_THREADS", bad);
    expect_error([] { config::integer("SYNOROS_NUM_THREADS"); }, {"SYNOROS_NUM_THREADS", "1..1024"});
  }
  {
    config::ScopedOverride o("SYNOROS_ISA", "avx3");
    expect_error([] { config::text("SYNOROS_ISA"); }, {"SYNOROS_ISA='avx3'", "scalar|avx2|avx512"});
  }
  {
    config::ScopedOverride o("SYNOROS_WINDOW_EINSUM", nullptr);
    EXPECT_TRUE(config::flag("SYNOROS_WINDOW_EINSUM", true));  // unset: the default
  }
  std::string table = config::describe_variables();
  for (const config::Variable& v : config::variables()) EXPECT_NE(table.find(v.name), std::string::npos);
  expect_error([] { config::flag("SYNOROS_NOT_A_SETTING"); }, {"unknown variable"});
}

// The system's own variables are read in the one place too: the caches follow XDG_CACHE_HOME,
// else HOME; temporary files TMPDIR, else /tmp; a name outside the list is an Error.
TEST(Trust, SystemVariablesDecideTheCacheAndTemporaryDirectories) {
  struct Saved {  // restores the process environment, whatever the test did
    std::string name;
    std::optional<std::string> value;
    explicit Saved(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) value = v;
    }
    ~Saved() {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  } xdg("XDG_CACHE_HOME"), home("HOME"), tmp("TMPDIR");
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  ::setenv("HOME", "/h", 1);
  EXPECT_EQ(config::user_cache_dir(), "/x/cache/synoros");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(config::user_cache_dir(), "/h/.cache/synoros");
  ::unsetenv("HOME");
  EXPECT_EQ(config::user_cache_dir(), "");
  ::unsetenv("TMPDIR");
  EXPECT_EQ(config::temp_dir(), "/tmp");
  ::setenv("TMPDIR", "/t", 1);
  EXPECT_EQ(config::temp_dir(), "/t");
  expect_error([] { config::system_variable("PATH"); }, {"PATH", "not a system variable"});
}

// layer_norm of a rank-1 input: the weight and bias gradients are vectors (go * x-hat and go),
// not sums over every axis.
TEST(Trust, LayerNormOfAVectorHasVectorGradients) {
  Tensor x = Tensor::randn({7}, 1), w = Tensor::randn({7}, 2), b = Tensor::randn({7}, 3), go = Tensor::randn({7}, 4);
  w.requires_grad(), b.requires_grad();
  (layer_norm(x, w, b) * go).sum().backward();
  HostTensor xv = x.value(), gv = go.value(), dw = w.grad().value(), db = b.grad().value();
  ASSERT_EQ(dw.shape, Shape{7});
  ASSERT_EQ(db.shape, Shape{7});
  double mean = 0, var = 0;
  for (int i = 0; i < 7; ++i) mean += xv.get(i) / 7;
  for (int i = 0; i < 7; ++i) var += (xv.get(i) - mean) * (xv.get(i) - mean) / 7;
  for (int i = 0; i < 7; ++i) {
    double xh = (xv.get(i) - mean) / std::sqrt(var + 1e-5);
    EXPECT_NEAR(dw.get(i), gv.get(i) * xh, 1e-5) << i;
    EXPECT_EQ(db.get(i), gv.get(i)) << i;
  }
}

// Reading a value keeps the graph (PyTorch's rule); detach() is the explicit cut.
TEST(Trust, ReadingAValueDoesNotCutTheGradientPath) {
  Tensor x = Tensor::from(std::vector<float>{0.5f}, {1});
  x.requires_grad();
  Tensor y = x.exp();
  EXPECT_NEAR(y.value().get(0), std::exp(0.5), 1e-6);
  (y + x).sum().backward();
  EXPECT_NEAR(x.grad().value().get(0), std::exp(0.5) + 1, 1e-6);
  x.zero_grad();
  y.sum().backward();
  EXPECT_NEAR(x.grad().value().get(0), std::exp(0.5), 1e-6);
  x.zero_grad();
  Tensor d = y.detach();
  EXPECT_TRUE(d.is_leaf());
  (d + x).sum().backward();
  EXPECT_EQ(x.grad().value().get(0), 1.0);
  // A value outside any gradient path still becomes a leaf (its graph is freed).
  Tensor z = Tensor::from(std::vector<float>{2.0f}, {1}).exp();
  z.value();
  EXPECT_TRUE(z.is_leaf());
}

TEST(Trust, KilledSavesLeaveNoTemporariesBehind) {
  TempDir dir("litter");
  std::string target = (dir.path / "ck.safetensors").string();
  // A pid no process has (the kernel's limit is below 2^22 by default).
  pid_t dead = 4194000;
  while (::kill(dead, 0) == 0 || errno != ESRCH) ++dead;
  std::string stale = target + ".tmp." + std::to_string(dead), other = (dir.path / "other.tmp.1").string();
  std::ofstream(stale) << "half a checkpoint";
  std::ofstream(other) << "not ours";
  io::save_safetensors(target, std::map<std::string, HostTensor>{{"w", HostTensor(DType::F32, {2})}});
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_TRUE(std::filesystem::exists(target));
}

TEST(Trust, CheckpointMetadataIsReadTyped) {
  io::Metadata md{{"step", "abc"}, {"big", "99999999999999999999"}, {"neg", "-5"}, {"frac", "3.5"}, {"ok", "12"}};
  expect_error([&] { io::metadata_int(md, "step", "p", 0, 100); }, {"'p'", "'step' is 'abc'"});
  expect_error([&] { io::metadata_int(md, "big", "p", 0, INT64_MAX); }, {"'big'", "not an integer"});
  expect_error([&] { io::metadata_int(md, "neg", "p", 0, 100); }, {"'neg' is '-5'"});
  expect_error([&] { io::metadata_int(md, "frac", "p", 0, 100); }, {"'frac' is '3.5'"});
  expect_error([&] { io::metadata_int(md, "absent", "p", 0, 100); }, {"no 'absent'"});
  EXPECT_EQ(io::metadata_int(md, "ok", "p", 0, 100), 12);
  expect_error([&] { io::check_same_run({{"batch", "64"}}, {{"batch", "32"}, {"seed", "1"}}, "p"); },
               {"batch = 64", "32"});
  io::check_same_run({{"batch", "64"}}, {{"batch", "64"}, {"seed", "1"}}, "p");  // older files lack keys
}

TEST(Trust, ACurveOfOnePointIsDrawn) {
  std::string svg = io::svg_chart({{"loss", "epoch", "loss", {{"train", {1.0}, {0.5}}}}});
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

// The estimate is arithmetic at fixed rates: a product of twice the size costs eight times as
// much (FLOP-bound), and a copy of a large tensor is priced by its bytes.
TEST(Trust, TheCostModelTimerPricesFlopsAndBytes) {
  auto matmul_ms = [](int64_t n) {
    Graph g;
    ValueId a = g.input(DType::F32, {n, n}, "a"), b = g.input(DType::F32, {n, n}, "b");
    return trials::cost_model_ms(Plan(g, {g.matmul(a, b)}));
  };
  double small = matmul_ms(128), big = matmul_ms(256);
  EXPECT_GT(small, 0);
  EXPECT_DOUBLE_EQ(big / small, 8.0);
  EXPECT_NEAR(small, 2.0 * 128 * 128 * 128 / 100e6, small * 1e-9);  // 2 n^3 FLOPs at 100 GFLOP/s
}

}  // namespace
}  // namespace synoros
