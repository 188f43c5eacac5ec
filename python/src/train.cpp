// synoros._C.train: the engine's trainers, the loops of `synoros train` and `finetune`: the image
// classifier's on Fashion-MNIST, and the language model's (AdamW, warmup and cosine decay,
// clipping, accumulation, activation checkpointing, LoRA).
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/lora.hpp"
#include "synoros/train.hpp"

namespace synoros::py {

namespace {
// Up to n steps of a trainer without the GIL; on_step(step, loss), if given, takes it back.
template <class Trainer>
int64_t train_steps(Trainer& t, int64_t n, std::function<void(int64_t, double)> on_step) {
  nb::gil_scoped_release no_gil;
  return t.train_steps(n, on_step);
}
}  // namespace

void bind_train(nb::module_& top) {
  nb::module_ m = top.def_submodule("train", "The engine's trainers");
  using train::ClassifierConfig;
  using train::ClassifierTrainer;
  using train::LmConfig;
  using train::LmTrainer;
  nb::class_<ClassifierTrainer>(m, "ClassifierTrainer",
                                "An image classifier trained on Fashion-MNIST through one compiled step, resumable "
                                "bit for bit: the loop of `synoros train --model mlp|lenet|resnet-mini`.")
      .def("__init__", [](ClassifierTrainer* self, nb::handle model, const std::string& optimizer, int64_t epochs,
                          int64_t batch, double lr, double momentum, double weight_decay, double clip,
                          int64_t warmup_steps, bool cosine, bool augment, uint64_t seed, int64_t train_limit,
                          int64_t test_limit, const std::string& data_dir, int64_t steps) {
        ClassifierConfig c;
        c.optimizer = optimizer, c.epochs = epochs, c.batch = batch, c.lr = lr, c.momentum = momentum;
        c.weight_decay = weight_decay, c.clip = clip, c.warmup_steps = warmup_steps, c.cosine = cosine;
        c.augment = augment, c.seed = seed, c.train_limit = train_limit, c.test_limit = test_limit;
        c.data_dir = data_dir, c.steps = steps;
        if (nb::isinstance<nn::Module>(model)) {
          c.model = "custom";
          auto mod = nb::cast<std::shared_ptr<nn::Module>>(model);
          nb::gil_scoped_release no_gil;
          new (self) ClassifierTrainer(std::move(c), std::move(mod));
          return;
        }
        c.model = nb::cast<std::string>(model);
        nb::gil_scoped_release no_gil;
        new (self) ClassifierTrainer(std::move(c));
      }, nb::arg("model") = "resnet-mini", nb::kw_only(), nb::arg("optimizer") = "sgd", nb::arg("epochs") = 1,
         nb::arg("batch") = 64, nb::arg("lr") = 0.05, nb::arg("momentum") = 0.9, nb::arg("weight_decay") = 5e-4,
         nb::arg("clip") = 0.0, nb::arg("warmup_steps") = 0, nb::arg("cosine") = true, nb::arg("augment") = false,
         nb::arg("seed") = 1, nb::arg("train_limit") = 0, nb::arg("test_limit") = 0, nb::arg("data_dir") = "",
         nb::arg("steps") = 0,
         "model: mlp, lenet, resnet-mini, or one of the engine's modules (a classifier of [N, 1, 28, 28] "
         "images); optimizer: sgd or adamw; steps > 0: the schedule's length in steps (else epochs); "
         "train_limit, test_limit: the first images of each split only (0: all).")
      .def("train_steps", &train_steps<ClassifierTrainer>, nb::arg("n"), nb::arg("on_step") = nb::none(),
         "Runs up to n steps (not past the schedule's end); on_step(step, loss) after each. Returns how many ran.")
      .def("evaluate", &ClassifierTrainer::evaluate, nb::call_guard<nb::gil_scoped_release>(),
           "(loss, accuracy) over the test split, in eval mode.")
      .def_prop_ro("step", &ClassifierTrainer::step)
      .def_prop_ro("steps_per_epoch", &ClassifierTrainer::steps_per_epoch)
      .def_prop_ro("total_steps", &ClassifierTrainer::total_steps)
      .def_prop_ro("mean_loss", &ClassifierTrainer::mean_loss, "The training loss's mean since the last reset.")
      .def_prop_ro("mean_accuracy", &ClassifierTrainer::mean_acc)
      .def("reset_means", &ClassifierTrainer::reset_means)
      .def_prop_ro("model", [](ClassifierTrainer& t) -> nn::Module& { return t.model(); },
                   nb::rv_policy::reference_internal)
      .def("save", &ClassifierTrainer::save, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
      .def("load", &ClassifierTrainer::load, nb::arg("path"), nb::arg("resume") = true,
           nb::call_guard<nb::gil_scoped_release>(),
           "Resumes from a checkpoint of the same configuration (refused naming the field otherwise).")
      .def("run_metadata", &ClassifierTrainer::run_metadata);

  nb::class_<LmTrainer>(m, "LmTrainer",
                        "A GPT trained on bytes (the fortunes, or any text file) with AdamW, warmup and cosine "
                        "decay, gradient clipping and accumulation: the loop of `synoros train` and `finetune`.")
      .def("__init__", [](LmTrainer* self, nb::handle model, int64_t batch, int64_t steps, int64_t warmup_steps,
                          double lr, double weight_decay, double clip, uint64_t seed, const std::string& data_dir,
                          const std::string& text_file, const std::string& base,
                          std::optional<nn::LoraConfig> lora, int64_t sequence, int64_t accum,
                          bool checkpoint_activations) {
        LmConfig c;
        if (nb::isinstance<nn::GptConfig>(model)) {
          c.name = "custom";
          c.model = nb::cast<nn::GptConfig>(model);
        } else {
          c.name = nb::cast<std::string>(model);
          c.model = nn::GptConfig::preset(c.name);
        }
        c.model.check();
        c.batch = batch, c.steps = steps, c.warmup_steps = warmup_steps;
        c.lr = lr, c.weight_decay = weight_decay, c.clip = clip, c.seed = seed;
        c.data_dir = data_dir, c.text_file = text_file, c.base = base, c.lora = std::move(lora);
        c.sequence = sequence, c.accum = accum, c.checkpoint_activations = checkpoint_activations;
        nb::gil_scoped_release no_gil;
        new (self) LmTrainer(std::move(c));
      }, nb::arg("model") = "gpt-tiny", nb::kw_only(), nb::arg("batch") = 16, nb::arg("steps") = 1000,
         nb::arg("warmup_steps") = 50, nb::arg("lr") = 3e-3, nb::arg("weight_decay") = 0.01, nb::arg("clip") = 1.0,
         nb::arg("seed") = 1, nb::arg("data_dir") = "", nb::arg("text_file") = "", nb::arg("base") = "",
         nb::arg("lora") = nb::none(), nb::arg("sequence") = 0, nb::arg("accum") = 1,
         nb::arg("checkpoint_activations") = false,
         "model: a preset name (gpt-tiny, gpt2-11m, ...) or a GPTConfig; steps: the schedule's length (warmup, "
         "then cosine decay to its end); text_file: train on this file's bytes instead of the fortunes; base: "
         "a model file to fine-tune (with lora: only the adapters train).")
      .def("train_steps", &train_steps<LmTrainer>, nb::arg("n"), nb::arg("on_step") = nb::none(),
         "Runs up to n optimizer steps (not past the schedule's end); on_step(step, loss) after each. Returns "
         "how many ran.")
      .def("validation_loss", &LmTrainer::validation_loss, nb::arg("max_batches") = 8,
           nb::call_guard<nb::gil_scoped_release>(),
           "Mean loss (nats per byte) over up to max_batches sequential validation windows.")
      .def_prop_ro("unigram_baseline", &LmTrainer::unigram_baseline,
                   "The training bytes' unigram entropy: the loss of the best context-free model.")
      .def("generate", [](LmTrainer& t, nb::bytes prompt, int64_t n, double temperature, uint64_t seed) {
        std::string p(prompt.c_str(), prompt.size()), out;
        {
          nb::gil_scoped_release no_gil;
          out = t.generate(p, n, temperature, seed);
        }
        return nb::bytes(out.data(), out.size());
      }, nb::arg("prompt"), nb::arg("n"), nb::arg("temperature") = 0.8, nb::arg("seed") = 1,
         "n bytes sampled after the prompt's last context bytes (bytes: a byte-level model's output need not "
         "be UTF-8).")
      .def_prop_ro("step", &LmTrainer::step)
      .def_prop_ro("model", [](LmTrainer& t) -> nn::Gpt& { return t.model(); }, nb::rv_policy::reference_internal)
      .def_prop_ro("lora", [](LmTrainer& t) { return t.lora(); }, nb::rv_policy::reference_internal,
                   "The adapters when fine-tuning with LoRA, else None.")
      .def_prop_ro("lr", [](LmTrainer& t) { return t.optimizer().lr(); }, "The learning rate of the last step.")
      .def("save", &LmTrainer::save, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
           "The model (or the adapters) with the optimizer's state, for resuming.")
      .def("load", &LmTrainer::load, nb::arg("path"), nb::arg("resume") = true,
           nb::call_guard<nb::gil_scoped_release>(),
           "Resumes from a checkpoint of the same configuration (refused naming the field otherwise); with "
           "resume=False only the model's shape must agree.")
      .def("run_metadata", &LmTrainer::run_metadata);
}

}  // namespace synoros::py
