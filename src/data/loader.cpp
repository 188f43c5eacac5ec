// Image batches: seeded per-epoch shuffling, normalisation, random crop and horizontal flip.
// Every random choice is keyed on (seed, epoch, dataset index), never on position or thread.
#include <algorithm>
#include <numeric>
#include <string>

#include "data/rng.hpp"
#include "synoros/data.hpp"
#include "synoros/runtime.hpp"

namespace synoros::data {

Loader::Loader(std::shared_ptr<const ImageDataset> dataset, LoaderOptions options)
    : ds_(std::move(dataset)), opt_(options) {
  if (!ds_) throw Error("Loader: null dataset");
  if (opt_.batch_size < 1) throw Error("Loader: batch_size must be >= 1, got " + std::to_string(opt_.batch_size));
  if (!(opt_.std > 0)) throw Error("Loader: std must be > 0, got " + std::to_string(opt_.std));
  if (opt_.crop_pad < 0 || opt_.crop_pad > 64)
    throw Error("Loader: crop_pad must be in [0, 64], got " + std::to_string(opt_.crop_pad));
  const ImageDataset& d = *ds_;
  if (d.n < 0 || d.channels < 1 || d.height < 1 || d.width < 1)
    throw Error("Loader: dataset has invalid dimensions");
  if (int64_t(d.pixels.size()) != d.n * d.image_size() || int64_t(d.labels.size()) != d.n)
    throw Error("Loader: dataset holds " + std::to_string(d.pixels.size()) + " pixels and " +
                std::to_string(d.labels.size()) + " labels for " + std::to_string(d.n) + " images of " +
                std::to_string(d.image_size()) + " pixels");
}

int64_t Loader::batches_per_epoch() const {
  const int64_t n = ds_->n, b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t Loader::batch_rows(int64_t b) const {
  if (b < 0 || b >= batches_per_epoch())
    throw Error("Loader: batch " + std::to_string(b) + " out of range [0, " +
                std::to_string(batches_per_epoch()) + ")");
  return std::min(opt_.batch_size, ds_->n - b * opt_.batch_size);
}

std::vector<int64_t> Loader::order(uint64_t epoch) const {
  std::vector<int64_t> idx(size_t(ds_->n));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  if (!opt_.shuffle) return idx;
  detail::SplitMix rng(detail::hash_key({opt_.seed, detail::kShuffle, epoch}));
  for (size_t i = idx.size(); i > 1; --i) {  // Fisher-Yates
    const size_t j = size_t(rng.below(i));
    std::swap(idx[i - 1], idx[j]);
  }
  return idx;
}

const std::vector<int64_t>& Loader::cached_order(uint64_t epoch) {
  if (cached_epoch_ != epoch) {
    cached_ = order(epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

void Loader::render_sample(uint64_t epoch, int64_t index, float* out) const {
  const ImageDataset& d = *ds_;
  if (index < 0 || index >= d.n)
    throw Error("Loader: sample " + std::to_string(index) + " out of range [0, " + std::to_string(d.n) + ")");
  const int64_t H = d.height, W = d.width, C = d.channels;
  const uint8_t* src = d.pixels.data() + index * d.image_size();
  // (x / 255 - mean) / std, evaluated in exactly that order in f32; padding is a zero pixel.
  const float mean = opt_.mean, std = opt_.std;
  int64_t dy = 0, dx = 0;  // source offset of the crop window
  if (opt_.crop_pad > 0) {
    const uint64_t span = uint64_t(2 * opt_.crop_pad + 1);
    const uint64_t key = detail::hash_key({opt_.seed, detail::kCrop, epoch, uint64_t(index)});
    detail::SplitMix rng(key);
    dy = int64_t(rng.below(span)) - opt_.crop_pad;
    dx = int64_t(rng.below(span)) - opt_.crop_pad;
  }
  bool flip = false;
  if (opt_.hflip) flip = (detail::hash_key({opt_.seed, detail::kFlip, epoch, uint64_t(index)}) >> 63) != 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + dy;
      float* row = out + (c * H + y) * W;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t cx = flip ? W - 1 - x : x;  // flip the cropped image
        const int64_t sx = cx + dx;
        const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        const float v = inside ? float(src[(c * H + sy) * W + sx]) : 0.0f;
        row[x] = (v / 255.0f - mean) / std;
      }
    }
}

namespace {
bool has_shape(const HostTensor& t, const Shape& s) { return t.buffer && t.shape == s; }
}  // namespace

void Loader::fill_batch(uint64_t epoch, int64_t b, HostTensor& images, HostTensor& labels, ThreadPool* pool) {
  const int64_t rows = batch_rows(b);
  const ImageDataset& d = *ds_;
  const Shape ishape{rows, d.channels, d.height, d.width}, lshape{rows};
  if (!(has_shape(images, ishape) && images.dtype == DType::F32)) images = HostTensor(DType::F32, ishape);
  if (!(has_shape(labels, lshape) && (labels.dtype == DType::I64 || labels.dtype == DType::I32)))
    labels = HostTensor(DType::I64, lshape);
  const std::vector<int64_t>& ord = cached_order(epoch);
  const int64_t* idx = ord.data() + b * opt_.batch_size;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t label = d.labels[size_t(idx[r])];
    if (labels.dtype == DType::I64) labels.data<int64_t>()[r] = label;
    else labels.data<int32_t>()[r] = label;
  }
  struct Ctx {
    const Loader* self;
    uint64_t epoch;
    const int64_t* idx;
    float* out;
    int64_t stride;
  } ctx{this, epoch, idx, images.data<float>(), d.image_size()};
  auto render_row = [](const void* c, int64_t r) {
    const Ctx& x = *static_cast<const Ctx*>(c);
    x.self->render_sample(x.epoch, x.idx[r], x.out + r * x.stride);
  };
  if (pool && rows > 1) pool->run(rows, render_row, &ctx);
  else
    for (int64_t r = 0; r < rows; ++r) render_row(&ctx, r);
  images.buffer->mark_modified();
  labels.buffer->mark_modified();
}

bool Loader::next(HostTensor& images, HostTensor& labels) {
  if (cursor_ >= batches_per_epoch()) {
    set_epoch(epoch_ + 1);
    return false;
  }
  fill_batch(epoch_, cursor_++, images, labels);
  return true;
}

void Loader::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  cursor_ = 0;
}

}  // namespace synoros::data
