// Optimizers whose updates are tape nodes: inside compile() the whole update is planned and
// fused with the step. Hyper-parameters that change between steps (the learning rate, Adam's
// bias corrections) are scalar leaves the plan reads, rewritten by tick() before each step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "synoros/tensor.hpp"

namespace synoros::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  // Records the update of every parameter with a gradient (eagerly, or into a compiled step).
  void step();
  // The same with the given gradients (one per parameter, in order; undefined: no update), e.g.
  // gradients accumulated over micro-batches. Clipping applies to them.
  void step(std::vector<Tensor> grads);
  // Clears every parameter's accumulated gradient (torch's optimizer.zero_grad()).
  void zero_grad();
  // Advances the step counter and rewrites the per-step scalars; call once before each run of
  // a compiled step (eager step() calls it itself).
  virtual void tick();
  void set_lr(double lr);
  double lr() const { return lr_value_; }
  int64_t steps() const { return t_; }
  // Restores the step counter of a resumed run (the next tick() continues from it).
  void restore_steps(int64_t t) { t_ = t; }
  // Clip the global gradient norm to `max_norm` (0: off), as torch.nn.utils.clip_grad_norm_.
  void set_clip_norm(double max_norm) { clip_ = max_norm; }
  // Optimizer state in PyTorch's naming ("<index>.momentum_buffer", "<index>.exp_avg", ...).
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  const std::vector<Tensor>& params() const { return params_; }
  // How many eager step() calls ran the update compiled on an earlier call (an eager loop's
  // steps after its first). The first call, and one whose gradients differ in kind, compile it;
  // lazy gradients and optimizers that are not replayable record the update instead.
  int64_t replayed_steps() const { return replayed_; }

 protected:
  virtual void update(size_t i, Tensor p, const Tensor& g) = 0;
  // Whether update() records the same graph on every step, reading nothing but its parameters,
  // gradients and the tensors it holds (state, and per-step scalars rewritten by tick()): then an
  // eager loop's update is compiled once and replayed. Off unless an optimizer says so.
  virtual bool replayable() const { return false; }
  static Tensor scalar_leaf(double v);
  static void write_scalar(const Tensor& t, double v);
  std::vector<Tensor> params_;
  Tensor lr_;
  double lr_value_;
  double clip_ = 0;
  int64_t t_ = 0;

 private:
  // An eager loop's update, compiled on its first step and replayed on the next (optim.cpp).
  struct EagerUpdate;
  std::shared_ptr<EagerUpdate> eager_;
  int64_t replayed_ = 0;
  bool replay_update(const std::vector<Tensor>& grads);
};

// SGD with momentum, dampening, Nesterov and (coupled) weight decay: torch.optim.SGD.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double weight_decay = 0, bool nesterov = false,
      double dampening = 0);
  std::vector<std::pair<std::string, Tensor>> state() const override;

 private:
  void update(size_t i, Tensor p, const Tensor& g) override;
  bool replayable() const override { return true; }
  double momentum_, wd_, dampening_;
  bool nesterov_;
  std::vector<Tensor> buf_;
};

// AdamW (decoupled weight decay): torch.optim.AdamW.
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, double lr, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
        double weight_decay = 0.01);
  void tick() override;
  std::vector<std::pair<std::string, Tensor>> state() const override;

 private:
  void update(size_t i, Tensor p, const Tensor& g) override;
  bool replayable() const override { return true; }
  double b1_, b2_, eps_, wd_;
  Tensor step_size_, inv_bc2_, decay_;  // lr / (1 - b1^t), 1 / (1 - b2^t), 1 - lr * wd
  std::vector<Tensor> m_, v_;
};

// Learning rate at `step` (0-based) of `total`: linear warmup then cosine decay to min_ratio*base.
double warmup_cosine(double base, int64_t step, int64_t warmup, int64_t total, double min_ratio = 0.0);

}  // namespace synoros::optim
