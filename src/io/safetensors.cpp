// safetensors reading and writing. The header is parsed with nlohmann::json (no exceptions
// escape: every failure becomes synoros::Error naming the file); all offsets and sizes are
// checked against the file before a byte of tensor data is read.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "synoros/checkpoint.hpp"

namespace synoros::io {

// Tensor bytes go to and from the file as they sit in memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

using nlohmann::json;

namespace {

// The header may not exceed this (safetensors' own limit is 100 MB).
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;
constexpr uint64_t kMaxDim = uint64_t(1) << 53;

std::string squote(const std::string& s) { return "'" + s + "'"; }

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::F32;
  else if (s == "F64") out = DType::F64;
  else if (s == "I32") out = DType::I32;
  else if (s == "I64") out = DType::I64;
  else return false;
  return true;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;  // sorted by begin offset
  Metadata metadata;
  uint64_t data_start = 0;      // 8 + header length
};

// The bytes of a safetensors file: an open file or a buffer in memory. read() copies n bytes
// starting at `at` (within size) and returns false on a read error.
struct Source {
  uint64_t size = 0;
  std::function<bool(uint64_t at, void* dst, size_t n)> read;
};

Header parse_header(const std::string& path, const Source& src) {
  auto fail = [&](const std::string& why) -> Error { return Error("safetensors file " + path + ": " + why); };
  const uint64_t file_size = src.size;
  if (file_size < 8) throw fail("truncated: " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length");
  unsigned char lenbuf[8];
  if (!src.read(0, lenbuf, 8)) throw fail("cannot read the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | lenbuf[i];
  if (n > kMaxHeader) throw fail("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeader));
  if (n > file_size - 8)
    throw fail("truncated: header length " + std::to_string(n) + " but only " + std::to_string(file_size - 8) +
               " bytes follow");
  std::string text(size_t(n), '\0');
  if (n > 0 && !src.read(8, text.data(), size_t(n))) throw fail("cannot read the header");

  json h = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) throw fail("header is not valid JSON");
  if (!h.is_object()) throw fail("header is not a JSON object");

  Header out;
  out.data_start = 8 + n;
  const uint64_t data_len = file_size - out.data_start;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw fail("metadata value of " + squote(m.key()) + " is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor " + squote(name) + ": ";
    if (name.empty()) throw fail("tensor with an empty name");
    if (!v.is_object()) throw fail(t + "entry is not an object");
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        throw fail(t + "unexpected field " + squote(k.key()));
    auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end()) throw fail(t + "needs dtype, shape and data_offsets");
    Entry e;
    e.name = name;
    if (!dt->is_string()) throw fail(t + "dtype is not a string");
    if (!parse_dtype(dt->get<std::string>(), e.dtype))
      throw fail(t + "unsupported dtype " + squote(dt->get<std::string>()) + " (supported: F32, F64, I32, I64)");
    if (!sh->is_array()) throw fail(t + "shape is not an array");
    // The product of the non-zero dims is bounded even when another dim is zero: the engine
    // multiplies every dim of a shape (numel), so [2^53, 2^53, 0] would overflow there.
    uint64_t count = 1, nonzero = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) throw fail(t + "shape holds something other than a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > kMaxDim) throw fail(t + "dimension " + std::to_string(dim) + " is implausibly large");
      e.shape.push_back(int64_t(dim));
      if (dim == 0) {
        count = 0;
      } else if (nonzero > std::numeric_limits<uint64_t>::max() / 8 / dim) {
        overflow = true;
      } else {
        nonzero *= dim;
        count *= dim;
      }
    }
    if (overflow) throw fail(t + "shape " + shape_str(e.shape) + " overflows");
    if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      throw fail(t + "data_offsets is not a pair of non-negative integers");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    if (e.begin > e.end)
      throw fail(t + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] are reversed");
    if (e.end > data_len)
      throw fail("truncated: tensor " + squote(name) + " ends at data offset " + std::to_string(e.end) +
                 " but the data section holds " + std::to_string(data_len) + " bytes");
    const uint64_t want = count * dtype_size(e.dtype);
    if (e.end - e.begin != want)
      throw fail(t + "holds " + std::to_string(e.end - e.begin) + " bytes but " + dtype_name(e.dtype) + " " +
                 shape_str(e.shape) + " needs " + std::to_string(want));
    out.entries.push_back(std::move(e));
  }
  // Like safetensors itself: the tensors tile the data section exactly, without gaps or overlaps.
  std::sort(out.entries.begin(), out.entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const Entry& e : out.entries) {
    if (e.begin != pos)
      throw fail("tensor " + squote(e.name) + " starts at data offset " + std::to_string(e.begin) + ", expected " +
                 std::to_string(pos) + (e.begin < pos ? " (overlaps the previous tensor)" : " (gap)"));
    pos = e.end;
  }
  if (pos != data_len)
    throw fail(std::to_string(data_len - pos) + " bytes after the last tensor (expected the data section to end at " +
               std::to_string(pos) + ")");
  return out;
}

Checkpoint load_from(const std::string& path, const Source& src) {
  Header h = parse_header(path, src);
  Checkpoint c;
  c.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {
    HostTensor t(e.dtype, e.shape);
    if (t.bytes() > 0 && !src.read(h.data_start + e.begin, t.buffer->data(), t.bytes()))
      throw Error("safetensors file " + path + ": cannot read the data of tensor " + squote(e.name));
    c.tensors.emplace(e.name, std::move(t));
  }
  return c;
}

}  // namespace

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, const HostTensor*>>& tensors_in,
                      const Metadata& metadata) {
  auto fail = [&](const std::string& why) -> Error { return Error("save_safetensors " + path + ": " + why); };
  std::vector<std::pair<std::string, const HostTensor*>> tensors = tensors_in;
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty()) throw fail("tensor with an empty name");
    if (name == "__metadata__") throw fail("a tensor may not be called __metadata__");
    if (i > 0 && tensors[i - 1].first == name) throw fail("tensor " + squote(name) + " given twice");
    if (!t) throw fail("tensor " + squote(name) + " is null");
    for (int64_t d : t->shape)
      if (d < 0) throw fail("tensor " + squote(name) + " has negative dimension in shape " + shape_str(t->shape));
    if (!t->buffer || t->buffer->bytes() < t->bytes())
      throw fail("tensor " + squote(name) + " (" + dtype_name(t->dtype) + " " + shape_str(t->shape) +
                 ") has no buffer of " + std::to_string(t->bytes()) + " bytes");
  }
  auto ver = metadata.find(kFormatKey);
  if (ver != metadata.end() && ver->second != kFormatVersion)
    throw fail(std::string("metadata ") + kFormatKey + " = " + squote(ver->second) + " conflicts with the version written, " +
               kFormatVersion);

  std::string text;
  try {
    json h = json::object();
    json meta = json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    meta[kFormatKey] = kFormatVersion;
    h["__metadata__"] = meta;
    uint64_t pos = 0;
    for (const auto& [name, t] : tensors) {
      json e = json::object();
      e["dtype"] = safetensors_dtype(t->dtype);
      e["shape"] = json::array();
      for (int64_t d : t->shape) e["shape"].push_back(d);
      e["data_offsets"] = json::array({pos, pos + t->bytes()});
      pos += t->bytes();
      h[name] = std::move(e);
    }
    text = h.dump();
  } catch (const json::exception& e) {
    throw fail(std::string("cannot encode the header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  write_file_atomic(path, "save_safetensors", [&](const ByteSink& sink) {
    unsigned char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(n >> (8 * i));
    sink(len, 8);
    sink(text.data(), text.size());
    for (const auto& [name, t] : tensors)
      if (t->bytes() > 0) sink(t->buffer->data(), t->bytes());
  });
}

void save_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors,
                      const Metadata& metadata) {
  std::vector<std::pair<std::string, const HostTensor*>> v;
  for (const auto& [name, t] : tensors) v.emplace_back(name, &t);
  save_safetensors(path, v, metadata);
}

Checkpoint load_safetensors(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error("safetensors file " + path + ": is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("safetensors file " + path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw Error("safetensors file " + path + ": cannot determine its size");
  Source src{uint64_t(size), [&](uint64_t at, void* dst, size_t n) {
               in.seekg(std::streamoff(at));
               return bool(in.read(static_cast<char*>(dst), std::streamsize(n)));
             }};
  return load_from(path, src);
}

Checkpoint parse_safetensors(const std::string& name, std::string_view bytes) {
  Source src{bytes.size(), [&](uint64_t at, void* dst, size_t n) {
               if (at > bytes.size() || n > bytes.size() - at) return false;
               std::memcpy(dst, bytes.data() + at, n);
               return true;
             }};
  return load_from(name, src);
}

Metadata load_into(const std::string& path, const std::vector<std::pair<std::string, HostTensor*>>& targets) {
  auto fail = [&](const std::string& why) -> Error { return Error("load_into " + path + ": " + why); };
  std::set<std::string> seen;
  for (const auto& [name, t] : targets) {
    if (!seen.insert(name).second) throw fail("target " + squote(name) + " given twice");
    if (!t || !t->buffer || t->buffer->bytes() < t->bytes()) throw fail("target " + squote(name) + " has no buffer");
  }
  Checkpoint c = load_safetensors(path);
  auto ver = c.metadata.find(kFormatKey);
  if (ver != c.metadata.end() && ver->second != kFormatVersion)
    throw fail(std::string("unsupported ") + kFormatKey + " version " + squote(ver->second) + " (this build reads " +
               kFormatVersion + ")");
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : targets)
    if (!c.tensors.count(name)) missing.push_back(name);
  for (const auto& [name, t] : c.tensors)
    if (!seen.count(name)) unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + squote(x);
    return s;
  };
  if (!missing.empty()) throw fail("missing tensor(s) " + join(missing));
  if (!unexpected.empty()) throw fail("unexpected tensor(s) " + join(unexpected));
  for (const auto& [name, t] : targets) {
    const HostTensor& src = c.tensors.at(name);
    if (src.dtype != t->dtype)
      throw fail("tensor " + squote(name) + " is " + dtype_name(src.dtype) + " in the file but " + dtype_name(t->dtype) +
                 " in the model");
    if (src.shape != t->shape)
      throw fail("tensor " + squote(name) + " has shape " + shape_str(src.shape) + " in the file but " +
                 shape_str(t->shape) + " in the model");
  }
  for (const auto& [name, t] : targets) {
    const HostTensor& src = c.tensors.at(name);
    if (src.bytes() > 0) std::memcpy(t->buffer->data(), src.buffer->data(), src.bytes());
    t->buffer->mark_modified();
  }
  return c.metadata;
}

}  // namespace synoros::io
