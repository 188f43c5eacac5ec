// `synoros generate`: text from a GPT-2 model (a file or a named configuration), streamed as it
// is decoded, with prefill and decode rates.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "synoros/lora.hpp"
#include "synoros/profile.hpp"

namespace synoros::cli {

namespace {
std::string show_token(int64_t tok) {
  if (tok < 256) return std::string(1, char(uint8_t(tok)));
  return "<" + std::to_string(tok) + ">";
}
}  // namespace

int generate_cmd(const Args& a) {
  apply_threads(a);
  const std::string model = a.str("model", "gpt-tiny");
  std::shared_ptr<nn::Gpt> m;
  const std::vector<std::string> presets = nn::GptConfig::preset_names();
  if (std::find(presets.begin(), presets.end(), model) != presets.end()) {
    m = std::make_shared<nn::Gpt>(nn::GptConfig::preset(model), uint64_t(a.integer("init-seed", 1)));
  } else if (std::filesystem::exists(model)) {
    m = nn::Gpt::load(model, a.integer("heads", 0));
  } else {
    std::string known;
    for (const std::string& n : presets) known += (known.empty() ? "" : ", ") + n;
    throw UsageError("generate: --model '" + model + "' is neither a file nor a configuration (" + known + ")");
  }
  std::unique_ptr<nn::GptLora> lora;
  if (a.has("lora")) {
    std::string file = a.str("lora");
    if (std::filesystem::is_directory(file)) file += "/adapter_model.safetensors";
    if (!std::filesystem::is_regular_file(file)) throw UsageError("generate: --lora '" + a.str("lora") + "' has no adapters");
    lora = std::make_unique<nn::GptLora>(*m, nn::GptLora::read_config(file), 0);
    lora->load(file);
    if (!a.has("no-merge")) lora->merge();
    std::cerr << "LoRA: " << lora->parameter_count() << " adapter parameters from " << file
              << (lora->merged() ? ", merged" : "") << "\n";
  } else {
    a.refuse("no-merge", "needs --lora");
  }
  const nn::GptConfig& c = m->cfg;
  std::string prompt = a.str("prompt", "\n");
  if (prompt.empty()) prompt = "\n";
  if (c.vocab < 256)
    throw UsageError("generate: the prompt is read as bytes, but this model's vocabulary has only " +
                     std::to_string(c.vocab) + " tokens");
  if (int64_t(prompt.size()) > c.context)
    throw UsageError("generate: the prompt has " + std::to_string(prompt.size()) + " bytes; the context holds " +
                     std::to_string(c.context));
  const int64_t n = a.integer("tokens", 64), batch = a.integer("batch", 1);
  nn::Sampling s;
  s.temperature = a.real("temperature", 0.8);
  s.top_k = a.integer("top-k", 40);
  s.top_p = a.real("top-p", 0.95);
  s.seed = uint64_t(a.integer("seed", 1));
  std::vector<int64_t> row;
  for (char ch : prompt) row.push_back(uint8_t(ch));
  std::cerr << "model: " << c.str() << " (" << m->parameter_count() << " parameters), batch " << batch << ", "
            << num_threads() << " threads\n";
  std::cout << prompt << std::flush;
  nn::GptGenerator gen(*m, batch);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point t1 = t0, t2 = t0, t3 = t0;  // after the prefill, the first decode, the last
  auto rows = gen.generate(std::vector<std::vector<int64_t>>(size_t(batch), row), n, s,
                           [&](int64_t step, const std::vector<int64_t>& toks) {
                             (step == 0 ? t1 : step == 1 ? t2 : t3) = Clock::now();
                             std::cout << show_token(toks[0]) << std::flush;
                           });
  std::cout << "\n";
  for (int64_t b = 1; b < batch; ++b) {
    std::cout << "--- row " << b << " ---\n" << prompt;
    for (int64_t tok : rows[size_t(b)]) std::cout << show_token(tok);
    std::cout << "\n";
  }
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t3 - t2).count();
  std::cerr << "prefill: " << batch * int64_t(row.size()) << " tokens in " << prefill_s * 1e3 << " ms ("
            << double(batch * int64_t(row.size())) / prefill_s << " tokens/s, compile included)\n";
  if (n > 2)
    std::cerr << "decode: " << batch * (n - 2) << " tokens in " << decode_s * 1e3 << " ms ("
              << double(batch * (n - 2)) / decode_s << " tokens/s, after the first step, which compiles)\n";
  std::vector<Plan*> stages = gen.decode_plans();
  if (a.has("profile") && !stages.empty()) {
    MachinePeak peak = measure_peak();
    for (size_t i = 0; i < stages.size(); ++i) {
      std::cerr << "decode stage " << i << " of " << stages.size() << " at position " << gen.position() << ":\n";
      std::cerr << profile(*stages[i], int(a.integer("profile")), peak).table();
    }
  }
  return 0;
}

}  // namespace synoros::cli
