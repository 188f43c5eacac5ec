// Checkpoints (safetensors), the Fashion-MNIST data set, and text corpora with their windows.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "synoros/checkpoint.hpp"
#include "synoros/data.hpp"

namespace synoros::py {

void bind_io(nb::module_& m) {
  m.def("save_safetensors", [](const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                               const io::Metadata& metadata) {
    nb::gil_scoped_release no_gil;
    io::save_safetensors(path, tensors, metadata);
  }, nb::arg("tensors"), nb::arg("path"), nb::arg("metadata") = io::Metadata{},
     "Writes named tensors to a safetensors file (atomically: an existing file is replaced only when complete).");
  m.def("load_safetensors", [](const std::string& path) {
    io::Checkpoint c;
    {
      nb::gil_scoped_release no_gil;
      c = io::load_safetensors(path);
    }
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [name, h] : c.tensors) tensors.push_back({name, Tensor::from(h)});
    return std::make_pair(tensors, c.metadata);
  }, nb::arg("path"), "Named tensors and metadata of a safetensors file.");

  m.def("load_fashion_mnist", [](const std::string& dir, bool train, std::optional<int64_t> limit) {
    data::ImageDataset ds;
    {
      nb::gil_scoped_release no_gil;
      ds = data::load_fashion_mnist(dir, train ? data::Split::Train : data::Split::Test, limit);
    }
    HostTensor images(DType::F32, {ds.n, ds.channels, ds.height, ds.width});
    HostTensor labels(DType::I64, {ds.n});
    float* px = images.data<float>();
    for (size_t i = 0; i < ds.pixels.size(); ++i) px[i] = float(ds.pixels[i]) / 255.0f;
    for (int64_t i = 0; i < ds.n; ++i) labels.data<int64_t>()[i] = ds.labels[size_t(i)];
    return std::make_pair(array_from_host(images), array_from_host(labels));
  }, nb::arg("root") = "", nb::arg("train") = true, nb::arg("limit") = nb::none(),
     "Fashion-MNIST as (images [N, 1, 28, 28] float32 in [0, 1], labels [N] int64); root '' finds the Debian "
     "package's copy.");

  auto corpus = [](const data::TextCorpus& c) {
    nb::dict d;
    d["files"] = c.files;
    d["fortunes"] = c.fortunes;
    d["train"] = nb::bytes(reinterpret_cast<const char*>(c.train.data()), c.train.size());
    d["val"] = nb::bytes(reinterpret_cast<const char*>(c.val.data()), c.val.size());
    return d;
  };
  m.def("load_fortunes", [corpus](const std::string& dir, double val_fraction) {
    data::TextCorpus c;
    {
      nb::gil_scoped_release no_gil;
      c = data::load_fortunes(dir, val_fraction);
    }
    return corpus(c);
  }, nb::arg("dir") = "", nb::arg("val_fraction") = 0.1);
  m.def("load_text_file", [corpus](const std::string& path, double val_fraction) {
    data::TextCorpus c;
    {
      nb::gil_scoped_release no_gil;
      c = data::load_text_file(path, val_fraction);
    }
    return corpus(c);
  }, nb::arg("path"), nb::arg("val_fraction") = 0.1);

  nb::class_<data::TextWindows>(m, "TextWindows",
                                "Windows of `context` byte tokens over a text: inputs [B, T] and the targets "
                                "shifted by one, as the engine's language-model trainer draws them.")
      .def("__init__", [](data::TextWindows* self, nb::bytes tokens, int64_t context, uint64_t seed) {
        auto t = std::make_shared<std::vector<uint8_t>>(reinterpret_cast<const uint8_t*>(tokens.c_str()),
                                                        reinterpret_cast<const uint8_t*>(tokens.c_str()) + tokens.size());
        new (self) data::TextWindows(std::move(t), context, seed);
      }, nb::arg("tokens"), nb::arg("context"), nb::arg("seed") = 0)
      .def_prop_ro("context", &data::TextWindows::context)
      .def("window_start", &data::TextWindows::window_start, nb::arg("step"), nb::arg("row"))
      .def("random_batch", [](const data::TextWindows& w, uint64_t step, int64_t batch) {
        HostTensor x, y;  // shaped by the fill, after its checks
        w.fill_random(step, batch, x, y);
        return std::make_pair(Tensor::from(std::move(x)), Tensor::from(std::move(y)));
      }, nb::arg("step"), nb::arg("batch"),
         "Batch `step`'s random windows (int64 inputs and targets [batch, context]); a row's window depends on "
         "the seed, the step and the row only.")
      .def_prop_ro("sequential_windows", &data::TextWindows::sequential_windows)
      .def("sequential_batch", [](const data::TextWindows& w, int64_t b, int64_t batch) {
        HostTensor x, y;
        w.fill_sequential(b, batch, x, y);
        return std::make_pair(Tensor::from(std::move(x)), Tensor::from(std::move(y)));
      }, nb::arg("index"), nb::arg("batch"),
         "Batch `index` of consecutive non-overlapping windows, for evaluation (the last may have fewer rows).");
}

}  // namespace synoros::py
