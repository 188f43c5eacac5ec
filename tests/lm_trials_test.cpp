// Operator trials on the GPT's projections: projections built by a factory, synthesized
// projections against the dense product, the linear layer's known families, and a small search
// run with the deterministic cost model (twice, the same outcome).
#include <gtest/gtest.h>

#include <fstream>

#include "synoros/lm_trials.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

using trials::gpt_linear_spec;
using trials::gpt_projection_classes;

synth::Operator family_op(const synth::Spec& spec, const std::string& name) {
  for (const synth::KnownFamily& f : synth::known_families(spec))
    if (f.name == name) return f.op;
  ADD_FAILURE() << "no family '" << name << "'";
  return {};
}

TEST(GptProjections, AFactoryThatReplacesNothingGivesTheSameModel) {
  nn::GptConfig c{64, 8, 16, 2, 2};
  nn::Gpt plain(c, 3), with(c, 3, [](const std::string&, int64_t, int64_t, uint64_t) { return nullptr; });
  nn::Named a = plain.named_parameters(), b = with.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  }
  HostTensor tok = testing::random_tensor({DType::I64, {2, 8}, 0, 64.0}, 1);
  testing::expect_same_bits(plain(Tensor::from(tok)).value(), with(Tensor::from(tok)).value(), "logits");
}

TEST(GptProjections, TheDenseFamilyAsAProjectionComputesXTimesW) {
  const int64_t C = 16;
  synth::Spec spec = gpt_linear_spec(C);
  synth::Operator dense = family_op(spec, "dense linear");
  auto op = std::make_shared<trials::SynthLinear>(spec, dense, C, 3 * C, 5);
  nn::Conv1D layer(C, 3 * C, op);
  nn::Named named = layer.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "bias");
  EXPECT_EQ(named[1].first, "op.w0");
  HostTensor w = named[1].second.value();  // [C_out, C_in]
  ASSERT_EQ(w.shape, (Shape{3 * C, C}));
  HostTensor x = testing::random_tensor({DType::F32, {2, 3, C}}, 7);
  HostTensor y = layer.forward(Tensor::from(x)).value();
  ASSERT_EQ(y.shape, (Shape{2, 3, 3 * C}));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 3 * C; ++o) {
      double want = 0;
      for (int64_t i = 0; i < C; ++i) want += x.get(r * C + i) * w.get(o * C + i);
      EXPECT_NEAR(y.get(r * 3 * C + o), want, 1e-5) << r << ", " << o;
    }
  EXPECT_THROW(layer.forward(Tensor::from(testing::random_tensor({DType::F32, {2, 3, C + 1}}, 1))), Error);
}

TEST(GptProjections, TheInitialisationGainScalesTheOutput) {
  synth::Spec spec = gpt_linear_spec(16);
  synth::Operator low = family_op(spec, "low-rank linear (rank g)");
  trials::SynthLinear one(spec, low, 16, 16, 9), tenth(spec, low, 16, 16, 9, 0.1);
  HostTensor x = testing::random_tensor({DType::F32, {4, 16}}, 2);
  HostTensor a = one.forward(Tensor::from(x)).value(), b = tenth.forward(Tensor::from(x)).value();
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(b.get(i), 0.1 * a.get(i), 1e-6 + 1e-6 * std::abs(a.get(i)));
}

TEST(GptProjections, OnlyTheMaskedClassesAreReplacedAndTheyTrain) {
  nn::GptConfig c{64, 8, 16, 2, 2};
  synth::Spec spec = gpt_linear_spec(16);
  synth::Operator grouped = family_op(spec, "grouped linear (g groups)");
  nn::Gpt m(c, 1, trials::projection_factory(spec, &grouped, 0b0101, c.layers));  // c_attn and c_fc
  for (const auto& b : m.h) {
    EXPECT_TRUE(b->c_attn->product && b->c_fc->product);
    EXPECT_FALSE(b->attn_proj->product || b->mlp_proj->product);
    EXPECT_FALSE(b->c_attn->weight.defined());
  }
  HostTensor tok = testing::random_tensor({DType::I64, {2, 8}, 0, 64.0}, 1);
  CompiledStep step = nn::compile_gpt_grad(m, 2);
  std::vector<HostTensor> out = step({tok, tok});
  ASSERT_EQ(out.size(), 1 + m.parameters().size());
  nn::Named named = m.named_parameters();
  for (size_t i = 0; i < named.size(); ++i)
    if (named[i].first.ends_with("c_attn.op.w0")) {
      double norm = 0;
      for (int64_t k = 0; k < out[i + 1].numel(); ++k) norm += std::abs(out[i + 1].get(k));
      EXPECT_GT(norm, 0) << named[i].first << " gets no gradient";
    }
  EXPECT_TRUE(std::isfinite(out[0].get(0)));
}

TEST(GptProjections, LoraRefusesASynthesizedProjection) {
  nn::GptConfig c{64, 8, 16, 2, 1};
  synth::Spec spec = gpt_linear_spec(16);
  synth::Operator grouped = family_op(spec, "grouped linear (g groups)");
  nn::Gpt m(c, 1, trials::projection_factory(spec, &grouped, 0b0001, c.layers));
  nn::LoraConfig lc;
  lc.targets = {"c_attn"};
  testing::expect_error([&] { nn::GptLora l(m, lc, 1); }, {"synthesized operator"});
}

TEST(LinearKnownFamilies, EnumeratedOperatorsAreNamedByFamily) {
  synth::Spec spec = gpt_linear_spec(16);
  ASSERT_EQ(spec.bindings.size(), gpt_projection_classes(16).size());
  std::set<std::string> names;
  for (const synth::KnownFamily& f : synth::known_families(spec)) names.insert(f.name);
  // At width 16 every class has min(C_in, C_out) = 16: a bottleneck of 16 or more is not low rank.
  for (const char* n : {"dense linear", "grouped linear (g groups)", "grouped linear (h groups)",
                        "low-rank linear (rank g)", "low-rank linear (rank C_in/(g*h))",
                        "factored dense linear (rank C_out/h)", "factored dense linear (rank g^3*h)"})
    EXPECT_TRUE(names.count(n)) << n;
  for (const char* n : {"low-rank linear (rank C_out/h)", "low-rank linear (rank g^3*h)"})
    EXPECT_FALSE(names.count(n)) << n;
  synth::Options so;
  so.max_depth = 4;
  synth::Synthesizer syn(spec, so);
  synth::EnumResult en = synth::enumerate(syn, true);
  std::vector<std::string> fam = synth::known_family_names(spec, en.operators, synth::known_families(spec));
  std::map<std::string, int> seen;
  for (size_t i = 0; i < fam.size(); ++i) ++seen[fam[i]];
  // The dense product and the block-diagonal one are in the space at depth 4, and named.
  EXPECT_EQ(seen["dense linear"], 1);
  EXPECT_GE(seen["grouped linear (g groups)"], 1);
  EXPECT_GT(seen[""], 0);  // and operators outside the library
}

TEST(LmTrials, EvaluationRecordsRoundTrip) {
  trials::LmEvaluation e;
  e.key = "k", e.formula = "f", e.actions = "a", e.family = "dense linear", e.class_mask = 5, e.val_loss = 2.5;
  e.train_loss = 2.25, e.step_ms = 3, e.base_step_ms = 4, e.params = 1000, e.train_seconds = 1.5, e.order = 2;
  trials::LmEvaluation r = trials::lm_evaluation_from_json(trials::to_json(e));
  EXPECT_EQ(trials::to_json(r), trials::to_json(e));
  testing::expect_error([] { trials::lm_evaluation_from_json("{\"key\": 1}"); }, {"malformed"});
  std::string big = trials::to_json(e);
  big.replace(big.find("\"class_mask\":5"), 14, "\"class_mask\":1e300");
  testing::expect_error([&] { trials::lm_evaluation_from_json(big); }, {"malformed", "class_mask"});
}

TEST(LmTrials, ASmallSearchWithTheCostModelGivesTheSameOutcomeTwice) {
  trials::set_plan_timer(trials::cost_model_ms);
  struct Restore {
    ~Restore() { trials::set_plan_timer(nullptr); }
  } restore;
  testing::TempDir dir("lm_trials");
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 400; ++i) text << "line " << i % 17 << " of some text to learn, " << i % 5 << "\n";
  }
  trials::LmTrialsConfig cfg;
  cfg.depth = 5;
  cfg.screened = 4;
  cfg.candidates = 2;
  cfg.proxy.model = {256, 16, 16, 2, 1};
  cfg.proxy.batch = 2, cfg.proxy.steps = 3, cfg.proxy.val_batches = 2;
  cfg.proxy.text_file = dir.file("text.txt");
  auto run = [&](const std::string& sub) {
    cfg.dir = dir.file(sub);
    return trials::run_lm_trials(cfg);
  };
  trials::LmTrialsOutcome a = run("a"), b = run("b");
  ASSERT_FALSE(a.baseline.failed) << a.baseline.error;
  ASSERT_EQ(a.evaluations.size(), 2u);
  ASSERT_EQ(b.evaluations.size(), 2u);
  EXPECT_EQ(a.baseline.step_ms, a.baseline.base_step_ms);  // the same plan, the same estimate
  for (size_t i = 0; i < 2; ++i) {
    const trials::LmEvaluation &x = a.evaluations[i], &y = b.evaluations[i];
    ASSERT_FALSE(x.failed) << x.error;
    EXPECT_EQ(x.key, y.key);
    EXPECT_EQ(x.class_mask, y.class_mask);
    EXPECT_NE(x.class_mask, 0u);
    EXPECT_EQ(x.val_loss, y.val_loss);
    EXPECT_EQ(x.step_ms, y.step_ms);
    EXPECT_LT(x.step_ms, x.base_step_ms);  // screened below the dense FLOPs
    EXPECT_EQ(x.base_step_ms, a.baseline.step_ms);
  }
  EXPECT_EQ(a.pareto, b.pareto);
  EXPECT_FALSE(a.pareto.empty());
  EXPECT_TRUE(std::filesystem::exists(dir.file("a/report.md")));
  std::ifstream log(dir.file("a/lm_evaluations.jsonl"));
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) trials::lm_evaluation_from_json(line), ++lines;
  EXPECT_EQ(lines, 3);
  for (size_t i : a.pareto) {
    bool any = false;
    for (const auto& entry : std::filesystem::directory_iterator(dir.file("a")))
      any |= entry.path().filename().string().starts_with("op" + std::to_string(i) + "_");
    EXPECT_TRUE(any) << "no exported module of front operator " << i;
  }
}

}  // namespace
}  // namespace synoros
