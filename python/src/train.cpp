// synoros._C.train: the engine's language-model trainer (the `synoros train` and `finetune` loop:
// AdamW, warmup and cosine decay, clipping, accumulation, activation checkpointing, LoRA).
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/lora.hpp"
#include "synoros/train.hpp"

namespace synoros::py {

void bind_train(nb::module_& top) {
  nb::module_ m = top.def_submodule("train", "The engine's trainers");
  using train::LmConfig;
  using train::LmTrainer;
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
      .def("train_steps", [](LmTrainer& t, int64_t n, std::function<void(int64_t, double)> on_step) {
        nb::gil_scoped_release no_gil;  // on_step takes the GIL back when it is called
        return t.train_steps(n, on_step);
      }, nb::arg("n"), nb::arg("on_step") = nb::none(),
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
