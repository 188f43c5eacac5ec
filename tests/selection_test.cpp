// Select: every kernel candidate passes the float64 oracle before it may be timed and pinned;
// choices persist in the tuning cache, which survives corruption.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/profile.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {
using namespace kernels;

// A provider that is very fast and wrong: it adds 0.01 to every output.
class WrongGemm : public GemmProvider {
 public:
  std::string name() const override { return "wrong-but-fast"; }
  std::string version() const override { return "0"; }
  bool canonical() const override { return true; }
  bool supports(const GemmShape&) const override { return true; }
  size_t scratch_floats(const GemmShape& s) const override { return gemm_scratch_floats(s); }
  void run(const GemmCall& c, ThreadPool& pool) const override {
    sgemm(c.shape, c.A, c.B, c.C, c.scratch, int(active_isa()), pool);
    for (int64_t m = 0; m < c.shape.M; ++m)
      for (int64_t n = 0; n < c.shape.N; ++n) c.C[m * c.shape.c_rs + n] += 0.01f;
  }
};

struct TempCache {
  // One file per process: ctest runs tests in parallel processes, which merge what a shared file
  // holds on every save.
  std::string path = ::testing::TempDir() + "synoros-selection-test-" + std::to_string(::getpid()) + ".txt";
  config::ScopedOverride env{"SYNOROS_TUNING_CACHE", path.c_str()};
  TempCache() { clear_tuning_cache(); }
  ~TempCache() {
    clear_tuning_cache();
    std::remove((path + ".lock").c_str());
  }
};

Graph matmul_graph(int64_t m, int64_t k, int64_t n, ValueId& a, ValueId& b, ValueId& c) {
  Graph g;
  a = g.input(DType::F32, {m, k}, "a");
  b = g.input(DType::F32, {k, n}, "b");
  c = g.matmul(a, b);
  return g;
}

TEST(Selection, AWrongProviderIsRejectedAndTheResultStaysCorrect) {
  TempCache tc;
  auto& provs = gemm_providers();
  provs.insert(provs.begin(), std::make_shared<WrongGemm>());
  ValueId a, b, c;
  Graph g = matmul_graph(33, 47, 29, a, b, c);
  CompileOptions keep;
  keep.keep_intermediates = true;
  ::testing::internal::CaptureStderr();
  Plan p(g, {c}, keep);
  // The rejection is recorded for the profile, not printed: in normal use it is no error.
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  provs.erase(provs.begin());
  EXPECT_NE(p.launch_info()[0].kernel, "wrong-but-fast");
  auto rej = selection_rejections();
  ASSERT_FALSE(rej.empty());
  EXPECT_NE(rej[0].find("wrong-but-fast"), std::string::npos) << rej[0];
  p.set_input(a, testing::random_tensor({DType::F32, {33, 47}}, 1));
  p.set_input(b, testing::random_tensor({DType::F32, {47, 29}}, 2));
  p.run();
  VerifyResult r = verify(p);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Selection, RejectionsArePrintedOnlyWhenVerbose) {
  TempCache tc;
  config::ScopedOverride verbose("SYNOROS_VERBOSE", "1");
  auto& provs = gemm_providers();
  provs.insert(provs.begin(), std::make_shared<WrongGemm>());
  ValueId a, b, c;
  Graph g = matmul_graph(31, 45, 27, a, b, c);
  ::testing::internal::CaptureStderr();
  Plan p(g, {c});
  std::string err = ::testing::internal::GetCapturedStderr();
  provs.erase(provs.begin());
  EXPECT_NE(err.find("rejected kernel"), std::string::npos) << err;
  EXPECT_NE(err.find("wrong-but-fast"), std::string::npos) << err;
}

TEST(Selection, ChoicesPersistAndAreReusedWithoutMeasuring) {
  TempCache tc;
  ValueId a, b, c;
  Graph g = matmul_graph(64, 64, 64, a, b, c);
  Plan first(g, {c});
  EXPECT_EQ(tuning_cache_size(), 1u);
  std::string chosen = first.launch_info()[0].kernel;
  // A new process would read the file: check its content names the same kernel.
  std::ifstream f(tc.path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\t" + chosen + "\t"), std::string::npos) << text;
  Selection again = select_gemm({64, 64, 64, 64, 1, 64, 1, 64}, strict_kernels());
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.provider->name(), chosen);
}

TEST(Selection, ACorruptCacheIsDetectedAndRebuilt) {
  TempCache tc;
  for (std::string bad : {std::string("garbage that is not a cache"),
                          std::string("synoros-tuning-cache 1\nsgemm M=1\tengine-packed\t1\nchecksum 0000000000000000\n")}) {
    {
      std::ofstream f(tc.path);
      f << bad;
    }
    reload_tuning_cache();
    ::testing::internal::CaptureStderr();
    Selection s = select_gemm({16, 16, 16, 16, 1, 16, 1, 16}, false);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("is corrupt"), std::string::npos) << err;
    EXPECT_NE(s.provider, nullptr);
    EXPECT_FALSE(s.from_cache);
    // The rebuilt file is valid: a fresh read finds the new choice.
    reload_tuning_cache();
    EXPECT_TRUE(select_gemm({16, 16, 16, 16, 1, 16, 1, 16}, false).from_cache);
  }
}

// Processes sharing a cache file (trial workers, ranks, parallel tests) each save their own
// choices: a save merges what the file holds now, so another process's choices survive.
TEST(Selection, ASaveKeepsTheChoicesAnotherProcessSaved) {
  TempCache tc;
  auto read = [&tc] {
    std::ifstream in(tc.path);
    std::stringstream text;
    text << in.rdbuf();
    std::map<std::string, TuningEntry> entries;
    std::string why;
    EXPECT_TRUE(parse_tuning_cache(text.str(), entries, why)) << why;
    return entries;
  };
  store_choice("mine-1", "engine-packed", "1");
  {  // another process adds its choice to the file in the meantime
    std::map<std::string, TuningEntry> entries = read();
    entries["theirs"] = {"engine-small", "1"};
    std::ofstream out(tc.path);
    out << serialize_tuning_cache(entries);
  }
  store_choice("mine-2", "engine-packed", "1");
  std::map<std::string, TuningEntry> entries = read();
  EXPECT_EQ(entries.count("mine-1"), 1u);
  EXPECT_EQ(entries.count("mine-2"), 1u);
  ASSERT_EQ(entries.count("theirs"), 1u);
  EXPECT_EQ(entries["theirs"].provider, "engine-small");
}

// A provider that cannot build a kernel for the shape and says so by throwing.
class ThrowingGemm : public WrongGemm {
 public:
  std::string name() const override { return "throws"; }
  void run(const GemmCall&, ThreadPool&) const override { throw Error("throws: no kernel for this shape"); }
};

TEST(Selection, AProviderThatThrowsIsRejectedNotFatal) {
  TempCache tc;
  auto& provs = gemm_providers();
  provs.insert(provs.begin(), std::make_shared<ThrowingGemm>());
  Selection s = select_gemm({20, 30, 40, 40, 1, 30, 1, 30}, false);
  provs.erase(provs.begin());
  ASSERT_NE(s.provider, nullptr);
  EXPECT_NE(s.provider->name(), "throws");
  ASSERT_EQ(s.rejected.size(), 1u);
  EXPECT_NE(s.rejected[0].find("throws: failed: throws: no kernel"), std::string::npos) << s.rejected[0];
}

// A choice is only reused among the same candidates: adding a provider measures again.
TEST(Selection, ANewProviderIsMeasuredAgainAndTheThreadCountIsNot) {
  TempCache tc;
  GemmShape sh{24, 40, 56, 56, 1, 40, 1, 40};
  EXPECT_FALSE(select_gemm(sh, false).from_cache);
  EXPECT_TRUE(select_gemm(sh, false).from_cache);
  auto& provs = gemm_providers();
  provs.push_back(std::make_shared<WrongGemm>());  // rejected by the oracle, but a new candidate
  ::testing::internal::CaptureStderr();
  Selection with = select_gemm(sh, false);
  ::testing::internal::GetCapturedStderr();
  provs.pop_back();
  EXPECT_FALSE(with.from_cache);
  EXPECT_TRUE(select_gemm(sh, false).from_cache);  // back to the original set: its entry stands
  // The thread count is not part of the key: one choice, so the bits do not depend on it.
  int saved = num_threads();
  set_num_threads(saved == 1 ? 2 : 1);
  EXPECT_TRUE(select_gemm(sh, false).from_cache);
  set_num_threads(saved);
}

TEST(Selection, StrictModeOnlyPicksCanonicalKernels) {
  TempCache tc;
  Selection s;
  {
    synoros::testing::StrictKernels canonical;  // restores the mode the process had (not fast mode)
    s = select_gemm({200, 300, 250, 250, 1, 300, 1, 300}, true);
  }
  ASSERT_NE(s.provider, nullptr);
  EXPECT_TRUE(s.provider->canonical());
}

TEST(Selection, ADefaultModeChoiceIsMeasuredAgainAtAnotherThreadCount) {
  TempCache tc;
  synoros::testing::StrictKernels canonical;
  GemmShape sh{40, 24, 56, 56, 1, 24, 1, 24};
  int saved = num_threads();
  int other = saved == 1 ? 2 : 1;
  EXPECT_FALSE(select_gemm(sh, true).from_cache);
  EXPECT_TRUE(select_gemm(sh, true).from_cache);
  // Canonical providers give the same bits at any thread count, so default mode times them at
  // the count it runs with: another count is a new choice, and the first one stays.
  set_num_threads(other);
  bool measured_again = !select_gemm(sh, true).from_cache;
  bool then_cached = select_gemm(sh, true).from_cache;
  set_num_threads(saved);
  EXPECT_TRUE(measured_again);
  EXPECT_TRUE(then_cached);
  EXPECT_TRUE(select_gemm(sh, true).from_cache);
  EXPECT_EQ(tuning_cache_size(), 2u);
}

// A selection's certificate: every candidate with its float64 check against the bound and its
// time, the choice, and the problem's work; a measured certificate stays with the launch.
TEST(Selection, EachChoiceLeavesACertificateWithItsCandidatesChecksAndTimes) {
  TempCache tc;
  auto& provs = gemm_providers();
  provs.insert(provs.begin(), std::make_shared<WrongGemm>());
  // The k-th candidate timed takes 100 (k + 1) ns, so the first that passed is the fastest.
  set_selection_timer([](size_t n) {
    std::vector<double> t(n);
    for (size_t k = 0; k < n; ++k) t[k] = 100.0 * double(k + 1);
    return t;
  });
  ValueId a, b, c;
  Graph g = matmul_graph(33, 47, 29, a, b, c);
  Plan first(g, {c});
  Plan second(g, {c});
  set_selection_timer({});
  provs.erase(provs.begin());
  ASSERT_EQ(first.launch_info().size(), 1u);
  const std::vector<SelectionCertificate>& sel = first.launch_info()[0].selections;
  ASSERT_EQ(sel.size(), 1u);
  const SelectionCertificate& cert = sel[0];
  EXPECT_EQ(cert.source, "measured");
  EXPECT_EQ(cert.flops, 2.0 * 33 * 47 * 29);
  EXPECT_EQ(cert.bytes, 4.0 * (33 * 47 + 47 * 29 + 33 * 29));
  ASSERT_GE(cert.candidates.size(), 2u);
  const CandidateRecord& wrong = cert.candidates[0];
  EXPECT_EQ(wrong.name, "wrong-but-fast");
  EXPECT_TRUE(wrong.checked);
  EXPECT_FALSE(wrong.passed);
  EXPECT_GT(wrong.error, 1.0);  // 0.01 too much on every output: far outside the bound
  EXPECT_NE(wrong.why.find("float64 says"), std::string::npos) << wrong.why;
  EXPECT_EQ(wrong.ns, 0.0);  // never timed
  double timed = 0;
  for (size_t i = 1; i < cert.candidates.size(); ++i) {
    const CandidateRecord& r = cert.candidates[i];
    if (!r.checked) continue;  // a provider that does not support the shape is no candidate
    EXPECT_TRUE(r.passed) << r.name << ": " << r.why;
    EXPECT_GE(r.error, 0.0) << r.name;
    EXPECT_LE(r.error, 1.0) << r.name;
    EXPECT_EQ(r.ns, 100.0 * ++timed) << r.name;
  }
  EXPECT_EQ(cert.chosen, 1);  // the first that passed took 100 ns
  EXPECT_EQ(first.launch_info()[0].kernel, cert.candidates[1].name);
  // The second plan read the choice: its certificate says so and names the same kernel.
  ASSERT_EQ(second.launch_info()[0].selections.size(), 1u);
  const SelectionCertificate& read = second.launch_info()[0].selections[0];
  EXPECT_EQ(read.source, "tuning cache");
  EXPECT_EQ(read.key, cert.key);
  ASSERT_GE(read.chosen, 0);
  EXPECT_EQ(read.candidates[size_t(read.chosen)].name, second.launch_info()[0].kernel);
}

TEST(Selection, CertificatesSetEachLaunchBesideTheRooflineModel) {
  MachinePeak peak{100.0, 10.0, "test"};  // 100 FLOPs and 10 bytes per ns, one core
  EXPECT_EQ(roofline_ns(2e9, 1e6, peak, 2), 1e7);  // compute-bound: 2e9 / 200
  EXPECT_EQ(roofline_ns(1e3, 1e6, peak, 1), 1e5);  // memory-bound: 1e6 / 10
  EXPECT_EQ(roofline_ns(1e3, 1e6, MachinePeak{}, 1), 0.0);
  Calibration c = calibrate({0.5, 1.0, 0.25, -1.0, std::numeric_limits<double>::infinity()});
  EXPECT_EQ(c.count, 3u);
  EXPECT_EQ(c.median, 0.5);
  EXPECT_EQ(c.lowest, 0.25);
  EXPECT_EQ(c.highest, 1.0);
  EXPECT_EQ(calibrate({0.2, 0.4, 0.6, 0.8}).median, 0.5);
  EXPECT_EQ(calibrate({}).count, 0u);

  TempCache tc;
  ValueId a, b, cv;
  Graph g = matmul_graph(64, 64, 64, a, b, cv);
  Plan plan(g, {cv});
  ASSERT_EQ(plan.launches().size(), 1u);
  LaunchWork w = launch_work(plan, 0);
  EXPECT_EQ(w.flops, 2.0 * 64 * 64 * 64);
  EXPECT_EQ(w.bytes, 3.0 * 4 * 64 * 64);
  // A profile with a chosen time (no clock): the launch took 4x its roofline time.
  Profile prof;
  prof.peak = peak;
  ProfileEntry e;
  e.node = plan.launches()[0].node;
  e.label = "einsum";
  e.flops = w.flops, e.bytes = w.bytes;
  e.ns = 4 * roofline_ns(w.flops, w.bytes, peak, 1);
  prof.entries.push_back(e);
  Certificates cert = certify(plan, prof, 1);
  ASSERT_EQ(cert.launches.size(), 1u);
  EXPECT_EQ(cert.launches[0].predicted_ns, e.ns / 4);
  EXPECT_EQ(cert.launch_calibration.count, 1u);
  EXPECT_EQ(cert.launch_calibration.median, 0.25);
  ASSERT_EQ(cert.launches[0].selections.size(), 1u);
  std::string json = cert.json();
  for (const char* key : {"\"calibration\"", "\"launches\"", "\"selections\"", "\"candidates\"",
                          "\"error_of_bound\"", "\"predicted_ns\""})
    EXPECT_NE(json.find(key), std::string::npos) << key;
  EXPECT_NE(cert.table().find("predicted/measured median 0.25"), std::string::npos) << cert.table();
  prof.entries.push_back(e);
  synoros::testing::expect_error([&] { certify(plan, prof, 1); }, {"2 launches", "plan of 1"});
}

}  // namespace
}  // namespace synoros
