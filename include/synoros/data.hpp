// Datasets for training: Fashion-MNIST images (gzip'd IDX files), a seeded image batch loader
// with augmentation, and a byte-level text corpus (the fortunes files) with window batching.
// Every random choice is a pure function of (seed, epoch or step, sample index), so batches are
// the same whatever the thread count, the batch order or the standard library.
// Bad or missing files raise synoros::Error naming the file and the cause.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "synoros/core.hpp"

namespace synoros {
class ThreadPool;
}

namespace synoros::data {

// ---------------------------------------------------------------------------------------------
// IDX files (the MNIST container format), gzip-compressed.

// An unsigned-byte IDX array: dims from the header, then the row-major payload.
struct IdxArray {
  std::vector<int64_t> dims;  // as the header gives them
  int64_t items = 0;          // items kept (along dims[0]): dims[0], or less with a limit
  std::vector<uint8_t> data;  // the first `items` items
};

// Reads a gzip'd unsigned-byte IDX file whose magic must be `expected_magic` (2051 images,
// 2049 labels). The whole file is always decompressed and checked: the payload must have
// exactly as many bytes as the header announces. With a limit, only the first `limit` items
// (along dims[0]) are kept.
IdxArray read_idx_gz(const std::string& path, uint32_t expected_magic,
                     std::optional<int64_t> limit = std::nullopt);

// ---------------------------------------------------------------------------------------------
// Fashion-MNIST.

enum class Split { Train, Test };

// Images stored as bytes, N x C x H x W, with one class label per image.
struct ImageDataset {
  int64_t n = 0, channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;  // n * channels * height * width, row-major
  std::vector<int32_t> labels;  // n labels in [0, num_classes)
  int64_t num_classes = 0;
  int64_t image_size() const { return channels * height * width; }
};

// $SYNOROS_DATA_DIR when set and non-empty, else /usr/share/datasets/fashion-mnist.
std::string default_fashion_mnist_dir();

// Loads the train (60000) or test (10000) split from `dir` (empty: default_fashion_mnist_dir()),
// keeping the first `limit` samples when given. Files: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
ImageDataset load_fashion_mnist(const std::string& dir = "", Split split = Split::Train,
                                std::optional<int64_t> limit = std::nullopt);

// ---------------------------------------------------------------------------------------------
// Image batches.

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;      // a fresh permutation every epoch (Fisher-Yates, seeded)
  bool drop_last = false;   // drop the final short batch
  uint64_t seed = 0;
  float mean = 0.2860f;     // images become (x / 255 - mean) / std
  float std = 0.3530f;
  int crop_pad = 0;         // > 0: random crop back to H x W from the image zero-padded by this
  bool hflip = false;       // flip left-right with probability 1/2
};

// Batches of an ImageDataset: images f32 [B, C, H, W], labels [B] (I64, or I32 when the caller
// passes an I32 tensor). Not thread-safe; one Loader per consumer.
class Loader {
 public:
  Loader(std::shared_ptr<const ImageDataset> dataset, LoaderOptions options);

  const LoaderOptions& options() const { return opt_; }
  const ImageDataset& dataset() const { return *ds_; }
  int64_t batches_per_epoch() const;
  // Samples in batch `b` (batch_size except perhaps the last one without drop_last).
  int64_t batch_rows(int64_t b) const;

  // Dataset indices of epoch `epoch` in visiting order (identity without shuffle).
  std::vector<int64_t> order(uint64_t epoch) const;

  // Fills batch `b` of `epoch`. When `images` / `labels` already have the batch's shape and a
  // usable dtype they are written in place (no allocation); otherwise they are (re)allocated
  // as f32 [rows, C, H, W] and I64 [rows]. Marks both buffers modified. With a pool, rows are
  // rendered in parallel (the result is the same bits for any pool size).
  void fill_batch(uint64_t epoch, int64_t b, HostTensor& images, HostTensor& labels, ThreadPool* pool = nullptr);

  // Writes sample `index` of the dataset, as seen in `epoch` (augmented, normalised), to `out`
  // (image_size floats). The augmentation depends only on (seed, epoch, index).
  void render_sample(uint64_t epoch, int64_t index, float* out) const;

  // Iteration: next() fills the following batch of the current epoch and returns true, or
  // returns false once the epoch is exhausted and moves on to the next epoch.
  bool next(HostTensor& images, HostTensor& labels);
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch);

 private:
  const std::vector<int64_t>& cached_order(uint64_t epoch);

  std::shared_ptr<const ImageDataset> ds_;
  LoaderOptions opt_;
  uint64_t epoch_ = 0;
  int64_t cursor_ = 0;
  std::optional<uint64_t> cached_epoch_;
  std::vector<int64_t> cached_;
};

// ---------------------------------------------------------------------------------------------
// Byte-level text.

// $SYNOROS_FORTUNES_DIR when set and non-empty, else /usr/share/games/fortunes.
std::string default_fortunes_dir();

// The fortunes of one file: text between lines consisting only of '%' (each keeps its final
// newline; empty fortunes are dropped).
std::vector<std::string> read_fortune_file(const std::string& path);

struct TextCorpus {
  std::vector<std::string> files;  // the files read, in order
  int64_t fortunes = 0;            // how many fortunes the corpus holds
  std::vector<uint8_t> train;      // byte tokens (vocabulary 256)
  std::vector<uint8_t> val;
};

// Reads every regular file of `dir` (empty: default_fortunes_dir()) in sorted name order,
// skipping *.dat indexes, *.u8 names, symlinks and subdirectories. Each fortune is followed by
// the separator line "%\n". The last `val_fraction` of the bytes, moved forward to the next
// fortune boundary, becomes the validation split.
TextCorpus load_fortunes(const std::string& dir = "", double val_fraction = 0.1);
// Any file's bytes: the last `val_fraction`, moved forward to the next line start (when there is
// one), becomes the validation split. An unreadable or empty file is an Error naming it.
TextCorpus load_text_file(const std::string& path, double val_fraction = 0.1);

// Unigram entropy of the byte distribution of `tokens`, in nats per byte: what a model that
// ignores context achieves at best (on the same text).
double unigram_entropy(std::span<const uint8_t> tokens);

// Windows of `context` tokens over a token stream: inputs [B, T] and targets [B, T] shifted by
// one. Random windows start uniformly in [0, size - T - 1], keyed on (seed, step, row).
class TextWindows {
 public:
  TextWindows(std::shared_ptr<const std::vector<uint8_t>> tokens, int64_t context, uint64_t seed);

  int64_t context() const { return context_; }
  // Start of row `row` of random batch `step`.
  int64_t window_start(uint64_t step, int64_t row) const;
  // Fills inputs/targets with `batch` random windows of step `step`. Tensors of shape
  // [batch, T] with dtype I64 or I32 are written in place; otherwise allocated as I64.
  // Rows [first_row, first_row + batch) of step `step`'s random windows (a row's window depends on
  // the step and its row only, so a batch split into micro-batches sees the same windows).
  void fill_random(uint64_t step, int64_t batch, HostTensor& inputs, HostTensor& targets, int64_t first_row = 0) const;
  // Evaluation: consecutive non-overlapping windows (start = (b * batch + row) * T).
  int64_t sequential_windows() const;
  // Fills batch `b` of sequential windows; rows past the last window are not produced (the
  // tensors get the shorter shape).
  void fill_sequential(int64_t b, int64_t batch, HostTensor& inputs, HostTensor& targets) const;

 private:
  void fill_rows(const std::vector<int64_t>& starts, HostTensor& inputs, HostTensor& targets) const;

  std::shared_ptr<const std::vector<uint8_t>> tokens_;
  int64_t context_;
  uint64_t seed_;
};

}  // namespace synoros::data
