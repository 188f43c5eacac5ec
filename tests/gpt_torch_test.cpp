// The GPT-2 family against PyTorch (Debian's 1.13): bench/torch_gpt.py builds a randomly
// initialised model with Hugging Face's names and layouts and writes it as safetensors with some
// tokens, its logits and its gradients; the engine loads the file and must agree within float32
// tolerance. Skipped when /usr/bin/python3 has no torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "test_util.hpp"

namespace synoros {
namespace {

const char* kScript = R"PY(
import sys
sys.path.insert(0, sys.argv[1] + "/bench")
import torch, torch_gpt
torch.manual_seed(0)
model = torch_gpt.Gpt(vocab=40, context=12, width=24, heads=3, layers=2)
with torch.no_grad():  # non-trivial norms and biases
    for name, p in model.named_parameters():
        if name.endswith("bias") or ".ln_" in name:
            p.add_(torch.randn_like(p) * 0.1)
tokens = torch.randint(0, 40, (2, 12))
targets = torch.randint(0, 40, (2, 12))
logits = model(tokens)
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 40), targets.reshape(-1))
loss.backward()
params = dict(model.named_parameters())
torch_gpt.save_safetensors(sys.argv[2] + "/model.safetensors", params, {"heads": "3"})
out = {"tokens": tokens.float(), "targets": targets.float(), "logits": logits, "loss": loss.reshape(1)}
for name, p in params.items():
    out["grad." + name] = p.grad
torch_gpt.save_safetensors(sys.argv[2] + "/expected.safetensors", out)
print("torch-gpt-ok")
)PY";

// LoRA as PEFT computes it (result = base(x) + lora_B(lora_A(x)) * alpha / r) on every Conv1D,
// the base frozen; the adapters' gradients and PEFT's adapter file layout.
const char* kLoraScript = R"PY(
import sys, types
sys.path.insert(0, sys.argv[1] + "/bench")
import torch, torch_gpt
torch.manual_seed(0)
model = torch_gpt.Gpt(vocab=40, context=12, width=24, heads=3, layers=2)
torch_gpt.save_safetensors(sys.argv[2] + "/base.safetensors", dict(model.named_parameters()), {"heads": "3"})
for p in model.parameters():
    p.requires_grad_(False)
r, alpha = 4, 6.0
adapters = {}
def lora_forward(self, x):
    return x @ self.weight + self.bias + (x @ self.lora_A.t()) @ self.lora_B.t() * (alpha / r)
for name, m in model.named_modules():
    if isinstance(m, torch_gpt.Conv1D):
        n_in, n_out = m.weight.shape
        m.lora_A = torch.nn.Parameter(torch.randn(r, n_in) * 0.2)
        m.lora_B = torch.nn.Parameter(torch.randn(n_out, r) * 0.2)
        m.forward = types.MethodType(lora_forward, m)
        adapters["base_model.model." + name + ".lora_A.weight"] = m.lora_A
        adapters["base_model.model." + name + ".lora_B.weight"] = m.lora_B
tokens = torch.randint(0, 40, (2, 12))
targets = torch.randint(0, 40, (2, 12))
logits = model(tokens)
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 40), targets.reshape(-1))
loss.backward()
torch_gpt.save_safetensors(sys.argv[2] + "/adapter_model.safetensors", adapters,
                           {"r": "4", "lora_alpha": "6", "target_modules": "c_attn,c_proj,c_fc"})
out = {"tokens": tokens.float(), "targets": targets.float(), "logits": logits, "loss": loss.reshape(1)}
for name, p in adapters.items():
    out["grad." + name] = p.grad
torch_gpt.save_safetensors(sys.argv[2] + "/expected.safetensors", out)
print("torch-lora-ok")
)PY";

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

double max_abs(const HostTensor& a) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.get(i)));
  return m;
}

void expect_close(const HostTensor& got, const HostTensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  double scale = std::max(max_abs(want), 1e-6), worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::fabs(got.get(i) - want.get(i)));
  EXPECT_LE(worst, rel * scale) << what << ": largest difference " << worst << " against a scale of " << scale;
}

// Runs `script` (arguments: the source tree and `dir`) with Debian's Python.
void run_script(const char* script, const testing::TempDir& dir) {
  std::ofstream(dir.file("make.py")) << script;
  std::string cmd = "/usr/bin/python3 " + dir.file("make.py") + " " + SYNOROS_SOURCE_DIR + " " + dir.path.string() +
                    " > " + dir.file("out.txt") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << std::ifstream(dir.file("out.txt")).rdbuf();
}

// The script's tokens and targets against `m`: its logits, then a training step's loss and the
// gradients of `params` (names as the script wrote them after "grad.").
void expect_same_step(nn::Gpt& m, const nn::Named& params, io::Checkpoint& want) {
  HostTensor tokens(DType::I64, {2, 12}), targets(DType::I64, {2, 12});
  for (int64_t i = 0; i < 24; ++i)
    tokens.set(i, want.tensors["tokens"].get(i)), targets.set(i, want.tensors["targets"].get(i));
  expect_close(m.forward(Tensor::from(tokens)).value(), want.tensors["logits"], 2e-5, "logits");
  std::vector<Tensor> ps;
  for (auto& [n, p] : params) ps.push_back(p);
  CompiledStep step = compile_gpt_grad(m, 2, ps);
  std::vector<HostTensor> outs = step({tokens, targets});
  expect_close(outs[0], want.tensors["loss"], 1e-5, "loss");
  for (size_t i = 0; i < params.size(); ++i)
    expect_close(outs[i + 1], want.tensors["grad." + params[i].first], 1e-4, "gradient of " + params[i].first);
}

TEST(GptTorch, LogitsAndGradientsMatchPyTorch) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  testing::TempDir dir("gpt_torch");
  ASSERT_NO_FATAL_FAILURE(run_script(kScript, dir));
  auto m = nn::Gpt::load(dir.file("model.safetensors"));
  EXPECT_EQ(m->cfg.str(), nn::GptConfig({40, 12, 24, 3, 2}).str());
  io::Checkpoint want = io::load_safetensors(dir.file("expected.safetensors"));
  expect_same_step(*m, m->named_parameters(), want);
}

TEST(GptTorch, LoraLogitsAndAdapterGradientsMatchPyTorch) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 has no torch";
  testing::TempDir dir("gpt_torch_lora");
  ASSERT_NO_FATAL_FAILURE(run_script(kLoraScript, dir));
  auto m = nn::Gpt::load(dir.file("base.safetensors"));
  std::string file = dir.file("adapter_model.safetensors");
  nn::GptLora lora(*m, nn::GptLora::read_config(file), 1);
  lora.load(file);
  ASSERT_EQ(lora.named_parameters().size(), 16u);
  io::Checkpoint want = io::load_safetensors(dir.file("expected.safetensors"));
  expect_same_step(*m, lora.named_parameters(), want);
}

}  // namespace
}  // namespace synoros
