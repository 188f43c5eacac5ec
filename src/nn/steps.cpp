// Compiled training and evaluation steps.
#include "synoros/train.hpp"

namespace synoros::train {

std::shared_ptr<nn::Module> make_classifier(const std::string& name, int64_t classes, uint64_t seed) {
  if (name == "mlp") return nn::make_mlp(28 * 28, 256, classes, seed);
  if (name == "lenet") return nn::make_lenet(classes, seed);
  if (name == "resnet-mini") return std::make_shared<nn::ResNetMini>(classes, 16, 1, seed);
  throw Error("unknown model '" + name + "' (known: mlp, lenet, resnet-mini, gpt-tiny)");
}

CompiledStep compile_classifier_train(nn::Module& model, optim::Optimizer& opt, int64_t batch) {
  model.train();
  return compile(
      [&](const std::vector<Tensor>& a) {
        Tensor logits = model(a[0]);
        Tensor loss = cross_entropy(logits, a[1]);
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss, logits};
      },
      {{DType::F32, {batch, 1, 28, 28}}, {DType::I64, {batch}}});
}

CompiledStep compile_classifier_eval(nn::Module& model, int64_t batch) {
  model.eval();
  return compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{model(a[0])}; },
                 {{DType::F32, {batch, 1, 28, 28}}});
}

namespace {
Tensor lm_loss(nn::Gpt& model, const std::vector<Tensor>& a, int64_t batch, int64_t context) {
  int64_t V = model.cfg.vocab;
  return cross_entropy(model(a[0]).reshape({batch * context, V}), a[1].reshape({batch * context}));
}

void check_accumulators(const optim::Optimizer& opt, const std::vector<Tensor>& acc) {
  if (acc.size() != opt.params().size())
    throw Error("gradient accumulation: " + std::to_string(acc.size()) + " accumulators for " +
                std::to_string(opt.params().size()) + " parameters");
}

// accumulated[i] + scale * gradient_i for each optimizer parameter (undefined without a gradient).
std::vector<Tensor> accumulated_gradients(const optim::Optimizer& opt, const std::vector<Tensor>& acc, double scale) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < acc.size(); ++i) {
    Tensor g = opt.params()[i].grad();
    out.push_back(g.defined() ? acc[i] + g * scale : Tensor());
  }
  return out;
}
}  // namespace

CompiledStep compile_lm_train(nn::Gpt& model, optim::Optimizer& opt, int64_t batch, int64_t context,
                              const std::vector<Tensor>& accumulated, double scale) {
  model.train();
  if (!accumulated.empty()) check_accumulators(opt, accumulated);
  return compile(
      [&, batch, context, scale](const std::vector<Tensor>& a) {
        Tensor loss = lm_loss(model, a, batch, context);
        loss.backward();
        if (accumulated.empty()) opt.step();
        else opt.step(accumulated_gradients(opt, accumulated, scale));
        return std::vector<Tensor>{loss};
      },
      {{DType::I64, {batch, context}}, {DType::I64, {batch, context}}});
}

CompiledStep compile_lm_accumulate(nn::Gpt& model, const optim::Optimizer& opt, const std::vector<Tensor>& accumulated,
                                   double scale, int64_t batch, int64_t context) {
  model.train();
  check_accumulators(opt, accumulated);
  return compile(
      [&, batch, context, scale](const std::vector<Tensor>& a) {
        Tensor loss = lm_loss(model, a, batch, context);
        loss.backward();
        std::vector<Tensor> sums = accumulated_gradients(opt, accumulated, scale);
        for (size_t i = 0; i < sums.size(); ++i)
          if (sums[i].defined()) Tensor(accumulated[i]).assign(sums[i]);
        return std::vector<Tensor>{loss};
      },
      {{DType::I64, {batch, context}}, {DType::I64, {batch, context}}});
}

CompiledStep compile_lm_eval(nn::Gpt& model, int64_t batch, int64_t context) {
  model.eval();
  int64_t V = model.cfg.vocab;
  return compile(
      [&, V](const std::vector<Tensor>& a) {
        Tensor logits = model(a[0]);
        return std::vector<Tensor>{logits,
                                   cross_entropy(logits.reshape({batch * context, V}), a[1].reshape({batch * context}))};
      },
      {{DType::I64, {batch, context}}, {DType::I64, {batch, context}}});
}

}  // namespace synoros::train
