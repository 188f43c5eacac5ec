// LoRA adapters for the GPT-2 family: attaching and freezing, merging, and PEFT's file layout.
#include "synoros/lora.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "io/atomic_file.hpp"
#include "synoros/checkpoint.hpp"

namespace synoros::nn {

namespace {
constexpr const char* kPeftPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The value after "key": in a flat JSON object (PEFT's adapter_config.json), raw text up to the
// next ',' or '}' outside brackets and quotes; empty when the key is absent.
std::string json_value(const std::string& json, const std::string& key) {
  size_t k = json.find("\"" + key + "\"");
  if (k == std::string::npos) return "";
  size_t c = json.find(':', k);
  if (c == std::string::npos) return "";
  size_t i = c + 1, depth = 0;
  bool quoted = false;
  std::string v;
  for (; i < json.size(); ++i) {
    char ch = json[i];
    if (ch == '"') quoted = !quoted;
    if (!quoted && (ch == '[' || ch == '{')) ++depth;
    if (!quoted && (ch == ']' || ch == '}')) {
      if (depth == 0) break;
      --depth;
    }
    if (!quoted && depth == 0 && ch == ',') break;
    v += ch;
  }
  size_t b = v.find_first_not_of(" \t\r\n"), e = v.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : v.substr(b, e - b + 1);
}

std::vector<std::string> json_strings(const std::string& v) {
  std::vector<std::string> out;
  for (size_t i = 0; (i = v.find('"', i)) != std::string::npos;) {
    size_t j = v.find('"', i + 1);
    if (j == std::string::npos) break;
    out.push_back(v.substr(i + 1, j - i - 1));
    i = j + 1;
  }
  return out;
}

double parse_real(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("lora: " + what + " is '" + text + "', not a number");
}
}  // namespace

void LoraConfig::check() const {
  if (rank < 1 || rank > 65536) throw Error("lora: rank must be in [1, 65536], got " + std::to_string(rank));
  if (!(alpha > 0) || !std::isfinite(alpha)) throw Error("lora: alpha must be > 0, got " + std::to_string(alpha));
  if (targets.empty()) throw Error("lora: no target modules");
  for (const std::string& t : targets)
    if (t.empty()) throw Error("lora: an empty target module name");
}

std::string LoraConfig::targets_str() const {
  std::string s;
  for (const std::string& t : targets) s += (s.empty() ? "" : ",") + t;
  return s;
}

std::vector<std::string> LoraConfig::parse_targets(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string t; std::getline(in, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

Tensor LoraAdapter::delta(const Tensor& x) const {
  // The rank-r intermediate carries the scaling: r multiplies per position instead of `out`.
  return einsum("btr,nr->btn", {einsum("btk,rk->btr", {x, A}) * scaling, B});
}

GptLora::GptLora(Gpt& model, LoraConfig cfg, uint64_t seed) : m_(model), cfg_(std::move(cfg)) {
  cfg_.check();
  std::set<std::string> used;
  for (size_t l = 0; l < m_.h.size(); ++l) {
    GptBlock& b = *m_.h[l];
    const std::pair<const char*, std::shared_ptr<Conv1D>> projections[] = {
        {"attn.c_attn", b.c_attn}, {"attn.c_proj", b.attn_proj}, {"mlp.c_fc", b.c_fc}, {"mlp.c_proj", b.mlp_proj}};
    for (const auto& [local, layer] : projections) {
      std::string name = "transformer.h." + std::to_string(l) + "." + local;
      bool hit = false;
      for (const std::string& t : cfg_.targets)
        if (name == t || ends_with(name, "." + t)) hit = true, used.insert(t);
      if (!hit) continue;
      if (layer->lora) throw Error("lora: '" + name + "' already has an adapter");
      if (layer->product) throw Error("lora: '" + name + "' has a synthesized operator, not a dense weight");
      int64_t in = layer->in_features(), out = layer->out_features();
      auto a = std::make_shared<LoraAdapter>();
      uint64_t s = seed + 7919 * uint64_t(sites_.size() + 1);
      a->A = Tensor::uniform({cfg_.rank, in}, s, 1.0 / std::sqrt(double(in)));  // kaiming_uniform(a=sqrt(5))
      a->B = Tensor::zeros({out, cfg_.rank});
      a->scaling = cfg_.scaling();
      register_parameter(kPeftPrefix + name + ".lora_A.weight", a->A);
      register_parameter(kPeftPrefix + name + ".lora_B.weight", a->B);
      sites_.push_back({name, layer, a, {}});
    }
  }
  for (const std::string& t : cfg_.targets)
    if (!used.count(t))
      throw Error("lora: target '" + t + "' matches no projection (GPT-2 has c_attn, c_proj, c_fc, attn.c_proj, mlp.c_proj)");
  for (Site& s : sites_) s.layer->lora = s.adapter;
  for (auto& [name, p] : m_.named_parameters()) {
    frozen_.emplace_back(p, p.requires_grad_enabled());
    p.requires_grad(false);
    p.stateful();  // pinned: plans read the base weights in place
  }
}

GptLora::~GptLora() {
  try {
    unmerge();
  } catch (...) {
  }
  for (Site& s : sites_)
    if (s.layer->lora == s.adapter) s.layer->lora.reset();
  for (auto& [p, on] : frozen_) p.requires_grad(on);
}

Tensor GptLora::forward(const Tensor& tokens) { return m_.forward(tokens); }

void GptLora::merge() {
  if (merged()) return;
  for (Site& s : sites_) {
    HostTensor w = s.layer->weight.value();  // shares the parameter's storage
    HostTensor a = s.adapter->A.value(), b = s.adapter->B.value();
    s.base = HostTensor(DType::F32, w.shape);
    std::memcpy(s.base.buffer->data(), w.buffer->data(), w.bytes());
    const int64_t in = w.shape[0], out = w.shape[1], r = cfg_.rank;
    const float* A = a.data<float>();
    const float* B = b.data<float>();
    float* W = static_cast<float*>(w.buffer->data());
    for (int64_t k = 0; k < in; ++k)
      for (int64_t n = 0; n < out; ++n) {
        double d = 0;
        for (int64_t j = 0; j < r; ++j) d += double(A[j * in + k]) * double(B[n * r + j]);
        W[k * out + n] = float(double(W[k * out + n]) + s.adapter->scaling * d);
      }
    w.buffer->mark_modified();
    s.adapter->merged = true;
  }
}

void GptLora::unmerge() {
  if (!merged()) return;
  for (Site& s : sites_) {
    HostTensor w = s.layer->weight.value();
    std::memcpy(w.buffer->data(), s.base.buffer->data(), w.bytes());
    w.buffer->mark_modified();
    s.base = HostTensor();
    s.adapter->merged = false;
  }
}

void GptLora::save(const std::string& path) const {
  io::Metadata md = {{"format", "pt"},
                     {"peft_type", "LORA"},
                     {"r", std::to_string(cfg_.rank)},
                     {"lora_alpha", io::metadata_real(cfg_.alpha)},
                     {"target_modules", cfg_.targets_str()}};
  io::save_safetensors(path, named_parameters(), md);
}

void GptLora::save_pretrained(const std::string& dir, const std::string& base_name) const {
  std::filesystem::create_directories(dir);
  save(dir + "/adapter_model.safetensors");
  std::ostringstream j;
  j << "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": \"";
  for (char c : base_name) j << (c == '"' || c == '\\' ? "\\" : "") << c;
  j << "\",\n  \"r\": " << cfg_.rank << ",\n  \"lora_alpha\": " << io::metadata_real(cfg_.alpha)
    << ",\n  \"lora_dropout\": 0.0,\n  \"fan_in_fan_out\": true,\n  \"bias\": \"none\",\n  \"target_modules\": [";
  for (size_t i = 0; i < cfg_.targets.size(); ++i) j << (i ? ", " : "") << "\"" << cfg_.targets[i] << "\"";
  j << "],\n  \"inference_mode\": true\n}\n";
  std::string text = j.str();
  io::write_file_atomic(dir + "/adapter_config.json", "adapter configuration",
                        [&](const io::ByteSink& sink) { sink(text.data(), text.size()); });
}

LoraConfig GptLora::read_config(const std::string& path) {
  io::Metadata md = io::load_safetensors(path).metadata;
  LoraConfig c;
  if (md.count("r") && md.count("lora_alpha") && md.count("target_modules")) {
    c.rank = io::metadata_int(md, "r", path, 1, 65536);
    c.alpha = parse_real(md.at("lora_alpha"), "'" + path + "': lora_alpha");
    c.targets = LoraConfig::parse_targets(md.at("target_modules"));
  } else {
    std::filesystem::path json = std::filesystem::path(path).parent_path() / "adapter_config.json";
    std::ifstream in(json);
    if (!in)
      throw Error("lora: '" + path + "' does not record its rank, alpha and targets, and there is no " + json.string());
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str(), what = "'" + json.string() + "': ";
    std::string r = json_value(text, "r"), alpha = json_value(text, "lora_alpha"), t = json_value(text, "target_modules");
    if (r.empty() || alpha.empty() || t.empty()) throw Error("lora: " + what + "needs r, lora_alpha and target_modules");
    c.rank = int64_t(parse_real(r, what + "r"));
    c.alpha = parse_real(alpha, what + "lora_alpha");
    c.targets = json_strings(t);  // a list of names, or one name
  }
  c.check();
  return c;
}

void GptLora::load(const std::string& path) {
  io::Checkpoint ck = io::load_safetensors(path);
  auto fail = [&](const std::string& why) -> Error { return Error("lora: '" + path + "': " + why); };
  std::map<std::string, const HostTensor*> t;  // canonical: "transformer.h.0.attn.c_attn.lora_A.weight"
  for (auto& [name, value] : ck.tensors) {
    std::string n = name;
    if (n.rfind(kPeftPrefix, 0) == 0) n = n.substr(std::strlen(kPeftPrefix));
    for (const char* ab : {".lora_A", ".lora_B"}) {
      size_t at = n.find(std::string(ab) + ".default.");
      if (at != std::string::npos) n.erase(at + std::strlen(ab), 8);
    }
    if (n.rfind("transformer.", 0) != 0) n = "transformer." + n;
    t[n] = &value;
  }
  std::vector<std::pair<const HostTensor*, Tensor>> copies;
  for (const Site& s : sites_)
    for (const auto& [ab, dst] : {std::pair<std::string, Tensor>{".lora_A.weight", s.adapter->A},
                                  std::pair<std::string, Tensor>{".lora_B.weight", s.adapter->B}}) {
      auto it = t.find(s.name + ab);
      if (it == t.end()) throw fail("no adapter '" + s.name + ab + "'");
      const HostTensor& src = *it->second;
      if (src.dtype != DType::F32 || src.shape != dst.shape())
        throw fail("'" + s.name + ab + "' is " + std::string(io::safetensors_dtype(src.dtype)) + " " +
                   shape_str(src.shape) + ", expected F32 " + shape_str(dst.shape()) + " (rank " +
                   std::to_string(cfg_.rank) + ")");
      copies.emplace_back(&src, dst);
      t.erase(it);
    }
  if (!t.empty()) throw fail("unexpected tensor '" + t.begin()->first + "' (not one of this configuration's adapters)");
  bool was = merged();
  if (was) unmerge();
  for (auto& [src, dst] : copies) {
    HostTensor h = dst.value();  // shares the adapter's storage
    std::memcpy(h.buffer->data(), src->buffer->data(), h.bytes());
    h.buffer->mark_modified();
  }
  if (was) merge();
}

}  // namespace synoros::nn
