// LoRA for the GPT-2 family: PEFT's names and shapes, a fresh adapter changing nothing, the
// adapters' gradients against the float64 oracle, fine-tuning that moves only the adapters and
// resumes bit for bit, exact unmerging, and PEFT's file layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "test_util.hpp"

namespace synoros {
namespace {

nn::GptConfig small() { return {40, 12, 24, 3, 2}; }

HostTensor tokens(const nn::GptConfig& c, uint64_t seed, int64_t B = 2) {
  return testing::random_tensor({DType::I64, {B, c.context}, 0, double(c.vocab)}, seed);
}

std::vector<uint8_t> bytes_of(const nn::Named& params) {
  std::vector<uint8_t> out;
  for (auto& [n, p] : params) {
    HostTensor v = p.value();
    const auto* b = static_cast<const uint8_t*>(v.buffer->data());
    out.insert(out.end(), b, b + v.bytes());
  }
  return out;
}

// Gives every adapter's B random values (a fresh B is zero, which would hide A's gradient).
void randomize_b(nn::GptLora& lora, uint64_t seed) {
  for (auto& [name, p] : lora.named_parameters()) {
    if (name.find("lora_B") == std::string::npos) continue;
    HostTensor r = testing::random_tensor({DType::F32, p.shape(), -0.5, 0.5}, seed++);
    HostTensor h = p.value();
    std::memcpy(h.buffer->data(), r.buffer->data(), h.bytes());
    h.buffer->mark_modified();
  }
}

TEST(Lora, PeftNamesAndShapesAndAFreshAdapterChangesNothing) {
  nn::GptConfig c = small();
  nn::Gpt m(c, 1);
  Tensor x = Tensor::from(tokens(c, 2));
  HostTensor before = m.forward(x).value();
  {
    nn::GptLora lora(m, {}, 3);
    nn::Named p = lora.named_parameters();
    ASSERT_EQ(p.size(), 16u);  // 2 blocks x (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) x (A, B)
    EXPECT_EQ(p[0].first, "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight");
    EXPECT_EQ(p[0].second.shape(), (Shape{8, 24}));
    EXPECT_EQ(p[1].first, "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight");
    EXPECT_EQ(p[1].second.shape(), (Shape{72, 8}));
    EXPECT_EQ(p[7].first, "base_model.model.transformer.h.0.mlp.c_proj.lora_B.weight");
    EXPECT_EQ(p[7].second.shape(), (Shape{24, 8}));
    EXPECT_EQ(lora.parameter_count(), 2 * 8 * (24 + 72 + 24 + 24 + 24 + 96 + 96 + 24));
    for (auto& [n, t] : m.named_parameters()) EXPECT_FALSE(t.requires_grad_enabled()) << n;
    HostTensor with = m.forward(x).value();
    for (int64_t i = 0; i < with.numel(); ++i) ASSERT_EQ(with.get(i), before.get(i)) << i;
  }
  for (auto& [n, t] : m.named_parameters()) EXPECT_TRUE(t.requires_grad_enabled()) << n;
  nn::LoraConfig one;
  one.targets = {"attn.c_proj"};
  EXPECT_EQ(nn::GptLora(m, one, 1).named_parameters().size(), 4u);
  one.targets = {"q_proj"};
  testing::expect_error([&] { nn::GptLora(m, one, 1); }, {"target 'q_proj' matches no projection"});
  one.targets = {"c_fc"};
  one.rank = 0;
  testing::expect_error([&] { nn::GptLora(m, one, 1); }, {"rank must be in [1, 65536], got 0"});
}

TEST(Lora, AdapterGradientsMatchTheOracle) {
  testing::StrictKernels strict;
  nn::GptConfig c = small();
  nn::Gpt m(c, 1);
  nn::LoraConfig lc;
  lc.rank = 4, lc.alpha = 6;  // scaling 1.5
  nn::GptLora lora(m, lc, 5);
  randomize_b(lora, 9);
  CompiledStep step = compile_gpt_grad(m, 2, lora.parameters());
  HostTensor x = tokens(c, 2), y = tokens(c, 3);
  auto outs = step({x, y});
  ASSERT_EQ(outs.size(), 1 + lora.named_parameters().size());
  testing::expect_oracle_and_unfused_bits(step, {x, y}, outs);
  // Every adapter gets a gradient (A's flows through the random B).
  for (size_t i = 1; i < outs.size(); ++i) {
    double norm = 0;
    for (int64_t j = 0; j < outs[i].numel(); ++j) norm += std::fabs(outs[i].get(j));
    EXPECT_GT(norm, 0) << lora.named_parameters()[i - 1].first;
  }
}

TEST(Lora, MergeFoldsTheAdaptersAndUnmergeRestoresTheBaseBitForBit) {
  nn::GptConfig c = small();
  nn::Gpt m(c, 1);
  std::vector<uint8_t> base = bytes_of(m.named_parameters());
  Tensor x = Tensor::from(tokens(c, 2));
  HostTensor plain = m.forward(x).value();
  nn::GptLora lora(m, {}, 3);
  randomize_b(lora, 4);
  HostTensor adapted = m.forward(x).value();
  EXPECT_NE(0, std::memcmp(plain.buffer->data(), adapted.buffer->data(), plain.bytes()));
  lora.merge();
  EXPECT_TRUE(lora.merged());
  EXPECT_NE(bytes_of(m.named_parameters()), base);
  HostTensor merged = m.forward(x).value();
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < merged.numel(); ++i) {
    worst = std::max(worst, std::fabs(merged.get(i) - adapted.get(i)));
    scale = std::max(scale, std::fabs(adapted.get(i)));
  }
  EXPECT_LE(worst, 1e-5 * scale);
  lora.unmerge();
  EXPECT_EQ(bytes_of(m.named_parameters()), base);
  HostTensor again = m.forward(x).value();
  EXPECT_EQ(0, std::memcmp(again.buffer->data(), adapted.buffer->data(), adapted.bytes()));
}

TEST(Lora, FilesRoundTripInPeftsLayouts) {
  testing::TempDir dir("lora_files");
  nn::GptConfig c = small();
  nn::Gpt m(c, 1);
  nn::LoraConfig lc;
  lc.rank = 4, lc.alpha = 8, lc.targets = {"c_attn", "mlp.c_fc"};
  std::vector<uint8_t> saved;
  {
    nn::GptLora lora(m, lc, 3);
    randomize_b(lora, 4);
    saved = bytes_of(lora.named_parameters());
    lora.save(dir.file("a.safetensors"));
    lora.save_pretrained(dir.file("peft"), "gpt2");
  }
  for (const std::string& f : {dir.file("a.safetensors"), dir.file("peft/adapter_model.safetensors")}) {
    nn::LoraConfig read = nn::GptLora::read_config(f);
    EXPECT_EQ(read.rank, 4);
    EXPECT_EQ(read.alpha, 8);
    EXPECT_EQ(read.targets_str(), "c_attn,mlp.c_fc");
    nn::GptLora lora(m, read, 99);
    lora.load(f);
    EXPECT_EQ(bytes_of(lora.named_parameters()), saved);
  }
  // PEFT's variants: no metadata (the configuration from adapter_config.json), the adapter name
  // in the tensor names, no "base_model.model." prefix and no "transformer." either.
  std::filesystem::create_directories(dir.file("hf"));
  std::filesystem::copy_file(dir.file("peft/adapter_config.json"), dir.file("hf/adapter_config.json"));
  io::Checkpoint ck = io::load_safetensors(dir.file("a.safetensors"));
  std::map<std::string, HostTensor> renamed;
  for (auto& [name, t] : ck.tensors) {
    std::string n = name.substr(std::string("base_model.model.transformer.").size());
    n.insert(n.rfind(".weight"), ".default");
    renamed[n] = t;
  }
  io::save_safetensors(dir.file("hf/adapter_model.safetensors"), renamed);
  nn::LoraConfig read = nn::GptLora::read_config(dir.file("hf/adapter_model.safetensors"));
  EXPECT_EQ(read.targets_str(), "c_attn,mlp.c_fc");
  {
    nn::GptLora lora(m, read, 99);
    lora.load(dir.file("hf/adapter_model.safetensors"));
    EXPECT_EQ(bytes_of(lora.named_parameters()), saved);
  }
  // Mismatches name the tensor and leave the adapters as they were.
  nn::LoraConfig other = lc;
  other.rank = 2;
  nn::GptLora wrong_rank(m, other, 1);
  std::vector<uint8_t> fresh = bytes_of(wrong_rank.named_parameters());
  testing::expect_error([&] { wrong_rank.load(dir.file("a.safetensors")); },
                        {"transformer.h.0.attn.c_attn.lora_A.weight' is F32 [4,24], expected F32 [2,24] (rank 2)"});
  EXPECT_EQ(bytes_of(wrong_rank.named_parameters()), fresh);
}

TEST(Lora, FineTuningMovesOnlyTheAdaptersAndResumesBitForBit) {
  testing::TempDir dir("lora_train");
  nn::GptConfig c{256, 16, 16, 2, 1};
  nn::Gpt(c, 7).save(dir.file("base.safetensors"));
  {
    std::ofstream text(dir.file("text.txt"));
    for (int i = 0; i < 200; ++i) text << "the quick brown fox " << i % 7 << " jumps\n";
  }
  train::LmConfig cfg;
  cfg.name = "finetune";
  cfg.base = dir.file("base.safetensors");
  cfg.text_file = dir.file("text.txt");
  cfg.lora = nn::LoraConfig{};
  cfg.lora->rank = 4;
  cfg.batch = 4, cfg.steps = 6, cfg.warmup_steps = 1, cfg.lr = 1e-2, cfg.sequence = 12;
  train::LmTrainer straight(cfg);
  EXPECT_EQ(straight.model().cfg.str(), c.str());
  EXPECT_EQ(straight.optimizer().params().size(), straight.lora()->parameters().size());
  std::vector<uint8_t> base = bytes_of(straight.model().named_parameters());
  std::vector<uint8_t> adapters = bytes_of(straight.lora()->named_parameters());
  std::vector<double> losses;
  straight.train_steps(6, [&](int64_t, double l) { losses.push_back(l); });
  EXPECT_EQ(bytes_of(straight.model().named_parameters()), base);
  EXPECT_NE(bytes_of(straight.lora()->named_parameters()), adapters);
  EXPECT_LT(losses.back(), losses.front());

  train::LmTrainer first(cfg);
  first.train_steps(3);
  first.save(dir.file("ck.safetensors"));
  io::Checkpoint ck = io::load_safetensors(dir.file("ck.safetensors"));
  EXPECT_TRUE(ck.tensors.count("lora.base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"));
  EXPECT_FALSE(ck.tensors.count("model.transformer.wte.weight"));  // the base is named, not copied
  train::LmTrainer resumed(cfg);
  resumed.load(dir.file("ck.safetensors"));
  resumed.train_steps(3);
  EXPECT_EQ(bytes_of(resumed.lora()->named_parameters()), bytes_of(straight.lora()->named_parameters()));
  // Another base (same shapes, other values) is refused.
  nn::Gpt(c, 8).save(dir.file("other.safetensors"));
  std::filesystem::rename(dir.file("other.safetensors"), dir.file("base.safetensors"));
  train::LmTrainer changed(cfg);
  testing::expect_error([&] { changed.load(dir.file("ck.safetensors")); }, {"base_hash"});
  testing::expect_error([&] { nn::Gpt::load(dir.file("ck.safetensors")); }, {"a LoRA fine-tuning checkpoint"});
}

}  // namespace
}  // namespace synoros
