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

Tensor lm_loss(nn::Gpt& model, const Tensor& tokens, const Tensor& targets) {
  int64_t V = model.cfg.vocab, rows = numel(tokens.shape());
  return cross_entropy(model(tokens).reshape({rows, V}), targets.reshape({rows}));
}

CompiledStep compile_lm_train(nn::Gpt& model, optim::Optimizer& opt, int64_t batch, int64_t context) {
  model.train();
  return compile(
      [&](const std::vector<Tensor>& a) {
        Tensor loss = lm_loss(model, a[0], a[1]);
        loss.backward();
        opt.step();
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
