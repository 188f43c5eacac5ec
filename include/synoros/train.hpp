// Training loops over compiled steps: image classifiers (MLP, LeNet, ResNetMini) and the byte
// language model, with the step (forward, backward, optimizer update) captured once.
#pragma once

#include <string>

#include "synoros/nn.hpp"
#include "synoros/optim.hpp"

namespace synoros::train {

// "mlp", "lenet", "resnet-mini": classifiers of [N, 1, 28, 28] images into `classes`.
std::shared_ptr<nn::Module> make_classifier(const std::string& name, int64_t classes, uint64_t seed);

// One training step over (images [B, 1, 28, 28] f32, labels [B] i64): returns {loss, logits};
// the module is put in training mode.
CompiledStep compile_classifier_train(nn::Module& model, optim::Optimizer& opt, int64_t batch);
// Inference over images [B, 1, 28, 28]: returns {logits}; the module is put in eval mode.
CompiledStep compile_classifier_eval(nn::Module& model, int64_t batch);

// Language-model step over (tokens [B, T] i64, targets [B, T] i64): returns {loss}.
CompiledStep compile_lm_train(nn::GptTiny& model, optim::Optimizer& opt, int64_t batch, int64_t context);
CompiledStep compile_lm_eval(nn::GptTiny& model, int64_t batch, int64_t context);

}  // namespace synoros::train
