// Generation for the GPT-2 family: a prefill plan per prompt length, and decoding by one plan per
// block boundary that attends over a static key/value cache of the context length. Between two
// stages the host writes the new key and value rows into the caches; the fused attention places
// the query at the current position (an input the host writes), so it reads the keys the full
// forward's row reads, up to that position, in the same order, and the logits agree bit for bit.
// The cache's rows after the position are never read.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ir/scalar_ops.hpp"
#include "synoros/gpt.hpp"

namespace synoros::nn {

Sampler::Sampler(const Sampling& s) : s_(s), state_(s.seed * 0x9E3779B97F4A7C15ull + 1) {
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) throw Error("sampling: temperature must be >= 0");
  if (s.top_k < 0) throw Error("sampling: top-k must be >= 0");
  if (!(s.top_p > 0 && s.top_p <= 1)) throw Error("sampling: top-p must be in (0, 1]");
}

int64_t Sampler::pick(const float* logits, int64_t vocab) {
  auto first_max = [&] {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    return best;
  };
  if (s_.temperature == 0 || s_.top_k == 1) return first_max();
  // Candidates, largest logit first (ties: smaller token first); only as many as needed sorted.
  order_.resize(size_t(vocab));
  for (int64_t v = 0; v < vocab; ++v) order_[size_t(v)] = {logits[v], v};
  auto before = [](const std::pair<float, int64_t>& a, const std::pair<float, int64_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = s_.top_k > 0 ? std::min<size_t>(size_t(s_.top_k), order_.size()) : order_.size();
  if (keep < order_.size() || s_.top_p < 1) {
    std::partial_sort(order_.begin(), order_.begin() + long(keep), order_.end(), before);
    order_.resize(keep);
  }
  float top = order_[0].first;
  if (keep == order_.size() && s_.top_p >= 1) top = logits[first_max()];
  // Probabilities from the engine's fixed exp polynomial: the same bits on every machine.
  prob_.resize(order_.size());
  double sum = 0;
  const float inv_t = float(1.0 / s_.temperature);
  for (size_t i = 0; i < order_.size(); ++i) sum += prob_[i] = double(kernels::fn::exp_f32((order_[i].first - top) * inv_t));
  if (s_.top_p < 1) {
    double cum = 0;
    size_t n = 0;
    while (n < prob_.size() && cum < s_.top_p * sum) cum += prob_[n++];
    prob_.resize(std::max<size_t>(n, 1));
    sum = cum > 0 ? cum : prob_[0];
  }
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  double u = double((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * sum;
  for (size_t i = 0; i < prob_.size(); ++i)
    if ((u -= prob_[i]) < 0) return order_[i].second;
  return order_[prob_.size() - 1].second;
}

GptGenerator::GptGenerator(Gpt& model, int64_t batch) : m_(model), batch_(batch) {
  if (batch < 1) throw Error("generate: batch must be >= 1");
  const GptConfig& c = m_.cfg;
  m_.eval();
  for (int64_t l = 0; l < c.layers; ++l)
    for (auto* cache : {&k_, &v_}) {
      HostTensor z(DType::F32, Shape{batch, c.heads, c.context, c.width / c.heads});
      std::memset(z.buffer->data(), 0, z.bytes());
      cache->push_back(Tensor::from(z));
      cache->back().stateful();
      (cache == &k_ ? k_host_ : v_host_).push_back(cache->back().value());  // shares its storage
    }
  HostTensor offset(DType::I64, {1});
  std::memset(offset.buffer->data(), 0, offset.bytes());
  offset_ = Tensor::from(offset);
  offset_.stateful();
  offset_host_ = offset_.value();
  last_.resize(size_t(batch * c.vocab));
}

GptGenerator::~GptGenerator() = default;

void GptGenerator::reset() {
  for (auto* cache : {&k_host_, &v_host_})
    for (HostTensor& h : *cache) {
      std::memset(h.buffer->data(), 0, h.bytes());
      h.buffer->mark_modified();
    }
  pos_ = 0;
}

// Copies rows [0, count) of a layer's new keys and values ([B, H, count, D]) into its caches at
// positions [first, first + count).
void GptGenerator::write_cache_layer(size_t l, const float* k, const float* v, int64_t first, int64_t count) {
  const GptConfig& c = m_.cfg;
  const int64_t H = c.heads, D = c.width / c.heads, T = c.context;
  float* vd = static_cast<float*>(v_host_[l].buffer->data());
  float* kd = static_cast<float*>(k_host_[l].buffer->data());
  for (int64_t bh = 0; bh < batch_ * H; ++bh) {
    std::memcpy(vd + (bh * T + first) * D, v + bh * count * D, size_t(count * D) * sizeof(float));
    std::memcpy(kd + (bh * T + first) * D, k + bh * count * D, size_t(count * D) * sizeof(float));
  }
  v_host_[l].buffer->mark_modified();
  k_host_[l].buffer->mark_modified();
}

void GptGenerator::rewind(int64_t position) {
  if (pos_ < 1) throw Error("generate: rewind needs a prefill first");
  if (position < 1 || position > pos_)
    throw Error("generate: cannot rewind to position " + std::to_string(position) + "; the cache holds " +
                std::to_string(pos_) + " positions, and rewind takes 1 to " + std::to_string(pos_));
  // The rows from `position` on stay as they are: the attention reads the keys and values up to
  // the query's position only, and the next decode overwrites the row at `position`.
  pos_ = position;
}

const float* GptGenerator::prefill(const std::vector<std::vector<int64_t>>& prompts) {
  const GptConfig& c = m_.cfg;
  if (int64_t(prompts.size()) != batch_)
    throw Error("generate: " + std::to_string(prompts.size()) + " prompts for a batch of " + std::to_string(batch_));
  const int64_t P = int64_t(prompts[0].size()), B = batch_;
  if (P < 1 || P > c.context)
    throw Error("generate: the prompt has " + std::to_string(P) + " tokens; it needs 1 to " + std::to_string(c.context));
  HostTensor tokens(DType::I64, {B, P});
  for (int64_t b = 0; b < B; ++b) {
    if (int64_t(prompts[size_t(b)].size()) != P) throw Error("generate: every prompt of a batch needs the same length");
    for (int64_t t = 0; t < P; ++t) {
      int64_t tok = prompts[size_t(b)][size_t(t)];
      if (tok < 0 || tok >= c.vocab)
        throw Error("generate: token " + std::to_string(tok) + " is outside the vocabulary of " + std::to_string(c.vocab));
      tokens.set(b * P + t, double(tok));
    }
  }
  auto& step = prefill_[P];
  if (!step)
    step = std::make_unique<CompiledStep>(compile(
        [&](const std::vector<Tensor>& a) {
          std::vector<Tensor> kv;
          Tensor logits = m_.forward_with(a[0], {}, [&](size_t, const Tensor& q, const Tensor& k, const Tensor& v) {
            kv.push_back(k);
            kv.push_back(v);
            return gpt_attention(q, k, v);
          });
          std::vector<Tensor> out = {logits.slice(1, P - 1, P).reshape({B, c.vocab})};
          out.insert(out.end(), kv.begin(), kv.end());
          return out;
        },
        {{DType::I64, {B, P}}}));
  // The cache is not cleared: the rows from P on are never read before a decode writes them.
  std::vector<HostTensor> out = (*step)({tokens});
  for (size_t l = 0; l < k_.size(); ++l)
    write_cache_layer(l, step->output_ptr(1 + 2 * l), step->output_ptr(2 + 2 * l), 0, P);
  pos_ = P;
  std::memcpy(last_.data(), out[0].buffer->data(), last_.size() * sizeof(float));
  return last_.data();
}

void GptGenerator::compile_decode() {
  const GptConfig& c = m_.cfg;
  const int64_t B = batch_, C = c.width, H = c.heads, D = C / H;
  const size_t L = m_.h.size();
  auto split = [&](const Tensor& t) { return t.reshape({B, 1, H, D}).permute({0, 2, 1, 3}); };
  // The projections of block l's input x: outputs x, q, k, v.
  auto project = [&, split](size_t l, const Tensor& x) {
    std::vector<Tensor> p = m_.h[l]->qkv(x);
    return std::vector<Tensor>{x, split(p[0]), split(p[1]), split(p[2])};
  };
  // Block l's attention over its cache (the new row already written at the position, which the
  // offset input holds) and the rest of the block.
  auto attend = [&](size_t l, const Tensor& x, const Tensor& q) {
    return m_.h[l]->finish(x, gpt_attention_at(q, k_[l], v_[l], offset_));
  };
  decode_.clear();
  decode_.push_back(std::make_unique<CompiledStep>(compile(
      [&, project](const std::vector<Tensor>& a) {
        return project(0, m_.embed(a[0], a[1]));
      },
      {{DType::I64, {B, 1}}, {DType::I64, {B, 1}}})));
  const std::vector<std::pair<DType, Shape>> carried = {{DType::F32, {B, 1, C}}, {DType::F32, {B, H, 1, D}}};
  for (size_t l = 1; l <= L; ++l)
    decode_.push_back(std::make_unique<CompiledStep>(compile(
        [&, l, project, attend](const std::vector<Tensor>& a) {
          Tensor x = attend(l - 1, a[0], a[1]);
          if (l < L) return project(l, x);
          return std::vector<Tensor>{m_.head(x).reshape({B, c.vocab})};
        },
        carried)));
}

const float* GptGenerator::decode(const std::vector<int64_t>& tokens) {
  const GptConfig& c = m_.cfg;
  const int64_t B = batch_, T = c.context, C = c.width, D = C / c.heads;
  if (pos_ < 1) throw Error("generate: decode needs a prefill first");
  if (pos_ >= T) throw Error("generate: the context of " + std::to_string(T) + " tokens is full");
  if (int64_t(tokens.size()) != B)
    throw Error("generate: " + std::to_string(tokens.size()) + " tokens for a batch of " + std::to_string(B));
  for (int64_t tok : tokens)
    if (tok < 0 || tok >= c.vocab)
      throw Error("generate: token " + std::to_string(tok) + " is outside the vocabulary of " + std::to_string(c.vocab));
  if (decode_.empty()) compile_decode();
  auto* tok = reinterpret_cast<int64_t*>(decode_[0]->input_ptr(0));
  auto* posn = reinterpret_cast<int64_t*>(decode_[0]->input_ptr(1));
  for (int64_t b = 0; b < B; ++b) tok[b] = tokens[size_t(b)], posn[b] = pos_;
  *static_cast<int64_t*>(offset_host_.buffer->data()) = pos_;
  offset_host_.buffer->mark_modified();
  // Stage l computes block l's projections (after block l-1's attention and MLP): its new key and
  // value rows go into the caches before the next stage attends over them.
  for (size_t l = 0; l < decode_.size(); ++l) {
    CompiledStep& st = *decode_[l];
    st.run();
    if (l + 1 == decode_.size()) break;
    write_cache_layer(l, st.output_ptr(2), st.output_ptr(3), pos_, 1);
    CompiledStep& next = *decode_[l + 1];
    std::memcpy(next.input_ptr(0), st.output_ptr(0), size_t(B * C) * sizeof(float));
    std::memcpy(next.input_ptr(1), st.output_ptr(1), size_t(B * c.heads * D) * sizeof(float));
  }
  ++pos_;
  return decode_.back()->output_ptr(0);
}

std::vector<std::vector<int64_t>> GptGenerator::generate(
    const std::vector<std::vector<int64_t>>& prompts, int64_t n, const Sampling& sampling,
    const std::function<void(int64_t, const std::vector<int64_t>&)>& on_token) {
  const GptConfig& c = m_.cfg;
  if (n < 0) throw Error("generate: the token count must be >= 0");
  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < batch_; ++b) {
    Sampling s = sampling;
    s.seed += uint64_t(b);
    samplers.emplace_back(s);
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(batch_));
  if (n == 0) return out;
  const float* logits = prefill(prompts);
  std::vector<int64_t> next(static_cast<size_t>(batch_));
  std::vector<std::vector<int64_t>> seq = prompts;  // only kept for context shifts
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < batch_; ++b) {
      next[size_t(b)] = samplers[size_t(b)].pick(logits + b * c.vocab, c.vocab);
      out[size_t(b)].push_back(next[size_t(b)]);
      seq[size_t(b)].push_back(next[size_t(b)]);
    }
    if (on_token) on_token(i, next);
    if (i + 1 == n) break;
    if (pos_ < c.context) {
      logits = decode(next);
      continue;
    }
    // Context shift: the newest half of every row is prefilled again from position 0.
    std::vector<std::vector<int64_t>> tail;
    int64_t keep = std::max<int64_t>(1, c.context / 2);
    for (auto& r : seq) tail.emplace_back(r.end() - keep, r.end());
    logits = prefill(tail);
  }
  return out;
}

}  // namespace synoros::nn
