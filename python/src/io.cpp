// Checkpoints (safetensors) and the Fashion-MNIST data set.
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
}

}  // namespace synoros::py
