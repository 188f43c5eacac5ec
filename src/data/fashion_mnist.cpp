// Fashion-MNIST from the gzip'd IDX files (Debian's dataset-fashion-mnist layout).
#include <cstdlib>
#include <string>

#include "synoros/config.hpp"
#include "synoros/data.hpp"

namespace synoros::data {

std::string default_fashion_mnist_dir() {
  if (std::string env = config::text("SYNOROS_DATA_DIR"); !env.empty()) return env;
  return "/usr/share/datasets/fashion-mnist";
}

ImageDataset load_fashion_mnist(const std::string& dir_arg, Split split, std::optional<int64_t> limit) {
  const std::string dir = dir_arg.empty() ? default_fashion_mnist_dir() : dir_arg;
  const std::string prefix = dir + "/" + (split == Split::Train ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  constexpr int64_t kSide = 28, kClasses = 10;

  IdxArray images = read_idx_gz(images_path, 2051, limit);
  IdxArray labels = read_idx_gz(labels_path, 2049, limit);
  if (images.dims.size() != 3 || images.dims[1] != kSide || images.dims[2] != kSide)
    throw Error("Fashion-MNIST file " + images_path + ": images are " + std::to_string(images.dims[1]) +
                "x" + std::to_string(images.dims[2]) + ", expected 28x28");
  if (images.dims[0] != labels.dims[0])
    throw Error("Fashion-MNIST: " + images_path + " holds " + std::to_string(images.dims[0]) +
                " images but " + labels_path + " holds " + std::to_string(labels.dims[0]) + " labels");

  ImageDataset ds;
  ds.n = images.items;
  ds.channels = 1;
  ds.height = kSide;
  ds.width = kSide;
  ds.num_classes = kClasses;
  ds.pixels = std::move(images.data);
  ds.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    const uint8_t l = labels.data[i];
    if (l >= kClasses)
      throw Error("Fashion-MNIST file " + labels_path + ": label " + std::to_string(l) + " of sample " +
                  std::to_string(i) + " is outside [0, 10)");
    ds.labels[i] = l;
  }
  return ds;
}

}  // namespace synoros::data
