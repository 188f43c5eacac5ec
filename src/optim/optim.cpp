// Optimizer updates as tape nodes. Per-step scalars live in stateful scalar leaves, so one
// compiled step serves every step of a schedule.
#include "synoros/optim.hpp"

#include <cmath>

#include "api/tensor_impl.hpp"
#include "core/thread_scratch.hpp"
#include "kernels/kernel_api.hpp"

namespace synoros::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_value_(lr) {
  for (const Tensor& p : params_)
    if (!p.defined() || !p.requires_grad_enabled()) throw Error("optimizer: every parameter must require a gradient");
  lr_ = scalar_leaf(lr);
}

Tensor Optimizer::scalar_leaf(double v) {
  HostTensor h(DType::F32, {});
  h.set(0, v);
  Tensor t = Tensor::from(h);
  t.stateful();
  return t;
}

void Optimizer::write_scalar(const Tensor& t, double v) {
  HostTensor& h = *t.impl()->value;
  h.set(0, v);
  h.buffer->mark_modified();
}

void Optimizer::set_lr(double lr) {
  lr_value_ = lr;
  write_scalar(lr_, lr);
}

void Optimizer::tick() { ++t_; }

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void Optimizer::step() {
  std::vector<Tensor> grads;
  grads.reserve(params_.size());
  for (const Tensor& p : params_) grads.push_back(p.grad());
  step(std::move(grads));
}

void Optimizer::step(std::vector<Tensor> all) {
  if (all.size() != params_.size())
    throw Error("optimizer: " + std::to_string(all.size()) + " gradients for " + std::to_string(params_.size()) +
                " parameters");
  for (size_t i = 0; i < params_.size(); ++i)
    if (all[i].defined() && all[i].shape() != params_[i].shape())
      throw Error("optimizer: gradient " + std::to_string(i) + " is " + shape_str(all[i].shape()) + ", its parameter " +
                  shape_str(params_[i].shape()));
  const bool eager = !trace_state().active;
  if (eager) tick();
  if (eager && trace_state().batches == 0 && replay_update(all)) return;
  std::vector<size_t> idx;
  std::vector<Tensor> grads;
  idx.reserve(all.size()), grads.reserve(all.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (all[i].defined()) idx.push_back(i), grads.push_back(all[i]);
  AssignBatch batch;  // eager: every update in one plan run
  if (clip_ > 0 && !grads.empty()) {
    // torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (norm + 1e-6)).
    Tensor sq;
    for (const Tensor& g : grads) {
      Tensor s = (g * g).sum();
      sq = sq.defined() ? sq + s : s;
    }
    Tensor scale = Tensor::apply(Op::Min, {(sq.sqrt() + 1e-6).pow(-1.0) * clip_, Tensor::scalar(1.0)});
    for (Tensor& g : grads) g = g * scale;
  }
  for (size_t j = 0; j < idx.size(); ++j) update(idx[j], params_[idx[j]], grads[j]);
  batch.close();
}

// An eager loop calls step() with the same kind of gradients every iteration. The first such
// call compiles the update, as compile() would trace it, into one plan that takes the gradients
// as arguments and reads the parameters, the optimizer's state and its per-step scalars in place;
// later calls feed it the gradients and copy its results into the parameters and the state.
// That is the batched eager update's graph, with the same kernels, so the same bits (tested),
// without recording, lowering and looking a plan up per call. Gradients that are not plain
// values, and optimizers whose update() does not declare itself replayable, take the recording
// path; another kind of gradients (which are given, their dtypes), a changed clipping norm or
// kernel configuration compile afresh.
struct Optimizer::EagerUpdate {
  std::vector<int> dtypes;  // per parameter: its gradient's dtype, -1 where it has none
  double clip = 0;
  std::string config;
  CompiledStep step;
};

bool Optimizer::replay_update(const std::vector<Tensor>& all) {
  // The gradients' kinds and values, in storage a thread reuses every step (the values' shapes
  // are assigned into the last step's; their buffers are let go on the way out).
  struct Scratch {
    std::vector<int> dtypes;
    std::vector<HostTensor> args;
  };
  Scratch& scratch = thread_scratch<Scratch>();
  std::vector<int>& dtypes = scratch.dtypes;
  std::vector<HostTensor>& args = scratch.args;
  struct Release {
    std::vector<HostTensor>& args;
    ~Release() {
      for (HostTensor& a : args) a.buffer.reset();
    }
  } release{args};
  dtypes.clear();
  size_t n = 0;
  for (const Tensor& g : all) {
    if (!g.defined()) {
      dtypes.push_back(-1);
      continue;
    }
    // What the recording path would feed as a plain input; anything else (a lazy gradient, one
    // read with its graph kept, a constant, a parameter or state) is recorded with the update.
    const TensorImpl& t = *g.impl();
    if (!t.value || !t.in.empty() || t.is_const || t.requires_grad || t.stateful) return false;
    dtypes.push_back(int(t.dtype));
    if (args.size() == n) args.emplace_back();
    args[n++] = *t.value;
  }
  args.resize(n);
  if (args.empty() || !replayable()) return false;
  std::string config = kernels::kernel_config();
  const bool replay = eager_ && eager_->dtypes == dtypes && eager_->clip == clip_ && eager_->config == config;
  if (!replay) {
    auto e = std::make_shared<EagerUpdate>();
    e->dtypes = dtypes;
    e->clip = clip_;
    e->config = std::move(config);
    std::vector<std::pair<DType, Shape>> specs;
    for (const HostTensor& a : args) specs.push_back({a.dtype, a.shape});
    e->step = compile(
        [&](const std::vector<Tensor>& a) {
          std::vector<Tensor> g(all.size());
          for (size_t i = 0, j = 0; i < all.size(); ++i)
            if (all[i].defined()) g[i] = a[j++];
          step(std::move(g));  // traced: records the updates, ticks nothing
          return std::vector<Tensor>{};
        },
        specs);
    eager_ = std::move(e);
  }
  eager_->step(args);
  if (replay) ++replayed_;
  return true;
}

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double wd, bool nesterov, double dampening)
    : Optimizer(std::move(params), lr), momentum_(momentum), wd_(wd), dampening_(dampening), nesterov_(nesterov) {
  if (lr < 0 || momentum < 0 || wd < 0) throw Error("SGD: lr, momentum and weight decay must be >= 0");
  if (nesterov && (momentum <= 0 || dampening != 0)) throw Error("SGD: Nesterov needs momentum > 0 and no dampening");
  if (momentum_ > 0)
    for (const Tensor& p : params_) buf_.push_back(Tensor::zeros(p.shape()).stateful());
}

void SGD::update(size_t i, Tensor p, const Tensor& g0) {
  Tensor g = wd_ > 0 ? g0 + p * wd_ : g0;
  if (momentum_ > 0) {
    // b = m b + (1 - d) g from a zero buffer: without dampening the first step gives exactly g,
    // as torch's first step does.
    Tensor b = buf_[i] * momentum_ + (dampening_ == 0 ? g : g * (1 - dampening_));
    buf_[i].assign(b);
    g = nesterov_ ? g + b * momentum_ : b;
  }
  p.assign(p - g * lr_);
}

std::vector<std::pair<std::string, Tensor>> SGD::state() const {
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < buf_.size(); ++i) s.emplace_back(std::to_string(i) + ".momentum_buffer", buf_[i]);
  return s;
}

AdamW::AdamW(std::vector<Tensor> params, double lr, double b1, double b2, double eps, double wd)
    : Optimizer(std::move(params), lr), b1_(b1), b2_(b2), eps_(eps), wd_(wd) {
  if (lr < 0 || b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1 || eps <= 0 || wd < 0)
    throw Error("AdamW: needs lr >= 0, 0 <= betas < 1, eps > 0, weight decay >= 0");
  step_size_ = scalar_leaf(0), inv_bc2_ = scalar_leaf(1), decay_ = scalar_leaf(1);
  for (const Tensor& p : params_) {
    m_.push_back(Tensor::zeros(p.shape()).stateful());
    v_.push_back(Tensor::zeros(p.shape()).stateful());
  }
}

void AdamW::tick() {
  Optimizer::tick();
  double t = double(t_);
  write_scalar(step_size_, lr_value_ / (1 - std::pow(b1_, t)));
  write_scalar(inv_bc2_, 1 / (1 - std::pow(b2_, t)));
  write_scalar(decay_, 1 - lr_value_ * wd_);
}

void AdamW::update(size_t i, Tensor p, const Tensor& g) {
  Tensor m = m_[i] * b1_ + g * (1 - b1_);
  Tensor v = v_[i] * b2_ + g * g * (1 - b2_);
  m_[i].assign(m);
  v_[i].assign(v);
  Tensor denom = (v * inv_bc2_).sqrt() + eps_;
  p.assign(p * decay_ - m / denom * step_size_);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, Tensor>> s;
  for (size_t i = 0; i < m_.size(); ++i) {
    s.emplace_back(std::to_string(i) + ".exp_avg", m_[i]);
    s.emplace_back(std::to_string(i) + ".exp_avg_sq", v_[i]);
  }
  return s;
}

double warmup_cosine(double base, int64_t step, int64_t warmup, int64_t total, double min_ratio) {
  if (warmup > 0 && step < warmup) return base * double(step + 1) / double(warmup);
  if (total <= warmup) return base;
  double progress = std::min(1.0, double(step - warmup) / double(std::max<int64_t>(1, total - warmup)));
  return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

}  // namespace synoros::optim
