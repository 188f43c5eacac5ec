// The determinism contract of the two kernel modes.
// Default mode: every selection chooses among candidates with identical bits, so trainings with
// empty tuning caches, whose selections are forced (by a test timer) to choose differently, at 1
// and 2 threads and on every instruction set, give the same bytes.
// Fast mode: selection may take kernels that round differently; a checkpoint records the choices
// and a resumed run replays them, so it matches the uninterrupted run even when its own
// selection would have chosen otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// Fake selection times: the first candidate fastest, or the last.
std::vector<double> prefer_first(size_t n) {
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = double(i + 1);
  return t;
}
std::vector<double> prefer_last(size_t n) {
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = double(n - i);
  return t;
}

// A process's first selection: an empty tuning cache, no cached plans, nothing recorded or
// replayed, and the given timer in place of the clock.
class FreshSelection {
 public:
  explicit FreshSelection(kernels::SelectionTimer timer) {
    kernels::clear_tuning_cache();
    kernels::clear_recorded_choices();
    kernels::clear_replayed_choices();
    clear_plan_cache();
    kernels::set_selection_timer(std::move(timer));
  }
  ~FreshSelection() {
    kernels::set_selection_timer({});
    kernels::clear_tuning_cache();
    std::remove((path_ + ".lock").c_str());
    kernels::clear_replayed_choices();
    clear_plan_cache();
  }

 private:
  std::string path_ = ::testing::TempDir() + "synoros-kernel-mode-cache-" + std::to_string(::getpid()) + ".txt";
  config::ScopedOverride env_{"SYNOROS_TUNING_CACHE", path_.c_str()};
};

struct Mode {
  bool saved = fast_mode();
  explicit Mode(bool fast) { set_fast_mode(fast); }
  ~Mode() { set_fast_mode(saved); }
};

train::ClassifierConfig tiny(const std::string& model) {
  train::ClassifierConfig c;
  c.model = model;
  c.batch = 16;
  c.train_limit = 64;
  c.test_limit = 32;
  c.augment = true;
  c.seed = 5;
  return c;
}

std::vector<uint8_t> state_bytes(train::ClassifierTrainer& t) {
  std::vector<uint8_t> out;
  auto add = [&](const Tensor& x) {
    HostTensor h = x.value();
    auto* b = static_cast<const uint8_t*>(h.buffer->data());
    out.insert(out.end(), b, b + h.bytes());
  };
  for (auto& [n, x] : t.model().state_dict()) add(x);
  for (auto& [n, x] : t.optimizer().state()) add(x);
  return out;
}

struct TrainedRun {
  std::vector<uint8_t> bytes;
  std::string choices;
};

TrainedRun train_fresh(const std::string& model, int steps, kernels::SelectionTimer timer, int threads) {
  FreshSelection fresh(std::move(timer));
  int saved = num_threads();
  set_num_threads(threads);
  train::ClassifierTrainer t(tiny(model));
  t.train_steps(steps);
  set_num_threads(saved);
  return {state_bytes(t), kernels::recorded_choices()};
}

// A first process: `steps` steps from scratch, saved to path; the checkpoint's metadata.
io::Metadata train_and_save(const std::string& model, int steps, const std::string& path) {
  FreshSelection fresh(prefer_first);
  train::ClassifierTrainer t(tiny(model));
  t.train_steps(steps);
  t.save(path);
  return io::load_safetensors(path).metadata;
}

// Every recorded choice names a canonical kernel.
void expect_only_canonical(const std::string& choices) {
  std::istringstream in(choices);
  std::string line;
  while (std::getline(in, line)) {
    size_t a = line.find('\t'), b = line.find('\t', a + 1);
    EXPECT_FALSE(kernels::is_fast_mode_kernel(line.substr(a + 1, b - a - 1))) << line;
  }
}

void check_default_mode(const std::string& model, bool all_isas) {
  Mode mode(false);
  TrainedRun ref = train_fresh(model, 3, prefer_first, 1);
  ASSERT_FALSE(ref.choices.empty());
  expect_only_canonical(ref.choices);
  TrainedRun other = train_fresh(model, 3, prefer_last, 2);
  // The timer did change the choices (otherwise this would test nothing) ...
  EXPECT_NE(ref.choices, other.choices) << model;
  // ... and not the bits.
  EXPECT_EQ(ref.bytes, other.bytes) << model << ": other kernels, 2 threads";
  kernels::Isa saved = kernels::active_isa();
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (int(isa) > int(kernels::best_isa()) || isa == saved || (isa == kernels::Isa::Scalar && !all_isas)) continue;
    kernels::set_isa(isa);
    TrainedRun r = train_fresh(model, 3, prefer_last, 1);
    kernels::set_isa(saved);
    EXPECT_EQ(ref.bytes, r.bytes) << model << " on " << kernels::isa_name(isa);
  }
}

TEST(KernelMode, DefaultModeLeNetIgnoresCacheTimingThreadsAndIsa) { check_default_mode("lenet", true); }
// (The scalar kernels would take minutes over the ResNet; LeNet covers them.)
TEST(KernelMode, DefaultModeResNetIgnoresCacheTimingThreadsAndIsa) { check_default_mode("resnet-mini", false); }

TEST(KernelMode, FastModeResumeReplaysTheRecordedKernels) {
  Mode mode(true);
  std::string path = (std::filesystem::temp_directory_path() / "synoros-fast-resume.safetensors").string();
  TrainedRun straight = train_fresh("lenet", 6, prefer_first, 1);
  TrainedRun other = train_fresh("lenet", 6, prefer_last, 1);
  // Left to itself, the second timer's run takes other kernels (vendor ones among them) ...
  ASSERT_NE(straight.choices, other.choices);
  // ... with other bits: otherwise a replay that did nothing would pass unnoticed.
  if (straight.bytes == other.bytes) GTEST_SKIP() << "this machine's fast kernels round like the canonical ones here";
  io::Metadata md = train_and_save("lenet", 3, path);
  EXPECT_EQ(md.at("kernels"), "fast");
  ASSERT_TRUE(md.count("kernel_choices"));
  EXPECT_FALSE(md.at("kernel_choices").empty());
  {
    // A new process whose own selection would choose the other kernels.
    FreshSelection fresh(prefer_last);
    train::ClassifierTrainer resumed(tiny("lenet"));
    resumed.load(path);
    resumed.train_steps(3);
    EXPECT_EQ(state_bytes(resumed), straight.bytes);
  }
  {
    // Resuming a fast-mode checkpoint in default mode is refused, naming the setting.
    Mode other_mode(false);
    FreshSelection fresh(prefer_first);
    train::ClassifierTrainer t(tiny("lenet"));
    testing::expect_error([&] { t.load(path); }, {"kernels = fast", "default"});
  }
  std::remove(path.c_str());
}

TEST(KernelMode, DefaultModeCheckpointsRecordNoChoices) {
  Mode mode(false);
  std::string path = (std::filesystem::temp_directory_path() / "synoros-default-mode.safetensors").string();
  io::Metadata md = train_and_save("mlp", 1, path);
  EXPECT_EQ(md.at("kernels"), "default");
  EXPECT_EQ(md.count("kernel_choices"), 0u);
  std::remove(path.c_str());
}

TEST(KernelMode, AReplayThisBuildCannotHonourIsAnError) {
  Mode mode(true);
  FreshSelection fresh(prefer_first);
  kernels::GemmShape s{40, 30, 20, 20, 1, 30, 1, 30};
  ASSERT_NE(kernels::select_gemm(s, false).provider, nullptr);
  std::string rec = kernels::recorded_choices();
  ASSERT_EQ(std::count(rec.begin(), rec.end(), '\n'), 1);
  std::string key = rec.substr(0, rec.find('\t'));
  kernels::replay_choices(key + "\tno-such-kernel\t1\n", "test record");
  testing::expect_error([&] { kernels::select_gemm(s, false); }, {"no-such-kernel", "cannot run"});
  testing::expect_error([] { kernels::replay_choices("one field only\n", "run dir 'x'"); },
                        {"run dir 'x'", "kernel choice 1"});
  // A record made under another instruction set matches nothing here: refused, not ignored.
  std::string isa = kernels::isa_name(kernels::active_isa()), other = isa == "avx2" ? "scalar" : "avx2";
  std::string foreign = key;
  foreign.replace(foreign.find(" isa=" + isa), 5 + isa.size(), " isa=" + other);
  testing::expect_error([&] { kernels::replay_choices(foreign + "\tengine-packed\t1\n", "checkpoint 'c'"); },
                        {"checkpoint 'c'", "made for isa " + other});
  // A replay replaces the previous one, and the record keeps replayed choices not yet used.
  kernels::replay_choices("unused isa=" + isa + "\tengine-small\t1\n", "test record");
  std::string now = kernels::recorded_choices();
  EXPECT_NE(now.find("unused isa=" + isa + "\tengine-small\t1"), std::string::npos) << now;
  EXPECT_NO_THROW(kernels::select_gemm(s, false));  // the unrunnable choice is gone
  // Default mode never consults a replay: every candidate there gives the same bits.
  Mode canonical(false);
  EXPECT_NE(kernels::select_gemm(s, true).provider, nullptr);
}

TEST(KernelMode, ProfilesAndPlansNameFastModeKernels) {
  for (const auto& p : kernels::gemm_providers()) {
    EXPECT_EQ(kernels::is_fast_mode_kernel(p->name()), !p->canonical()) << p->name();
    EXPECT_EQ(kernels::is_fast_mode_kernel(p->name() + "+gather streamed"), !p->canonical()) << p->name();
  }
  EXPECT_TRUE(kernels::is_fast_mode_kernel("onednn-bwd"));
  EXPECT_TRUE(kernels::is_fast_mode_kernel("onednn-wino-data"));
  EXPECT_FALSE(kernels::is_fast_mode_kernel("engine-packed+fold"));
  EXPECT_FALSE(kernels::is_fast_mode_kernel("window-3x3"));
  Mode mode(false);
  Graph g;
  ValueId a = g.input(DType::F32, {64, 64}, "a"), b = g.input(DType::F32, {64, 64}, "b");
  Plan p(g, {g.matmul(a, b)});
  EXPECT_NE(p.describe().find("canonical kernels"), std::string::npos) << p.describe();
  EXPECT_EQ(p.describe().find(", fast]"), std::string::npos) << p.describe();
}

}  // namespace
}  // namespace synoros
