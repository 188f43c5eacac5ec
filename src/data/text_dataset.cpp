// Byte-level text: the fortunes corpus, a deterministic train/validation split, window batches
// and the unigram entropy baseline.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "synoros/config.hpp"
#include "data/parsers.hpp"
#include "data/rng.hpp"
#include "synoros/data.hpp"

namespace synoros::data {
namespace fs = std::filesystem;

std::string default_fortunes_dir() {
  if (std::string env = config::text("SYNOROS_FORTUNES_DIR"); !env.empty()) return env;
  return "/usr/share/games/fortunes";
}

std::vector<std::string> read_fortune_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("fortune file " + path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("fortune file " + path + ": read error");
  return split_fortunes(text);
}

std::vector<std::string> split_fortunes(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    const size_t end = eol == std::string::npos ? text.size() : eol + 1;
    std::string_view line(text.data() + pos, end - pos);
    std::string_view body = line;
    if (!body.empty() && body.back() == '\n') body.remove_suffix(1);
    if (!body.empty() && body.back() == '\r') body.remove_suffix(1);
    if (body == "%") {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(line);
    }
    pos = end;
  }
  if (!cur.empty()) {
    if (cur.back() != '\n') cur.push_back('\n');
    out.push_back(std::move(cur));
  }
  return out;
}

TextCorpus load_text_file(const std::string& path, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw Error("load_text_file: val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw Error("text file '" + path + "': not a readable file");
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("text file '" + path + "': read error");
  if (all.empty()) throw Error("text file '" + path + "' is empty");
  TextCorpus c;
  c.files = {path};
  size_t cut = all.size();
  if (val_fraction > 0) {
    cut = size_t(std::floor(double(all.size()) * (1.0 - val_fraction)));
    auto nl = std::find(all.begin() + std::ptrdiff_t(cut), all.end(), uint8_t('\n'));
    if (nl != all.end() && nl + 1 != all.end()) cut = size_t(nl - all.begin()) + 1;
  }
  c.train.assign(all.begin(), all.begin() + std::ptrdiff_t(cut));
  c.val.assign(all.begin() + std::ptrdiff_t(cut), all.end());
  return c;
}

TextCorpus load_fortunes(const std::string& dir_arg, double val_fraction) {
  const std::string dir = dir_arg.empty() ? default_fortunes_dir() : dir_arg;
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw Error("load_fortunes: val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("fortunes directory " + dir + ": not a directory");

  TextCorpus c;
  fs::directory_iterator it(dir, ec);
  if (ec) throw Error("fortunes directory " + dir + ": cannot list: " + ec.message());
  for (const fs::directory_entry& e : it) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink(ec) || !e.is_regular_file(ec)) continue;  // *.u8 links, 'off/', ...
    if (name.ends_with(".dat") || name.ends_with(".u8") || name.starts_with(".")) continue;
    c.files.push_back(e.path().string());
  }
  std::sort(c.files.begin(), c.files.end());
  if (c.files.empty()) throw Error("fortunes directory " + dir + ": no fortune files");

  std::vector<uint8_t> all;
  std::vector<size_t> boundaries;  // offsets where a fortune begins
  for (const std::string& f : c.files)
    for (const std::string& fortune : read_fortune_file(f)) {
      boundaries.push_back(all.size());
      all.insert(all.end(), fortune.begin(), fortune.end());
      all.push_back('%');
      all.push_back('\n');
      ++c.fortunes;
    }
  if (all.empty()) throw Error("fortunes directory " + dir + ": the files hold no fortunes");

  // Validation starts at the first fortune boundary at or after (1 - val_fraction) of the bytes.
  size_t cut = all.size();
  if (val_fraction > 0) {
    const size_t target = size_t(std::floor(double(all.size()) * (1.0 - val_fraction)));
    auto b = std::lower_bound(boundaries.begin(), boundaries.end(), target);
    cut = b == boundaries.end() ? all.size() : *b;
  }
  c.train.assign(all.begin(), all.begin() + std::ptrdiff_t(cut));
  c.val.assign(all.begin() + std::ptrdiff_t(cut), all.end());
  return c;
}

double unigram_entropy(std::span<const uint8_t> tokens) {
  if (tokens.empty()) throw Error("unigram_entropy: empty token sequence");
  std::array<int64_t, 256> count{};
  for (uint8_t t : tokens) ++count[t];
  const double n = double(tokens.size());
  double h = 0;
  for (int64_t k : count)
    if (k > 0) {
      const double p = double(k) / n;
      h -= p * std::log(p);
    }
  return h;
}

TextWindows::TextWindows(std::shared_ptr<const std::vector<uint8_t>> tokens, int64_t context, uint64_t seed)
    : tokens_(std::move(tokens)), context_(context), seed_(seed) {
  if (!tokens_) throw Error("TextWindows: null token sequence");
  if (context_ < 1) throw Error("TextWindows: context must be >= 1, got " + std::to_string(context_));
  if (int64_t(tokens_->size()) < context_ + 1)
    throw Error("TextWindows: " + std::to_string(tokens_->size()) + " tokens are too few for context " +
                std::to_string(context_) + " (need context + 1)");
}

int64_t TextWindows::window_start(uint64_t step, int64_t row) const {
  const uint64_t starts = uint64_t(int64_t(tokens_->size()) - context_);  // [0, size - T - 1]
  return int64_t(detail::uniform_below(detail::hash_key({seed_, detail::kWindow, step, uint64_t(row)}), starts));
}

void TextWindows::fill_rows(const std::vector<int64_t>& starts, HostTensor& inputs, HostTensor& targets) const {
  const Shape s{int64_t(starts.size()), context_};
  auto usable = [&](const HostTensor& t) {
    return t.buffer && t.shape == s && (t.dtype == DType::I64 || t.dtype == DType::I32);
  };
  if (!usable(inputs)) inputs = HostTensor(DType::I64, s);
  if (!usable(targets)) targets = HostTensor(DType::I64, s);
  const uint8_t* tok = tokens_->data();
  auto put = [&](HostTensor& t, int64_t i, uint8_t v) {
    if (t.dtype == DType::I64) t.data<int64_t>()[i] = v;
    else t.data<int32_t>()[i] = v;
  };
  for (size_t r = 0; r < starts.size(); ++r)
    for (int64_t j = 0; j < context_; ++j) {
      const int64_t i = int64_t(r) * context_ + j;
      put(inputs, i, tok[starts[r] + j]);
      put(targets, i, tok[starts[r] + j + 1]);
    }
  inputs.buffer->mark_modified();
  targets.buffer->mark_modified();
}

void TextWindows::fill_random(uint64_t step, int64_t batch, HostTensor& inputs, HostTensor& targets,
                              int64_t first_row) const {
  if (batch < 1) throw Error("TextWindows: batch must be >= 1, got " + std::to_string(batch));
  if (first_row < 0) throw Error("TextWindows: first row must be >= 0, got " + std::to_string(first_row));
  std::vector<int64_t> starts(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r) starts[size_t(r)] = window_start(step, first_row + r);
  fill_rows(starts, inputs, targets);
}

int64_t TextWindows::sequential_windows() const { return (int64_t(tokens_->size()) - 1) / context_; }

void TextWindows::fill_sequential(int64_t b, int64_t batch, HostTensor& inputs, HostTensor& targets) const {
  if (batch < 1) throw Error("TextWindows: batch must be >= 1, got " + std::to_string(batch));
  const int64_t total = sequential_windows(), first = b * batch;
  if (b < 0 || first >= total)
    throw Error("TextWindows: sequential batch " + std::to_string(b) + " out of range (" +
                std::to_string(total) + " windows, batch " + std::to_string(batch) + ")");
  std::vector<int64_t> starts;
  for (int64_t w = first; w < std::min(total, first + batch); ++w) starts.push_back(w * context_);
  fill_rows(starts, inputs, targets);
}

}  // namespace synoros::data
