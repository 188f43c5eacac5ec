// The GPT-2 family: the training step against the float64 oracle, fused+planned against
// unfused+unplanned bit for bit, learning, Hugging Face names and files, and generation with a
// key/value cache that gives the full forward's logits bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "test_util.hpp"

namespace synoros {
namespace {

nn::GptConfig tiny() { return {16, 6, 8, 2, 2}; }
constexpr int64_t kBatch = 2;

HostTensor tokens(const nn::GptConfig& c, uint64_t seed, int64_t T = 0) {
  return testing::random_tensor({DType::I64, {kBatch, T ? T : c.context}, 0, double(c.vocab)}, seed);
}

TEST(Gpt, InitialLossIsNearUniform) {
  nn::GptConfig c = tiny();
  nn::Gpt m(c, 1);
  double loss = m.loss(Tensor::from(tokens(c, 2)), Tensor::from(tokens(c, 3))).item();
  EXPECT_NEAR(loss, std::log(double(c.vocab)), 0.3);
}

TEST(Gpt, TrainingStepMatchesOracleAndUnfusedBits) {
  testing::StrictKernels strict;
  nn::GptConfig c = tiny();
  nn::Gpt m(c, 1);
  CompiledStep step = compile_gpt_grad(m, kBatch);
  const Plan& p = step.plan();
  HostTensor x = tokens(c, 2), y = tokens(c, 3);
  auto outs = step({x, y});
  // Against the oracle, every intermediate included; fusion and memory planning change no bit.
  testing::expect_oracle_and_unfused_bits(step, {x, y}, outs);
  EXPECT_LT(p.arena_bytes(), p.unplanned_bytes());
}

// One block's part of a training step: y, the input's gradient and every parameter's, against
// the oracle and the unfused graph.
TEST(Gpt, BlockGradMatchesOracleAndUnfusedBits) {
  testing::StrictKernels strict;
  nn::GptConfig c = tiny();
  nn::GptBlock blk(c, 1);
  CompiledStep step = nn::compile_block_grad(blk, kBatch, c.context);
  const Shape s{kBatch, c.context, c.width};
  HostTensor x = Tensor::randn(s, 5).value(), g = Tensor::randn(s, 6).value();
  auto outs = step({x, g});
  ASSERT_EQ(outs.size(), 2 + blk.parameters().size());
  EXPECT_EQ(outs[1].shape, s);
  double norm = 0;
  for (int64_t i = 0; i < outs[1].numel(); ++i) norm += std::abs(outs[1].get(i));
  EXPECT_GT(norm, 0);
  testing::expect_oracle_and_unfused_bits(step, {x, g}, outs);
}

TEST(Gpt, LearnsAFixedBatch) {
  nn::GptConfig c = tiny();
  nn::Gpt m(c, 1);
  HostTensor x = tokens(c, 2), y = tokens(c, 3);
  optim::SGD opt(m.parameters(), 0.5);
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    Tensor loss = m.loss(Tensor::from(x), Tensor::from(y));
    loss.backward();
    opt.step();
    opt.zero_grad();
    (i == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.7 * first);
}

TEST(Gpt, ParametersCarryHuggingFaceNamesAndLayouts) {
  nn::GptConfig c = tiny();
  nn::Gpt m(c, 1);
  nn::Named p = m.named_parameters();
  ASSERT_EQ(p.size(), size_t(2 + 12 * c.layers + 2));
  EXPECT_EQ(p[0].first, "transformer.wte.weight");
  EXPECT_EQ(p[1].first, "transformer.wpe.weight");
  EXPECT_EQ(p[2].first, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(p[4].first, "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(p[4].second.shape(), (Shape{c.width, 3 * c.width}));  // Conv1D: [in, out]
  EXPECT_EQ(p[10].first, "transformer.h.0.mlp.c_fc.weight");
  EXPECT_EQ(p[12].first, "transformer.h.0.mlp.c_proj.weight");
  EXPECT_EQ(p[12].second.shape(), (Shape{4 * c.width, c.width}));
  EXPECT_EQ(p.back().first, "transformer.ln_f.bias");
  EXPECT_EQ(m.parameter_count(), c.parameter_count());
  // The presets' sizes: GPT-2 small has 124,439,808 parameters.
  EXPECT_EQ(nn::GptConfig::preset("gpt2-124m").parameter_count(), 124439808);
  EXPECT_NEAR(double(nn::GptConfig::preset("gpt2-98m").parameter_count()), 98e6, 1e6);
  EXPECT_NEAR(double(nn::GptConfig::preset("gpt2-11m").parameter_count()), 11e6, 0.5e6);
  testing::expect_error([] { nn::GptConfig::preset("gpt3"); }, {"unknown configuration 'gpt3'", "gpt2-124m"});
  testing::expect_error([] { nn::Gpt(nn::GptConfig{16, 6, 9, 2, 1}, 1); }, {"heads 2 must divide the width 9"});
  testing::expect_error([&] { m.forward(Tensor::from(tokens(c, 1, c.context + 1))); }, {"1 <= T <= 6"});
}

TEST(Gpt, SafetensorsRoundTripAndHuggingFaceVariants) {
  testing::TempDir dir("gpt_files");
  nn::GptConfig c = tiny();
  nn::Gpt m(c, 7);
  Tensor x = Tensor::from(tokens(c, 2));
  HostTensor want = m.forward(x).value();
  m.save(dir.file("m.safetensors"));
  auto same_logits = [&](nn::Gpt& g) {
    HostTensor got = g.forward(x).value();
    return std::memcmp(got.buffer->data(), want.buffer->data(), want.bytes()) == 0;
  };
  auto loaded = nn::Gpt::load(dir.file("m.safetensors"));
  EXPECT_EQ(loaded->cfg.str(), c.str());
  EXPECT_TRUE(same_logits(*loaded));
  // The recorded head count holds: the same count is accepted, another one refused by both numbers.
  EXPECT_TRUE(same_logits(*nn::Gpt::load(dir.file("m.safetensors"), c.heads)));
  testing::expect_error([&] { nn::Gpt::load(dir.file("m.safetensors"), 1); },
                        {"records " + std::to_string(c.heads) + " attention heads", "not the 1"});
  // Hugging Face's GPT2Model layout: no prefix, a tied lm_head, mask buffers, no metadata.
  std::map<std::string, HostTensor> hf;
  for (auto& [name, t] : m.named_parameters()) hf[name.substr(std::string("transformer.").size())] = t.value();
  hf["lm_head.weight"] = m.wte->weight.value();
  hf["h.0.attn.bias"] = HostTensor(DType::F32, {1, 1, c.context, c.context});
  io::save_safetensors(dir.file("hf.safetensors"), hf);
  auto from_hf = nn::Gpt::load(dir.file("hf.safetensors"), c.heads);
  EXPECT_TRUE(same_logits(*from_hf));
  // Without a head count, a width that is no multiple of 64 cannot be guessed.
  testing::expect_error([&] { nn::Gpt::load(dir.file("hf.safetensors")); }, {"attention heads"});
  // An untied head, a missing tensor, a wrong shape and a stray tensor are refused by name.
  std::map<std::string, HostTensor> bad = hf;
  bad["lm_head.weight"] = testing::random_tensor({DType::F32, {c.vocab, c.width}}, 3);
  io::save_safetensors(dir.file("bad.safetensors"), bad);
  testing::expect_error([&] { nn::Gpt::load(dir.file("bad.safetensors"), 2); }, {"lm_head.weight", "tied"});
  bad = hf;
  bad.erase("h.1.mlp.c_fc.bias");
  io::save_safetensors(dir.file("bad.safetensors"), bad);
  testing::expect_error([&] { nn::Gpt::load(dir.file("bad.safetensors"), 2); }, {"transformer.h.1.mlp.c_fc.bias"});
  bad = hf;
  bad["h.0.attn.c_proj.weight"] = HostTensor(DType::F32, {c.width + 1, c.width});
  io::save_safetensors(dir.file("bad.safetensors"), bad);
  testing::expect_error([&] { nn::Gpt::load(dir.file("bad.safetensors"), 2); }, {"transformer.h.0.attn.c_proj.weight", "[9,8]"});
  bad = hf;
  bad["h.0.attn.extra"] = HostTensor(DType::F32, {2});
  io::save_safetensors(dir.file("bad.safetensors"), bad);
  testing::expect_error([&] { nn::Gpt::load(dir.file("bad.safetensors"), 2); }, {"unexpected tensor 'transformer.h.0.attn.extra'"});
}

// Decoding against the cache gives, at every position, the bits of a full forward over the same
// tokens, on every instruction set and thread count, and never compiles after its first step.
class GptDecode : public ::testing::TestWithParam<nn::GptConfig> {};

TEST_P(GptDecode, MatchesTheFullForwardBitForBit) {
  nn::GptConfig c = GetParam();
  nn::Gpt m(c, 3);
  HostTensor all = tokens(c, 5);
  testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int threads) {
    nn::GptGenerator gen(m, kBatch);
    const int64_t P = 3;
    std::vector<std::vector<int64_t>> prompts(kBatch);
    for (int64_t b = 0; b < kBatch; ++b)
      for (int64_t t = 0; t < P; ++t) prompts[size_t(b)].push_back(int64_t(all.get(b * c.context + t)));
    const float* logits = gen.prefill(prompts);
    for (int64_t pos = P; pos <= c.context; ++pos) {
      // The full forward over tokens [0, pos): its last row.
      HostTensor prefix(DType::I64, {kBatch, pos});
      for (int64_t b = 0; b < kBatch; ++b)
        for (int64_t t = 0; t < pos; ++t) prefix.set(b * pos + t, all.get(b * c.context + t));
      HostTensor full = m.forward(Tensor::from(prefix)).value();
      for (int64_t b = 0; b < kBatch; ++b)
        EXPECT_EQ(0, std::memcmp(logits + b * c.vocab, full.data<float>() + ((b * pos) + pos - 1) * c.vocab,
                                 size_t(c.vocab) * sizeof(float)))
            << "isa " << int(isa) << " threads " << threads << " position " << pos - 1 << " row " << b;
      if (pos == c.context) break;
      std::vector<int64_t> next;
      for (int64_t b = 0; b < kBatch; ++b) next.push_back(int64_t(all.get(b * c.context + pos)));
      size_t plans = plan_cache_size();
      logits = gen.decode(next);
      if (pos > P) {
        EXPECT_EQ(plan_cache_size(), plans) << "decoding compiled again at position " << pos;
      }
    }
    EXPECT_EQ(gen.position(), c.context);
    testing::expect_error([&] { gen.decode({1, 1}); }, {"context of " + std::to_string(c.context) + " tokens is full"});
    // Tokens taken back: decoding another token at an earlier position gives the bits of a full
    // forward over the kept tokens and that one (the cache's later rows are stale then).
    for (int64_t back : {c.context - 2, P + 1, P}) {  // past a key block of 64, and within the first
      gen.rewind(back);
      EXPECT_EQ(gen.position(), back);
      HostTensor prefix(DType::I64, {kBatch, back + 1});
      std::vector<int64_t> next;
      for (int64_t b = 0; b < kBatch; ++b) {
        for (int64_t t = 0; t < back; ++t) prefix.set(b * (back + 1) + t, all.get(b * c.context + t));
        next.push_back((int64_t(all.get(b * c.context + back)) + 1 + b) % c.vocab);
        prefix.set(b * (back + 1) + back, double(next.back()));
      }
      logits = gen.decode(next);
      HostTensor full = m.forward(Tensor::from(prefix)).value();
      for (int64_t b = 0; b < kBatch; ++b)
        EXPECT_EQ(0, std::memcmp(logits + b * c.vocab, full.data<float>() + (b * (back + 1) + back) * c.vocab,
                                 size_t(c.vocab) * sizeof(float)))
            << "isa " << int(isa) << " threads " << threads << " rewound to " << back << " row " << b;
    }
    testing::expect_error([&] { gen.rewind(0); }, {"cannot rewind to position 0", "the cache holds"});
    testing::expect_error([&] { nn::GptGenerator(m, kBatch).rewind(1); }, {"rewind needs a prefill first"});
    testing::expect_error([&] { gen.rewind(gen.position() + 1); }, {"cannot rewind to position"});
  });
}
// Tiny, and wide enough that a decoding step's projections and head take the one-row GEMM path.
INSTANTIATE_TEST_SUITE_P(Sizes, GptDecode,
                         ::testing::Values(nn::GptConfig{32, 12, 16, 2, 2}, nn::GptConfig{300, 10, 128, 2, 1},
                                           nn::GptConfig{40, 70, 16, 2, 1}));  // past a key block of 64

TEST(GptGenerate, SameTokensOnEveryRerunAndThreadCount) {
  nn::GptConfig c{32, 16, 16, 2, 2};
  nn::Gpt m(c, 3);
  std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5, 6}};
  nn::Sampling s;
  s.temperature = 0.9, s.top_k = 20, s.top_p = 0.95, s.seed = 11;
  std::vector<std::vector<int64_t>> first;
  testing::for_every_isa_and_thread_count([&](kernels::Isa, int) {
    nn::GptGenerator gen(m, 2);
    int64_t seen = 0;
    auto out = gen.generate(prompts, 10, s, [&](int64_t step, const std::vector<int64_t>& t) {
      EXPECT_EQ(step, seen++);
      EXPECT_EQ(t.size(), 2u);
    });
    EXPECT_EQ(seen, 10);
    if (first.empty()) first = out;
    EXPECT_EQ(out, first);
  });
  // Greedy decoding equals picking the largest logit of a full forward, step by step.
  nn::GptGenerator gen(m, 1);
  nn::Sampling greedy;
  greedy.temperature = 0;
  std::vector<int64_t> seq = {7, 8};
  auto out = gen.generate({seq}, 6, greedy);
  for (int64_t tok : out[0]) {
    HostTensor x(DType::I64, {1, int64_t(seq.size())});
    for (size_t i = 0; i < seq.size(); ++i) x.set(int64_t(i), double(seq[i]));
    HostTensor l = m.forward(Tensor::from(x)).value();
    const float* row = l.data<float>() + (int64_t(seq.size()) - 1) * c.vocab;
    EXPECT_EQ(tok, std::max_element(row, row + c.vocab) - row);
    seq.push_back(tok);
  }
  // Past the context: the newest half is prefilled again, and decoding goes on, deterministically.
  auto longer = gen.generate({{1, 2}}, 40, s);
  EXPECT_EQ(longer[0].size(), 40u);
  EXPECT_EQ(nn::GptGenerator(m, 1).generate({{1, 2}}, 40, s), longer);
  testing::expect_error([&] { gen.prefill({std::vector<int64_t>(17, 1)}); }, {"17 tokens; it needs 1 to 16"});
  testing::expect_error([&] { gen.generate({{1, 99}}, 2, greedy); }, {"token 99 is outside the vocabulary"});
  testing::expect_error([&] { gen.generate({{1, 2}, {3}}, 2, greedy); }, {"2 prompts for a batch of 1"});
}

TEST(GptGenerate, SamplerFollowsTemperatureTopKAndTopP) {
  const float logits[4] = {0.0f, std::log(3.0f), -1.0f, -30.0f};
  auto frequencies = [&](nn::Sampling s) {
    nn::Sampler sampler(s);
    std::vector<int> n(4, 0);
    for (int i = 0; i < 20000; ++i) ++n[size_t(sampler.pick(logits, 4))];
    std::vector<double> f;
    for (int k : n) f.push_back(k / 20000.0);
    return f;
  };
  nn::Sampling s;
  s.seed = 3;
  std::vector<double> f = frequencies(s);  // softmax: 1, 3, e^-1, ~0 over 4.37
  EXPECT_NEAR(f[1], 3 / (4 + std::exp(-1.0)), 0.015);
  EXPECT_NEAR(f[2], std::exp(-1.0) / (4 + std::exp(-1.0)), 0.015);
  EXPECT_EQ(f[3], 0);
  s.top_k = 2;
  f = frequencies(s);
  EXPECT_NEAR(f[1], 0.75, 0.015);
  EXPECT_EQ(f[2], 0);
  s.top_k = 0, s.top_p = 0.5;  // the largest alone reaches 0.69
  EXPECT_EQ(frequencies(s)[1], 1.0);
  s.top_p = 1, s.temperature = 0.25;  // sharper: 3^4 = 81 against 1
  EXPECT_NEAR(frequencies(s)[1], 81.0 / 82.0, 0.01);
  s.temperature = 0;
  EXPECT_EQ(frequencies(s)[1], 1.0);
  s.temperature = -1;
  testing::expect_error([&] { nn::Sampler x(s); }, {"temperature"});
  s.temperature = 1, s.top_p = 0;
  testing::expect_error([&] { nn::Sampler x(s); }, {"top-p"});
}

}  // namespace
}  // namespace synoros
