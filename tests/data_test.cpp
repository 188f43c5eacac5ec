// Datasets: Fashion-MNIST IDX loading (real files and corrupted temporaries), the seeded image
// loader (shuffling, normalisation, augmentation), and the fortunes byte corpus.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>

#include "test_util.hpp"
#include "synoros/data.hpp"
#include "synoros/runtime.hpp"

namespace synoros::data {
namespace {
using synoros::testing::expect_error;
using synoros::testing::TempDir;
namespace fs = std::filesystem;

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

// An IDX byte image: magic, dims, payload (payload may disagree with dims on purpose).
std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> v;
  put_be32(v, magic);
  for (uint32_t d : dims) put_be32(v, d);
  v.insert(v.end(), payload.begin(), payload.end());
  return v;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void write_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

std::vector<uint8_t> read_raw(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(i), std::istreambuf_iterator<char>()};
}

// n synthetic 28x28 images: pixel p of image i is (i * 7 + p) mod 256; labels i mod 10.
std::vector<uint8_t> synthetic_pixels(uint32_t n) {
  std::vector<uint8_t> px(size_t(n) * 784);
  for (size_t i = 0; i < n; ++i)
    for (size_t p = 0; p < 784; ++p) px[i * 784 + p] = uint8_t((i * 7 + p) % 256);
  return px;
}
std::vector<uint8_t> synthetic_labels(uint32_t n) {
  std::vector<uint8_t> l(n);
  for (uint32_t i = 0; i < n; ++i) l[i] = uint8_t(i % 10);
  return l;
}

// Writes a complete synthetic split under dir with the given prefix ("train" or "t10k").
void write_split(const TempDir& dir, const std::string& prefix, uint32_t n) {
  write_gz(dir.file(prefix + "-images-idx3-ubyte.gz"), idx_bytes(2051, {n, 28, 28}, synthetic_pixels(n)));
  write_gz(dir.file(prefix + "-labels-idx1-ubyte.gz"), idx_bytes(2049, {n}, synthetic_labels(n)));
}

// A dataset in memory whose first pixel of image i encodes i (for n <= 256), labels i % 10.
std::shared_ptr<ImageDataset> memory_dataset(int64_t n) {
  auto ds = std::make_shared<ImageDataset>();
  ds->n = n;
  ds->channels = 1;
  ds->height = ds->width = 28;
  ds->num_classes = 10;
  ds->pixels = synthetic_pixels(uint32_t(n));
  ds->labels.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) ds->labels[size_t(i)] = int32_t(i % 10);
  return ds;
}

// ---------------------------------------------------------------------------------------------

TEST(DataFashionMnist, ReadsRealTestSplit) {
  ImageDataset ds = load_fashion_mnist("/usr/share/datasets/fashion-mnist", Split::Test, 3000);
  EXPECT_EQ(ds.n, 3000);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 28);
  EXPECT_EQ(ds.width, 28);
  EXPECT_EQ(ds.num_classes, 10);
  ASSERT_EQ(ds.pixels.size(), size_t(3000 * 784));
  ASSERT_EQ(ds.labels.size(), size_t(3000));
  // Fashion-MNIST is balanced: about 300 of each class in 3000 samples.
  std::vector<int> count(10);
  for (int32_t l : ds.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++count[size_t(l)];
  }
  for (int k = 0; k < 10; ++k) EXPECT_GT(count[size_t(k)], 200) << "class " << k;
  // The pixel mean matches the published normalisation constant 0.2860.
  double sum = std::accumulate(ds.pixels.begin(), ds.pixels.end(), 0.0);
  EXPECT_NEAR(sum / double(ds.pixels.size()) / 255.0, 0.2860, 0.01);
  // The first test label of Fashion-MNIST is 9 (ankle boot), the second 2 (pullover).
  EXPECT_EQ(ds.labels[0], 9);
  EXPECT_EQ(ds.labels[1], 2);
}

TEST(DataFashionMnist, ReadsRealTrainSplitPrefix) {
  ImageDataset a = load_fashion_mnist("", Split::Train, 2000);
  ImageDataset b = load_fashion_mnist("", Split::Train, 1000);
  EXPECT_EQ(a.n, 2000);
  EXPECT_EQ(b.n, 1000);
  // A limit keeps a prefix.
  EXPECT_TRUE(std::equal(b.pixels.begin(), b.pixels.end(), a.pixels.begin()));
  EXPECT_TRUE(std::equal(b.labels.begin(), b.labels.end(), a.labels.begin()));
  EXPECT_EQ(a.labels[0], 9);  // the first training label is 9 as well
}

TEST(DataFashionMnist, EnvironmentOverridesDirectory) {
  TempDir dir("env");
  write_split(dir, "t10k", 12);
  config::ScopedOverride env("SYNOROS_DATA_DIR", dir.path.c_str());
  EXPECT_EQ(default_fashion_mnist_dir(), dir.path.string());
  ImageDataset ds = load_fashion_mnist("", Split::Test);
  EXPECT_EQ(ds.n, 12);
  EXPECT_EQ(ds.pixels, synthetic_pixels(12));
  EXPECT_EQ(ds.labels[11], 1);
}

TEST(DataIdx, SyntheticFilesRoundTrip) {
  TempDir dir("roundtrip");
  write_split(dir, "train", 5);
  ImageDataset ds = load_fashion_mnist(dir.path.string(), Split::Train);
  EXPECT_EQ(ds.n, 5);
  EXPECT_EQ(ds.pixels, synthetic_pixels(5));
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  IdxArray a = read_idx_gz(dir.file("train-images-idx3-ubyte.gz"), 2051, 2);
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 28, 28}));
  EXPECT_EQ(a.items, 2);
  EXPECT_EQ(a.data.size(), size_t(2 * 784));
}

TEST(DataIdx, CorruptFilesRaiseErrors) {
  TempDir dir("corrupt");
  const std::string p = dir.file("x.gz");
  auto labels = [&](uint32_t n) { return idx_bytes(2049, {n}, synthetic_labels(n)); };

  expect_error([&] { read_idx_gz(dir.file("absent.gz"), 2049); }, {"absent.gz", "cannot open"});

  write_gz(p, idx_bytes(2049, {10}, synthetic_labels(9)));
  expect_error([&] { read_idx_gz(p, 2049); }, {p, "truncated payload", "10 bytes", "holds 9"});
  // Still detected when a limit means the missing bytes would not be kept.
  expect_error([&] { read_idx_gz(p, 2049, 3); }, {p, "truncated payload"});

  write_gz(p, idx_bytes(2049, {8}, synthetic_labels(10)));
  expect_error([&] { read_idx_gz(p, 2049); }, {p, "2 bytes beyond"});

  write_gz(p, labels(4));
  expect_error([&] { read_idx_gz(p, 2051); }, {p, "bad magic number 2049", "expected 2051"});

  write_gz(p, {0, 0});
  expect_error([&] { read_idx_gz(p, 2049); }, {p, "truncated header"});
  write_gz(p, {0, 0, 8, 3, 0, 0});
  expect_error([&] { read_idx_gz(p, 2051); }, {p, "truncated header"});
  write_gz(p, {});
  expect_error([&] { read_idx_gz(p, 2049); }, {p, "truncated header"});

  // A header announcing 4 GiB or more is refused before anything is allocated.
  write_gz(p, idx_bytes(2051, {0xFFFFFFFF, 28, 28}, {}));
  expect_error([&] { read_idx_gz(p, 2051); }, {p, "implausible size"});

  write_raw(p, labels(4));  // valid IDX content, but not compressed
  expect_error([&] { read_idx_gz(p, 2049); }, {p, "not a gzip file"});

  // A gzip stream cut short, and one with a damaged body.
  write_gz(p, labels(5000));
  std::vector<uint8_t> gz = read_raw(p);
  ASSERT_GT(gz.size(), 40u);
  for (size_t cut : {size_t(12), gz.size() / 2, gz.size() - 4, gz.size() - 1}) {
    write_raw(p, std::vector<uint8_t>(gz.begin(), gz.begin() + std::ptrdiff_t(cut)));
    expect_error([&] { read_idx_gz(p, 2049); }, {p});
  }
  write_raw(p, std::vector<uint8_t>(gz.begin(), gz.begin() + std::ptrdiff_t(gz.size() / 2)));
  expect_error([&] { read_idx_gz(p, 2049); }, {p + ": truncated gzip stream (unexpected end of file)"});
  std::vector<uint8_t> bad = gz;
  bad[gz.size() - 6] ^= 0x5A;  // inside the CRC32 trailer
  write_raw(p, bad);
  expect_error([&] { read_idx_gz(p, 2049); }, {p});
  int rejected = 0;
  for (size_t pos = 0; pos < gz.size(); ++pos) {  // anywhere: an Error or a checked payload
    bad = gz;
    bad[pos] ^= 0xFF;
    write_raw(p, bad);
    try {
      IdxArray a = read_idx_gz(p, 2049);
      EXPECT_EQ(a.data.size(), 5000u);  // only a complete, CRC-checked payload may come back
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
    }
  }
  EXPECT_GT(rejected, int(gz.size()) / 2) << "of " << gz.size() << " flipped bytes";
}

TEST(DataIdx, DatasetLevelChecks) {
  TempDir dir("dataset");
  const std::string d = dir.path.string();
  expect_error([&] { load_fashion_mnist(d, Split::Train); }, {"train-images-idx3-ubyte.gz", "cannot open"});

  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(2051, {3, 28, 28}, synthetic_pixels(3)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(2049, {4}, synthetic_labels(4)));
  expect_error([&] { load_fashion_mnist(d, Split::Train); }, {"3 images", "4 labels"});
  expect_error([&] { load_fashion_mnist(d, Split::Train, 2); }, {"3 images", "4 labels"});

  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(2051, {3, 27, 28}, std::vector<uint8_t>(3 * 27 * 28)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(2049, {3}, synthetic_labels(3)));
  expect_error([&] { load_fashion_mnist(d, Split::Train); }, {"27x28", "expected 28x28"});

  write_split(dir, "train", 3);
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(2049, {3}, {1, 10, 2}));
  expect_error([&] { load_fashion_mnist(d, Split::Train); }, {"label 10", "sample 1"});
}

// ---------------------------------------------------------------------------------------------

TEST(DataLoader, ShufflingIsSeededPerEpoch) {
  auto ds = memory_dataset(200);
  LoaderOptions o;
  o.seed = 42;
  Loader a(ds, o), b(ds, o);
  std::vector<int64_t> e0 = a.order(0), e1 = a.order(1);
  EXPECT_EQ(e0, b.order(0));
  EXPECT_EQ(e1, b.order(1));
  EXPECT_NE(e0, e1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(200);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(e0, iota);
  o.seed = 43;
  EXPECT_NE(Loader(ds, o).order(0), e0);
  o.shuffle = false;
  EXPECT_EQ(Loader(ds, o).order(5), iota);
  // Pinned values: the permutation is a function of the seed alone (own SplitMix64 generator,
  // no standard-library distribution), so it is the same on every platform.
  LoaderOptions p;
  p.seed = 7;
  EXPECT_EQ(Loader(memory_dataset(10), p).order(0), (std::vector<int64_t>{5, 4, 7, 0, 9, 1, 3, 8, 6, 2}));
}

TEST(DataLoader, NormalisesExactlyWithoutAugmentation) {
  auto ds = memory_dataset(10);
  LoaderOptions o;
  o.shuffle = false;
  o.batch_size = 4;
  Loader l(ds, o);
  HostTensor x, y;
  l.fill_batch(0, 1, x, y);
  ASSERT_EQ(x.shape, (Shape{4, 1, 28, 28}));
  ASSERT_EQ(y.shape, (Shape{4}));
  ASSERT_EQ(y.dtype, DType::I64);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(y.data<int64_t>()[r], (4 + r) % 10);
    for (int64_t p = 0; p < 784; ++p) {
      float v = float(ds->pixels[size_t((4 + r) * 784 + p)]);
      ASSERT_EQ(x.data<float>()[r * 784 + p], (v / 255.0f - 0.2860f) / 0.3530f);
    }
  }
}

TEST(DataLoader, BatchesDoNotDependOnOrderOrConstruction) {
  auto ds = memory_dataset(100);
  LoaderOptions o;
  o.seed = 9;
  o.batch_size = 16;
  o.crop_pad = 4;
  o.hflip = true;
  Loader a(ds, o);
  std::vector<std::vector<float>> fwd;
  std::vector<std::vector<int64_t>> fwd_labels;
  for (uint64_t epoch : {0u, 1u})
    for (int64_t b = 0; b < a.batches_per_epoch(); ++b) {
      HostTensor x, y;
      a.fill_batch(epoch, b, x, y);
      fwd.emplace_back(x.data<float>(), x.data<float>() + x.numel());
      fwd_labels.emplace_back(y.data<int64_t>(), y.data<int64_t>() + y.numel());
    }
  // A loader built later, visiting epochs and batches backwards, sees the same batches.
  Loader b(ds, o);
  const int64_t per = b.batches_per_epoch();
  for (int e = 1; e >= 0; --e)
    for (int64_t k = per - 1; k >= 0; --k) {
      HostTensor x, y;
      b.fill_batch(uint64_t(e), k, x, y);
      const size_t at = size_t(e * per + k);
      EXPECT_EQ(std::vector<float>(x.data<float>(), x.data<float>() + x.numel()), fwd[at]) << e << "/" << k;
      EXPECT_EQ(std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel()), fwd_labels[at]);
    }
  // Rendering rows on a pool of any size gives the same bits.
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    HostTensor x, y;
    b.fill_batch(1, 2, x, y, &pool);
    EXPECT_EQ(std::vector<float>(x.data<float>(), x.data<float>() + x.numel()), fwd[size_t(per + 2)]) << threads;
  }
  // Augmentation is keyed on the sample, not its position: same sample, same epoch, same image.
  std::vector<float> s1(784), s2(784);
  a.render_sample(1, 37, s1.data());
  b.render_sample(1, 37, s2.data());
  EXPECT_EQ(s1, s2);
}

// Every augmented image must be the original shifted by (dy, dx) in [-pad, pad] with zero
// fill, possibly flipped; the shifts and flips must vary across samples.
TEST(DataLoader, CropAndFlipAreShiftsOfTheOriginal) {
  auto ds = memory_dataset(64);
  LoaderOptions o;
  o.crop_pad = 4;
  o.hflip = true;
  o.seed = 3;
  Loader l(ds, o);
  const float zero = (0.0f / 255.0f - o.mean) / o.std;
  std::set<std::pair<int, int>> shifts;
  int flips = 0;
  std::vector<float> got(784);
  for (int64_t i = 0; i < 64; ++i) {
    l.render_sample(2, i, got.data());
    bool found = false;
    for (int f = 0; f < 2 && !found; ++f)
      for (int dy = -4; dy <= 4 && !found; ++dy)
        for (int dx = -4; dx <= 4 && !found; ++dx) {
          bool ok = true;
          for (int y = 0; y < 28 && ok; ++y)
            for (int x = 0; x < 28 && ok; ++x) {
              int cx = f ? 27 - x : x, sy = y + dy, sx = cx + dx;
              float want = zero;
              if (sy >= 0 && sy < 28 && sx >= 0 && sx < 28)
                want = (float(ds->pixels[size_t(i * 784 + sy * 28 + sx)]) / 255.0f - o.mean) / o.std;
              ok = got[size_t(y * 28 + x)] == want;
            }
          if (ok) {
            found = true;
            shifts.insert({dy, dx});
            flips += f;
          }
        }
    EXPECT_TRUE(found) << "sample " << i << " is not a shifted/flipped copy";
  }
  EXPECT_GT(shifts.size(), 20u);
  EXPECT_GT(flips, 16);
  EXPECT_LT(flips, 48);
  // Another epoch draws other augmentations for the same sample (for most samples).
  int differ = 0;
  std::vector<float> other(784);
  for (int64_t i = 0; i < 16; ++i) {
    l.render_sample(2, i, got.data());
    l.render_sample(3, i, other.data());
    differ += got != other;
  }
  EXPECT_GT(differ, 10);
}

TEST(DataLoader, DropLastShortBatchAndInPlaceFill) {
  auto ds = memory_dataset(100);
  LoaderOptions o;
  o.batch_size = 32;
  o.drop_last = true;
  EXPECT_EQ(Loader(ds, o).batches_per_epoch(), 3);
  o.drop_last = false;
  Loader l(ds, o);
  ASSERT_EQ(l.batches_per_epoch(), 4);
  EXPECT_EQ(l.batch_rows(3), 4);
  expect_error([&] { l.batch_rows(4); }, {"batch 4 out of range"});

  HostTensor x(DType::F32, {32, 1, 28, 28}), y(DType::I32, {32});
  const void* xbuf = x.buffer->data();
  const uint64_t v0 = x.buffer->version();
  l.fill_batch(0, 0, x, y);
  EXPECT_EQ(x.buffer->data(), xbuf);  // written in place
  EXPECT_GT(x.buffer->version(), v0);
  EXPECT_EQ(y.dtype, DType::I32);     // an I32 label tensor is kept
  l.fill_batch(0, 3, x, y);            // short batch: reallocated to 4 rows
  EXPECT_EQ(x.shape, (Shape{4, 1, 28, 28}));
  EXPECT_EQ(y.shape, (Shape{4}));

  // next() walks one epoch, then reports its end and moves to the next epoch.
  std::vector<int64_t> seen;
  int batches = 0;
  while (l.next(x, y)) {
    ++batches;
    for (int64_t r = 0; r < y.numel(); ++r) seen.push_back(int64_t(y.get(r)));
  }
  EXPECT_EQ(batches, 4);
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(l.epoch(), 1u);
  std::vector<int> per_class(10);
  for (int64_t s : seen) ++per_class[size_t(s)];
  for (int c : per_class) EXPECT_EQ(c, 10);  // every sample exactly once
}

TEST(DataLoader, RejectsBadOptions) {
  auto ds = memory_dataset(4);
  LoaderOptions o;
  o.batch_size = 0;
  expect_error([&] { Loader(ds, o); }, {"batch_size"});
  o = {};
  o.std = 0;
  expect_error([&] { Loader(ds, o); }, {"std"});
  o = {};
  o.crop_pad = -1;
  expect_error([&] { Loader(ds, o); }, {"crop_pad"});
  auto broken = memory_dataset(4);
  broken->labels.pop_back();
  expect_error([&] { Loader(broken, {}); }, {"3 labels", "4 images"});
  expect_error([&] { Loader(nullptr, {}); }, {"null dataset"});
}

// ---------------------------------------------------------------------------------------------

TEST(DataText, ParsesFortuneFiles) {
  TempDir dir("fortune");
  const std::string p = dir.file("f");
  write_raw(p, std::vector<uint8_t>{'a', '\n', '%', '\n', 'b', '\n', 'c', '\n', '%', '\n', '%', '\n', 'd'});
  EXPECT_EQ(read_fortune_file(p), (std::vector<std::string>{"a\n", "b\nc\n", "d\n"}));
  expect_error([&] { read_fortune_file(dir.file("none")); }, {"none", "cannot open"});
}

TEST(DataText, SkipsIndexesLinksAndSubdirectories) {
  TempDir dir("skips");
  auto put = [&](const std::string& name, const std::string& text) {
    write_raw(dir.file(name), std::vector<uint8_t>(text.begin(), text.end()));
  };
  put("b", "two\n%\nthree\n");
  put("a", "one\n");
  put("a.dat", "binary index");
  fs::create_symlink("a", dir.path / "a.u8");
  fs::create_symlink("b", dir.path / "link");
  fs::create_directory(dir.path / "off");
  put("off/rude", "skipped\n");
  TextCorpus c = load_fortunes(dir.path.string(), 0.0);
  EXPECT_EQ(c.files, (std::vector<std::string>{dir.file("a"), dir.file("b")}));
  EXPECT_EQ(c.fortunes, 3);
  EXPECT_EQ(std::string(c.train.begin(), c.train.end()), "one\n%\ntwo\n%\nthree\n%\n");
  EXPECT_TRUE(c.val.empty());
  // With a validation fraction the split lands on a fortune boundary.
  TextCorpus s = load_fortunes(dir.path.string(), 0.4);
  EXPECT_EQ(std::string(s.train.begin(), s.train.end()), "one\n%\ntwo\n%\n");
  EXPECT_EQ(std::string(s.val.begin(), s.val.end()), "three\n%\n");
  expect_error([&] { load_fortunes(dir.file("off/rude")); }, {"not a directory"});
  expect_error([&] { load_fortunes(dir.path.string(), 1.0); }, {"val_fraction"});
}

TEST(DataText, LoadsTheFortunesCorpus) {
  TextCorpus c = load_fortunes();
  ASSERT_FALSE(c.files.empty());
  EXPECT_TRUE(std::is_sorted(c.files.begin(), c.files.end()));
  for (const auto& f : c.files) {
    EXPECT_FALSE(f.ends_with(".dat")) << f;
    EXPECT_FALSE(f.ends_with(".u8")) << f;
  }
  EXPECT_GT(c.fortunes, 1000);
  const double total = double(c.train.size() + c.val.size());
  EXPECT_GT(total, 1e6);
  EXPECT_NEAR(double(c.val.size()) / total, 0.1, 0.01);
  // Validation begins with a whole fortune: the training split ends with a separator line.
  ASSERT_GE(c.train.size(), 2u);
  EXPECT_EQ(c.train[c.train.size() - 2], '%');
  EXPECT_EQ(c.train.back(), '\n');
  // Deterministic.
  TextCorpus again = load_fortunes();
  EXPECT_EQ(again.train, c.train);
  EXPECT_EQ(again.val, c.val);
  // English text: roughly 4.3 bits (3 nats) per byte for a unigram model.
  const double h = unigram_entropy(c.train);
  EXPECT_GT(h, 2.5);
  EXPECT_LT(h, 3.6);
}

TEST(DataText, UnigramEntropyKnownValues) {
  std::vector<uint8_t> uniform4{1, 2, 3, 4, 4, 3, 2, 1};
  EXPECT_NEAR(unigram_entropy(uniform4), std::log(4.0), 1e-12);
  std::vector<uint8_t> one(50, 'x');
  EXPECT_EQ(unigram_entropy(one), 0.0);
  std::vector<uint8_t> skew{0, 0, 0, 1};  // -(3/4 ln 3/4 + 1/4 ln 1/4)
  EXPECT_NEAR(unigram_entropy(skew), -(0.75 * std::log(0.75) + 0.25 * std::log(0.25)), 1e-12);
  expect_error([] { unigram_entropy({}); }, {"empty"});
}

TEST(DataText, WindowsAreShiftedDeterministicAndInRange) {
  auto tokens = std::make_shared<std::vector<uint8_t>>(1000);
  for (size_t i = 0; i < tokens->size(); ++i) tokens->at(i) = uint8_t(i * 31 % 251);
  TextWindows w(tokens, 16, 5);
  HostTensor x, y;
  w.fill_random(3, 8, x, y);
  ASSERT_EQ(x.shape, (Shape{8, 16}));
  ASSERT_EQ(y.shape, (Shape{8, 16}));
  ASSERT_EQ(x.dtype, DType::I64);
  for (int64_t r = 0; r < 8; ++r) {
    const int64_t s = w.window_start(3, r);
    ASSERT_GE(s, 0);
    ASSERT_LE(s + 16, 999);
    for (int64_t j = 0; j < 16; ++j) {
      EXPECT_EQ(x.data<int64_t>()[r * 16 + j], tokens->at(size_t(s + j)));
      EXPECT_EQ(y.data<int64_t>()[r * 16 + j], tokens->at(size_t(s + j + 1)));
    }
  }
  // Same (seed, step): same batch; another step or seed: other windows.
  HostTensor x2, y2;
  TextWindows(tokens, 16, 5).fill_random(3, 8, x2, y2);
  EXPECT_EQ(std::vector<int64_t>(x.data<int64_t>(), x.data<int64_t>() + 128),
            std::vector<int64_t>(x2.data<int64_t>(), x2.data<int64_t>() + 128));
  std::set<int64_t> starts;
  for (uint64_t step = 0; step < 50; ++step) starts.insert(w.window_start(step, 0));
  EXPECT_GT(starts.size(), 45u);
  EXPECT_NE(TextWindows(tokens, 16, 6).window_start(3, 0), w.window_start(3, 0));
  // Pinned values (platform-independent generator).
  EXPECT_EQ(w.window_start(3, 0), 821);
  EXPECT_EQ(w.window_start(3, 3), 537);
  // Extremes stay in range for a stream just one token longer than the context.
  auto tiny = std::make_shared<std::vector<uint8_t>>(std::vector<uint8_t>{1, 2, 3});
  TextWindows t(tiny, 2, 0);
  for (uint64_t step = 0; step < 20; ++step) EXPECT_EQ(t.window_start(step, 0), 0);
  expect_error([&] { TextWindows(tiny, 3, 0); }, {"too few", "context 3"});

  // In-place I32 fill.
  HostTensor xi(DType::I32, {8, 16}), yi(DType::I32, {8, 16});
  const void* buf = xi.buffer->data();
  w.fill_random(3, 8, xi, yi);
  EXPECT_EQ(xi.buffer->data(), buf);
  for (int64_t i = 0; i < 128; ++i) EXPECT_EQ(xi.data<int32_t>()[i], x.data<int64_t>()[i]);
}

TEST(DataText, SequentialWindowsCoverTheStream) {
  auto tokens = std::make_shared<std::vector<uint8_t>>(101);
  for (size_t i = 0; i < tokens->size(); ++i) tokens->at(i) = uint8_t(i);
  TextWindows w(tokens, 10, 0);
  EXPECT_EQ(w.sequential_windows(), 10);
  HostTensor x, y;
  w.fill_sequential(2, 4, x, y);  // windows 8 and 9 only
  ASSERT_EQ(x.shape, (Shape{2, 10}));
  EXPECT_EQ(x.data<int64_t>()[0], 80);
  EXPECT_EQ(y.data<int64_t>()[19], 100);
  expect_error([&] { w.fill_sequential(3, 4, x, y); }, {"out of range"});
}

}  // namespace
}  // namespace synoros::data
