// Operator search pieces: evaluation records, replayable action paths, the reward, networks with
// synthesized layers, and one real (tiny) proxy evaluation on Fashion-MNIST.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "synoros/data.hpp"
#include "synoros/trials.hpp"
#include "test_util.hpp"

namespace synoros::trials {
namespace {

// The first few canonical operators with weights for ResNetMini's layer spec.
std::vector<synth::Operator> some_operators(synth::Synthesizer& syn) {
  synth::EnumResult en = synth::enumerate(syn, true, 400);
  std::vector<synth::Operator> out;
  for (auto& op : en.operators)
    if (!op.weights.empty()) out.push_back(op);
  return out;
}

synth::Options depth(int d) {
  synth::Options o;
  o.max_depth = d;
  return o;
}

TEST(Trials, EvaluationRecordsRoundTripThroughJson) {
  Evaluation e;
  e.key = "op \"quoted\"\nline";
  e.formula = "y[n,c,h,w] = sum_k x[n,k,h,w] * w0[c,k]";
  e.actions = "R1;S2";
  e.failed = true;
  e.error = "bad \\ thing";
  e.class_mask = 5;
  e.accuracy = 0.8125, e.loss = 0.53, e.trained_epochs = 2;
  e.latency = {1.5, 40.25, 1.25, 22.5};
  e.flops = 1.5e9, e.params = 123456, e.train_seconds = 3.5, e.reward = 0.75, e.order = 7;
  Evaluation r = evaluation_from_json(to_json(e));
  EXPECT_EQ(r.key, e.key);
  EXPECT_EQ(r.formula, e.formula);
  EXPECT_EQ(r.actions, e.actions);
  EXPECT_EQ(r.failed, e.failed);
  EXPECT_EQ(r.error, e.error);
  EXPECT_EQ(r.class_mask, e.class_mask);
  EXPECT_DOUBLE_EQ(r.accuracy, e.accuracy);
  EXPECT_EQ(r.trained_epochs, e.trained_epochs);
  EXPECT_DOUBLE_EQ(r.latency.b64_t1, e.latency.b64_t1);
  EXPECT_DOUBLE_EQ(r.latency.b1_t2, e.latency.b1_t2);
  EXPECT_DOUBLE_EQ(r.params, e.params);
  EXPECT_THROW(evaluation_from_json("{not json"), std::exception);
}

TEST(Trials, ActionPathsRebuildTheSameOperator) {
  synth::Synthesizer syn(resnet_conv_spec(), depth(5));
  auto ops = some_operators(syn);
  ASSERT_GE(ops.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    std::string text = serialize_actions(ops[i].path);
    synth::Operator back = synth::build_from_actions(syn, parse_actions(text));
    EXPECT_EQ(back.canonical, ops[i].canonical) << text;
  }
  EXPECT_THROW(parse_actions("this is not an action path"), Error);
}

TEST(Trials, RewardPenalisesOnlyLatencyAboveTheTarget) {
  TrialsConfig cfg;  // target 1/1.5, weight 0.1
  Evaluation base, e;
  base.latency.b64_t1 = 10;
  e.accuracy = 0.8;
  e.latency.b64_t1 = 5;  // ratio 0.5: under the target, no penalty
  EXPECT_DOUBLE_EQ(reward(e, base, cfg), 0.8);
  e.latency.b64_t1 = 10;  // ratio 1 = 1.5x the target: penalty 0.1 * 0.5
  EXPECT_NEAR(reward(e, base, cfg), 0.75, 1e-12);
  e.failed = true;
  EXPECT_EQ(reward(e, base, cfg), -1);
}

TEST(Trials, PairedBaselineDecidesTheSpeedup) {
  TrialsConfig cfg;
  Evaluation base, e;
  base.latency.b64_t1 = 20;  // measured in a slow minute
  e.accuracy = 0.8;
  e.latency.b64_t1 = 8;
  EXPECT_DOUBLE_EQ(speedup(e, base), 2.5);  // no pair: against the baseline's own time
  e.paired_base_b64_t1 = 10;                // the baseline next to it took 10 ms
  EXPECT_DOUBLE_EQ(speedup(e, base), 1.25);
  EXPECT_NEAR(reward(e, base, cfg), 0.8 - 0.1 * (0.8 / (1 / 1.5) - 1), 1e-12);  // 1.25x misses the 1.5x target
  Evaluation back = evaluation_from_json(to_json(e));
  EXPECT_DOUBLE_EQ(back.paired_base_b64_t1, 10);
  e.latency.b64_t1 = 0;  // never timed: no speedup, the failure reward
  EXPECT_EQ(speedup(e, base), 0);
  EXPECT_EQ(reward(e, base, cfg), -1);
}

TEST(Trials, ClassSubsetKeepsTheMostWeightsThatStillMeetsTheTarget) {
  // The headline search's screen of the depthwise 3x3 operator: conv / operator layer ms per
  // class, layers {2, 1, 1}, weights per layer 16^2*9, 32^2*9, 64^2*9 against 144, 288, 576.
  ClassTimes t{{2.1134, 1.6782, 1.5339}, {0.4898, 0.3869, 0.4941}, {2, 1, 1},
               {2304, 9216, 36864}, {144, 288, 576}, 13.347};
  ClassChoice all = predict_classes(t, 7, 1 / 1.5);
  EXPECT_TRUE(all.meets);
  EXPECT_NEAR(all.saved_ms, 2 * (2.1134 - 0.4898) + (1.6782 - 0.3869) + (1.5339 - 0.4941), 1e-12);
  EXPECT_DOUBLE_EQ(all.weights, 2 * 144 + 288 + 576);
  // Keeping the 64-channel convolution still meets 1.5x (13.347 - 4.5385 <= 13.347 / 1.5).
  ClassChoice keep = weight_keeping_classes(t, 7, 1 / 1.5);
  EXPECT_EQ(keep.mask, 3u);
  EXPECT_TRUE(keep.meets);
  EXPECT_DOUBLE_EQ(keep.weights, 2 * 144 + 288 + 36864);
  // A stricter target leaves no subset but all of them; a missed target keeps the classes given.
  EXPECT_EQ(weight_keeping_classes(t, 7, 1 / 1.6).mask, 7u);
  EXPECT_EQ(weight_keeping_classes(t, 7, 1 / 3.0).mask, 7u);
  EXPECT_FALSE(weight_keeping_classes(t, 7, 1 / 3.0).meets);
  // Only subsets of the classes where the operator is faster are considered.
  ClassChoice one = weight_keeping_classes(t, 1, 1 / 1.2);
  EXPECT_EQ(one.mask, 1u);
}

TEST(Trials, SpatialFootprintCountsTheReachOfAnImpulse) {
  synth::Spec spec = resnet_conv_spec();
  synth::Synthesizer syn(spec, depth(5));
  synth::EnumResult en = synth::enumerate(syn, true);
  int checked = 0;
  for (const auto& op : en.operators) {
    std::string f = synth::formula(spec, op);
    if (f == "y[n,c,h,w] = \u03a3_{r0<C} x[n, r0, h, w] \u00b7 W1[c,r0]") {
      EXPECT_EQ(spatial_footprint(spec, op), 1) << f;  // pointwise
      ++checked;
    } else if (f.find("x[n, c, h+r0\u22121, w+r1\u22121]") != std::string::npos && op.weights.size() == 1) {
      EXPECT_EQ(spatial_footprint(spec, op), 9) << f;  // depthwise 3x3
      ++checked;
    } else if (f.find("x[n, r0, h, w+r1\u22121] \u00b7 W1[c,r1,r0]") != std::string::npos) {
      EXPECT_EQ(spatial_footprint(spec, op), 3) << f;  // 1x3
      ++checked;
    }
  }
  EXPECT_GE(checked, 3);
}

TEST(Trials, LayerCountsFollowTheNetwork) {
  // layer1 has two stride-1 16->16 convolutions; layers 2 and 3 one each (their first is strided).
  EXPECT_EQ(layers_per_class(16), (std::vector<int>{2, 1, 1}));
}

TEST(Trials, NetworkFromActionsRebuildsTheReportedOperator) {
  synth::Spec spec = resnet_conv_spec();
  synth::Synthesizer syn(spec, depth(5));
  auto ops = some_operators(syn);
  ASSERT_FALSE(ops.empty());
  auto direct = make_network(spec, &ops[0], 5, 1);
  auto rebuilt = network_from_actions(serialize_actions(ops[0].path), 5, 1);
  EXPECT_EQ(rebuilt->parameter_count(), direct->parameter_count());
  EXPECT_THROW(network_from_actions("garbage", 7, 1), Error);
}

TEST(Trials, NetworksReplaceOnlyTheMaskedLayerClasses) {
  synth::Spec spec = resnet_conv_spec();
  synth::Synthesizer syn(spec, depth(5));
  auto ops = some_operators(syn);
  ASSERT_FALSE(ops.empty());
  auto base = make_network(spec, nullptr, 0, 1);
  auto none = make_network(spec, &ops[0], 0, 1);  // mask 0: every layer stays a convolution
  auto first = make_network(spec, &ops[0], 1, 1);
  auto all = make_network(spec, &ops[0], 7, 1);
  EXPECT_EQ(none->parameter_count(), base->parameter_count());
  EXPECT_NE(first->parameter_count(), base->parameter_count());
  EXPECT_NE(all->parameter_count(), first->parameter_count());
  all->train(false);
  Tensor y = all->forward(Tensor::randn({2, 1, 28, 28}, 3));
  HostTensor h = y.value();
  ASSERT_EQ(h.shape, (Shape{2, 10}));
  for (int64_t i = 0; i < 20; ++i) EXPECT_TRUE(std::isfinite(h.get(i)));
}

// The depthwise convolution the search finds exports as F.conv2d(groups=C) (PyTorch then runs a
// convolution instead of an einsum over a 9x copy), with the engine's exact semantics.
TEST(Trials, DepthwiseOperatorExportsAsAGroupedConvolution) {
  synth::Spec spec = resnet_conv_spec();
  synth::Synthesizer syn(spec, depth(5));
  synth::EnumResult en = synth::enumerate(syn, true);
  const synth::Operator* dw = nullptr;
  for (const auto& op : en.operators)
    if (synth::formula(spec, op).find("x[n, c, h+r0\u22121, w+r1\u22121]") != std::string::npos && op.weights.size() == 1)
      dw = &op;
  ASSERT_NE(dw, nullptr) << "the depthwise 3x3 operator is not reachable at depth 5";
  synth::Binding b = synth::binding(spec, 1);  // 32 channels, 14x14, N = 2
  std::string src = synth::pytorch_module(spec, *dw, b);
  EXPECT_NE(src.find("F.conv2d(x, w, padding=1, groups=32)"), std::string::npos) << src;
  // A pointwise operator keeps the einsum form.
  for (const auto& op : en.operators)
    if (synth::formula(spec, op) == "y[n,c,h,w] = \u03a3_{r0<C} x[n, r0, h, w] \u00b7 W1[c,r0]") {
      EXPECT_EQ(synth::pytorch_module(spec, op, b).find("conv2d"), std::string::npos);
    }
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with torch is not available for the numeric check";
  std::string dir = ::testing::TempDir() + "dw_export_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/op.py") << src;
  HostTensor x = synoros::testing::random_tensor({DType::F32, {2, 32, 14, 14}}, 5);
  HostTensor w = synoros::testing::random_tensor({DType::F32, synth::weight_shapes(spec, *dw, b)[0]}, 6);
  auto dump = [&](const std::string& name, const HostTensor& t) {
    std::ofstream f(dir + "/" + name);
    f.precision(9);
    for (int64_t i = 0; i < t.numel(); ++i) f << t.get(i) << "\n";
  };
  dump("x.txt", x);
  dump("w.txt", w);
  std::ofstream(dir + "/run.py")
      << "import importlib.util, sys, torch\n"
         "d = sys.argv[1]\n"
         "spec = importlib.util.spec_from_file_location('op', d + '/op.py')\n"
         "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
         "mod = m.SynthOp().double()\n"
         "rd = lambda n: torch.tensor([float(v) for v in open(d + '/' + n)], dtype=torch.float64)\n"
         "with torch.no_grad():\n"
         "    mod.w0.copy_(rd('w.txt').reshape(mod.w0.shape))\n"
         "    y = mod(rd('x.txt').reshape(2, 32, 14, 14)).contiguous().reshape(-1)\n"
         "open(d + '/y.txt', 'w').write('\\n'.join(repr(float(v)) for v in y))\n";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + dir + "/run.py " + dir).c_str()), 0);
  HostTensor e = synth::apply(spec, *dw, b, Tensor::from(x), {Tensor::from(w)}).value();
  std::ifstream f(dir + "/y.txt");
  for (int64_t i = 0; i < e.numel(); ++i) {
    double v = 0;
    ASSERT_TRUE(f >> v) << "short output";
    ASSERT_NEAR(v, e.get(i), 1e-5) << "element " << i;
  }
  std::filesystem::remove_all(dir);
}

TEST(Trials, EvaluateTrainsAndTimesATinyProxy) {
  if (!std::filesystem::exists(data::default_fashion_mnist_dir()))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  ProxyConfig cfg;
  cfg.train_images = 128, cfg.test_images = 64, cfg.batch = 32;
  Evaluation e = evaluate(resnet_conv_spec(), nullptr, 0, cfg);
  ASSERT_FALSE(e.failed) << e.error;
  EXPECT_EQ(e.key, "baseline");
  EXPECT_GE(e.accuracy, 0.0);
  EXPECT_LE(e.accuracy, 1.0);
  EXPECT_TRUE(std::isfinite(e.loss));
  EXPECT_GT(e.latency.b64_t1, 0);
  EXPECT_GT(e.latency.b1_t1, 0);
  EXPECT_GT(e.params, 0);
  EXPECT_GT(e.flops, 0);
  // A broken operator is a failed evaluation, never an exception.
  synth::Operator broken;
  broken.canonical = "broken";
  Evaluation b = evaluate(resnet_conv_spec(), &broken, 1, cfg);
  EXPECT_TRUE(b.failed);
  EXPECT_NE(b.error.find("output dims"), std::string::npos) << b.error;
}

// Plans timed by the cost model for the scope (deterministic).
struct CostModelTimer {
  CostModelTimer() { set_plan_timer(cost_model_ms); }
  ~CostModelTimer() { set_plan_timer(nullptr); }
};
// A search over a width-4 network at depth 5, in `dir`.
TrialsConfig small_search(const std::string& dir, uint64_t mcts_iterations, int64_t screened, int64_t candidates, int64_t rounds) {
  TrialsConfig cfg;
  cfg.width = 4;
  cfg.depth = 5;
  cfg.mcts_iterations = mcts_iterations;
  cfg.screened = screened;
  cfg.candidates = candidates;
  cfg.rounds = rounds;
  cfg.proxy.width = 4;
  cfg.dir = dir;
  return cfg;
}

// The whole search with the training replaced by a deterministic stand-in (accuracy from the
// operator's canonical form) and plans timed by the cost model: which candidates are trained,
// how a worker that dies is recorded, the Pareto front, and a resumed search that trains nothing
// again and reports the same outcome.
TEST(Trials, FailedWorkersParetoFrontAndResume) {
  CostModelTimer timer;
  synoros::testing::TempDir dir("trials-e2e");
  TrialsConfig cfg = small_search(dir.path.string(), 400, 12, 4, 2);
  synth::Synthesizer syn(resnet_conv_spec(cfg.width), depth(cfg.depth));
  int64_t jobs_seen = 0;
  std::string failed_key;
  auto arg = [](const std::vector<std::string>& a, const std::string& name) {
    for (size_t i = 0; i + 1 < a.size(); ++i)
      if (a[i] == "--" + name) return a[i + 1];
    return std::string();
  };
  cfg.run_workers = [&](const std::vector<std::vector<std::string>>& jobs) {
    std::vector<WorkerResult> out;
    for (const auto& a : jobs) {
      ++jobs_seen;
      WorkerResult r;
      r.where = "rank 1";
      Evaluation e;
      e.class_mask = unsigned(std::stoul(arg(a, "mask")));
      e.trained_epochs = std::stoll(arg(a, "epochs"));
      std::string actions = arg(a, "actions");
      if (actions.empty()) {
        e.key = "baseline", e.accuracy = 0.85;
      } else {
        synth::Operator op = synth::build_from_actions(syn, parse_actions(actions));
        e.key = op.canonical, e.actions = actions, e.formula = synth::formula(syn.spec(), op);
        if (failed_key.empty() || failed_key == e.key) {  // the first candidate's worker dies, every round
          failed_key = e.key;
          r.ok = false, r.error = "worker killed by signal 9";
          out.push_back(r);
          continue;
        }
        e.accuracy = 0.5 + double(std::hash<std::string>{}(e.key) % 400) / 1000.0 + 0.01 * double(e.trained_epochs);
      }
      r.ok = true, r.line = to_json(e);
      out.push_back(r);
    }
    return out;
  };
  TrialsOutcome first = run_trials(cfg);
  ASSERT_GT(jobs_seen, 2) << "the search trained nothing: the screen found no candidate";
  ASSERT_FALSE(failed_key.empty());
  ASSERT_GE(first.evaluations.size(), 3u) << "too few candidates for the front to mean anything";
  // The dead worker's candidate is a failed evaluation naming the cause and the rank.
  bool found_failed = false;
  for (const Evaluation& e : first.evaluations)
    if (e.key == failed_key) {
      found_failed = true;
      EXPECT_TRUE(e.failed);
      EXPECT_NE(e.error.find("worker killed by signal 9 (rank 1)"), std::string::npos) << e.error;
      EXPECT_EQ(e.reward, -1);
    }
  EXPECT_TRUE(found_failed);
  // The front: no member dominated, every other finished candidate at the final budget dominated.
  const int64_t final_epochs = first.baseline.trained_epochs;
  auto dominates = [&](const Evaluation& b, const Evaluation& a) {
    double sa = speedup(a, first.baseline), sb = speedup(b, first.baseline);
    return b.accuracy >= a.accuracy && sb >= sa && (b.accuracy > a.accuracy || sb > sa);
  };
  std::set<size_t> front(first.pareto.begin(), first.pareto.end());
  EXPECT_FALSE(front.empty());
  for (size_t i = 0; i < first.evaluations.size(); ++i) {
    const Evaluation& a = first.evaluations[i];
    if (a.failed || a.trained_epochs != final_epochs) {
      EXPECT_FALSE(front.count(i)) << a.key;
      continue;
    }
    bool dominated = false;
    for (const Evaluation& b : first.evaluations)
      if (&b != &a && !b.failed && b.trained_epochs == final_epochs && dominates(b, a)) dominated = true;
    EXPECT_EQ(front.count(i) == 1, !dominated) << a.key;
  }
  // Resumed in the same directory: every evaluation is found in evaluations.jsonl (a failure is
  // a result too: it is not retried), nothing is trained again, and the outcome is the same.
  const int64_t before = jobs_seen;
  TrialsOutcome again = run_trials(cfg);
  EXPECT_EQ(jobs_seen, before) << "a resumed search trained again";
  ASSERT_EQ(again.evaluations.size(), first.evaluations.size());
  for (size_t i = 0; i < first.evaluations.size(); ++i) {
    EXPECT_EQ(again.evaluations[i].key, first.evaluations[i].key);
    EXPECT_EQ(again.evaluations[i].accuracy, first.evaluations[i].accuracy);
    EXPECT_EQ(again.evaluations[i].failed, first.evaluations[i].failed);
  }
  EXPECT_EQ(again.pareto, first.pareto);
}

// A baseline that fails (its data missing, say) stops the search with its cause before anything
// of the round is recorded. Failed candidates are results, kept on a rerun, unless a baseline failed
// at their budget (as earlier builds recorded such a run): those are trained again.
TEST(Trials, AFailedBaselineStopsTheSearchAndIsRetried) {
  CostModelTimer timer;
  synoros::testing::TempDir dir("trials-baseline");
  TrialsConfig cfg = small_search(dir.path.string(), 200, 6, 2, 1);
  synth::Synthesizer syn(resnet_conv_spec(cfg.width), depth(cfg.depth));
  bool data_missing = true, candidates_fail = false;
  int64_t trained = 0;
  cfg.run_workers = [&](const std::vector<std::vector<std::string>>& jobs) {
    std::vector<WorkerResult> out;
    for (const auto& a : jobs) {
      WorkerResult r;
      if (data_missing) {
        r.ok = false, r.error = "IDX file missing/train-images-idx3-ubyte.gz: cannot open";
        out.push_back(r);
        continue;
      }
      ++trained;
      Evaluation e;
      std::string actions;
      for (size_t i = 0; i + 1 < a.size(); ++i) {
        if (a[i] == "--actions") actions = a[i + 1];
        if (a[i] == "--mask") e.class_mask = unsigned(std::stoul(a[i + 1]));
        if (a[i] == "--epochs") e.trained_epochs = std::stoll(a[i + 1]);
      }
      if (actions.empty()) {
        e.key = "baseline";
      } else {
        synth::Operator op = synth::build_from_actions(syn, parse_actions(actions));
        e.key = op.canonical, e.actions = actions, e.formula = synth::formula(syn.spec(), op);
        if (candidates_fail) {
          r.ok = false, r.error = "worker killed by signal 9";
          out.push_back(r);
          continue;
        }
      }
      e.accuracy = 0.8;
      r.ok = true, r.line = to_json(e);
      out.push_back(r);
    }
    return out;
  };
  synoros::testing::expect_error([&] { run_trials(cfg); }, {"baseline network failed", "train-images-idx3-ubyte.gz: cannot open"});
  EXPECT_EQ(trained, 0);
  // The baseline trains, every candidate's worker dies: failed candidates, kept on a rerun.
  data_missing = false, candidates_fail = true;
  TrialsOutcome failed = run_trials(cfg);
  EXPECT_FALSE(failed.baseline.failed);
  EXPECT_EQ(failed.baseline.accuracy, 0.8);
  ASSERT_FALSE(failed.evaluations.empty());
  for (const Evaluation& e : failed.evaluations) EXPECT_TRUE(e.failed) << e.key;
  candidates_fail = false;
  const int64_t after_first = trained;
  run_trials(cfg);
  EXPECT_EQ(trained, after_first) << "failed candidates were trained again";
  {  // A failed baseline at the same budget (as earlier builds recorded a run without data).
    Evaluation old;
    old.key = "baseline", old.trained_epochs = cfg.proxy.epochs, old.failed = true, old.error = "data missing";
    std::ofstream(dir.path / "evaluations.jsonl", std::ios::app) << to_json(old) << "\n";
  }
  TrialsOutcome out = run_trials(cfg);
  EXPECT_EQ(trained, after_first + int64_t(failed.evaluations.size())) << "the failed candidates were not retrained";
  EXPECT_FALSE(out.baseline.failed);
  ASSERT_EQ(out.evaluations.size(), failed.evaluations.size());
  for (const Evaluation& e : out.evaluations) EXPECT_FALSE(e.failed) << e.key << ": " << e.error;
}

}  // namespace
}  // namespace synoros::trials
