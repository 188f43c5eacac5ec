// The GPT family: configuration, model, and generation with the KV-cached decoder.
#include <cstring>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/gpt.hpp"
#include "synoros/lora.hpp"

namespace synoros::py {

namespace {
// A copy of a generator's logits ([batch, vocab]) as a NumPy array: the generator reuses its buffer.
nb::object logits_array(const nn::GptGenerator& g, const float* logits) {
  HostTensor h(DType::F32, {g.batch(), g.vocab()});
  std::memcpy(h.buffer->data(), logits, h.bytes());
  return array_from_host(h);
}
}  // namespace

void bind_gpt(nb::module_& top) {
  nb::module_ m = top.def_submodule("models", "Models of the engine");
  nb::class_<nn::GptConfig>(m, "GPTConfig")
      .def("__init__", [](nn::GptConfig* self, int64_t vocab, int64_t context, int64_t width, int64_t heads,
                          int64_t layers) {
        new (self) nn::GptConfig{vocab, context, width, heads, layers};
        self->check();
      }, nb::arg("vocab_size") = 256, nb::arg("block_size") = 64, nb::arg("n_embd") = 128, nb::arg("n_head") = 4,
         nb::arg("n_layer") = 2)
      .def_static("preset", &nn::GptConfig::preset, nb::arg("name"), "A named configuration (gpt2-11m, gpt2-98m, ...).")
      .def_static("preset_names", &nn::GptConfig::preset_names)
      .def_rw("vocab_size", &nn::GptConfig::vocab)
      .def_rw("block_size", &nn::GptConfig::context)
      .def_rw("n_embd", &nn::GptConfig::width)
      .def_rw("n_head", &nn::GptConfig::heads)
      .def_rw("n_layer", &nn::GptConfig::layers)
      .def("parameter_count", &nn::GptConfig::parameter_count)
      .def("__repr__", &nn::GptConfig::str);

  nb::class_<nn::Gpt, nn::Module>(m, "GPT", nb::dynamic_attr(), "A GPT-2-style decoder (PyTorch GPT-2's layout and names).")
      .def("__init__", [](nn::Gpt* self, const nn::GptConfig& c, std::optional<uint64_t> seed) {
        new (self) nn::Gpt(c, seed_arg(seed));
      }, nb::arg("config"), nb::kw_only(), nb::arg("seed") = nb::none())
      .def_ro("config", &nn::Gpt::cfg)
      .def_rw("checkpoint_blocks", &nn::Gpt::checkpoint_blocks,
              "Recompute each block's activations in the backward pass (less memory, the same bits).")
      .def("loss", &nn::Gpt::loss, nb::arg("tokens"), nb::arg("targets"),
           "Mean cross-entropy of the next-token predictions.")
      .def("save", &nn::Gpt::save, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
      // A generator without a reference back to the model, for the model's own cache (its __dict__,
      // cleared before the model is destroyed): no reference cycle to leak.
      .def("_generator", [](nn::Gpt& g, int64_t batch) { return new nn::GptGenerator(g, batch); }, nb::arg("batch"),
           nb::rv_policy::take_ownership)
      .def_static("load", &nn::Gpt::load, nb::arg("path"), nb::arg("n_head") = 0,
                  nb::call_guard<nb::gil_scoped_release>());

  nb::class_<nn::LoraConfig>(m, "LoraConfig", "A LoRA adapter's rank, alpha and target modules (PEFT's names).")
      .def("__init__", [](nn::LoraConfig* self, int64_t r, double alpha, std::vector<std::string> targets) {
        nn::LoraConfig c{r, alpha, std::move(targets)};
        c.check();  // before the object exists: a refused one leaks nothing
        new (self) nn::LoraConfig(std::move(c));
      }, nb::arg("r") = 8, nb::arg("lora_alpha") = 16.0,
         nb::arg("target_modules") = std::vector<std::string>{"c_attn", "c_proj", "c_fc"})
      .def_ro("r", &nn::LoraConfig::rank)
      .def_ro("lora_alpha", &nn::LoraConfig::alpha)
      .def_ro("target_modules", &nn::LoraConfig::targets)
      .def_prop_ro("scaling", &nn::LoraConfig::scaling)
      .def("__repr__", [](const nn::LoraConfig& c) {
        return "LoraConfig(r=" + std::to_string(c.rank) + ", lora_alpha=" + std::to_string(c.alpha) +
               ", target_modules='" + c.targets_str() + "')";
      });

  nb::class_<nn::GptLora, nn::Module>(m, "LoRA",
                                      "Rank-r adapters on a GPT's projections (PEFT's names and scaling): the "
                                      "model's parameters are frozen, the adapters are this module's parameters, "
                                      "and calling it (or the model) runs the adapted model.")
      .def("__init__", [](nn::GptLora* self, nn::Gpt& model, const nn::LoraConfig& c, std::optional<uint64_t> seed) {
        new (self) nn::GptLora(model, c, seed_arg(seed));
      }, nb::arg("model"), nb::arg("config") = nn::LoraConfig{}, nb::kw_only(), nb::arg("seed") = nb::none(),
         nb::keep_alive<1, 2>())
      .def_prop_ro("config", &nn::GptLora::config)
      .def_prop_ro("merged", &nn::GptLora::merged)
      .def("merge", &nn::GptLora::merge, "Folds the adapters into the base weights.")
      .def("unmerge", &nn::GptLora::unmerge, "Restores the base weights, bit for bit.")
      .def("save", &nn::GptLora::save, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
           "The adapters as safetensors with PEFT's names (rank, alpha and targets in the metadata).")
      .def("save_pretrained", &nn::GptLora::save_pretrained, nb::arg("directory"),
           nb::arg("base_model_name_or_path") = "", nb::call_guard<nb::gil_scoped_release>(),
           "PEFT's directory: adapter_model.safetensors and adapter_config.json.")
      .def("load", &nn::GptLora::load, nb::arg("path"), nb::call_guard<nb::gil_scoped_release>(),
           "Reads adapters written by save(), save_pretrained() or PEFT; nothing changes unless all fit.")
      .def_static("read_config", &nn::GptLora::read_config, nb::arg("path"),
                  "The configuration of saved adapters (the file's metadata or adapter_config.json).");

  nb::class_<nn::GptGenerator>(m, "GPTGenerator", "Prefill and KV-cached decoding for a fixed batch.")
      .def(nb::init<nn::Gpt&, int64_t>(), nb::arg("model"), nb::arg("batch") = 1, nb::keep_alive<1, 2>())
      .def_prop_ro("batch", &nn::GptGenerator::batch)
      .def_prop_ro("position", &nn::GptGenerator::position)
      .def("reset", &nn::GptGenerator::reset, "Empties the cache.")
      .def("prefill", [](nn::GptGenerator& g, const std::vector<std::vector<int64_t>>& prompts) {
        const float* logits;
        {
          nb::gil_scoped_release no_gil;
          logits = g.prefill(prompts);
        }
        return logits_array(g, logits);
      }, nb::arg("prompts"),
         "Runs the prompts (one per row, all of one length) from position 0; returns the logits of their last "
         "position, [batch, vocab_size].")
      .def("decode", [](nn::GptGenerator& g, const std::vector<int64_t>& tokens) {
        const float* logits;
        {
          nb::gil_scoped_release no_gil;
          logits = g.decode(tokens);
        }
        return logits_array(g, logits);
      }, nb::arg("tokens"),
         "Feeds one token per row at the current position; returns the next logits, [batch, vocab_size].")
      .def("rewind", &nn::GptGenerator::rewind, nb::arg("position"),
           "Drops the cached positions from `position` on: the next decode writes at `position` and returns the "
           "logits of a full forward over the first `position` tokens followed by the new one (draft tokens taken "
           "back, a branch of a search). A generator serves one thread at a time.")
      .def("generate", [](nn::GptGenerator& g, const std::vector<std::vector<int64_t>>& prompts, int64_t n,
                          double temperature, int64_t top_k, double top_p, uint64_t seed) {
        nn::Sampling s;
        s.temperature = temperature;
        s.top_k = top_k;
        s.top_p = top_p;
        s.seed = seed;
        nb::gil_scoped_release no_gil;
        return g.generate(prompts, n, s);
      }, nb::arg("prompts"), nb::arg("max_new_tokens"), nb::arg("temperature") = 1.0, nb::arg("top_k") = 0,
         nb::arg("top_p") = 1.0, nb::arg("seed") = 1,
         "New tokens for each prompt (temperature 0: greedy). The same seed gives the same tokens everywhere.");
}

}  // namespace synoros::py
