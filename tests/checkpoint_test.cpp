// safetensors checkpoints: bit-exact round trips, the on-disk layout, load_into's checks, atomic
// saves, malformed and fuzzed files, and interchange with Python (struct/json, and torch).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "synoros/checkpoint.hpp"

namespace synoros::io {
namespace {
using synoros::testing::expect_error;
using synoros::testing::TempDir;
namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream i(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(i), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// A safetensors file from a header text and data bytes; `len` overrides the length field.
std::vector<uint8_t> st_bytes(const std::string& header, const std::vector<uint8_t>& data,
                              std::optional<uint64_t> len = std::nullopt) {
  std::vector<uint8_t> v;
  const uint64_t n = len.value_or(header.size());
  for (int i = 0; i < 8; ++i) v.push_back(uint8_t(n >> (8 * i)));
  v.insert(v.end(), header.begin(), header.end());
  v.insert(v.end(), data.begin(), data.end());
  return v;
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.bytes() == b.bytes() &&
         (a.bytes() == 0 || std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes()) == 0);
}

// Tensors of every dtype with awkward values: NaN payloads, -0, infinities, integer extremes,
// plus an empty and a 0-d tensor.
std::map<std::string, HostTensor> sample_tensors() {
  std::map<std::string, HostTensor> m;
  HostTensor f(DType::F32, {2, 3});
  const uint32_t nan_bits = 0x7FC01234u;
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  const float fv[] = {1.5f, -0.0f, std::numeric_limits<float>::infinity(), nan, 1e-45f, -3.25e38f};
  std::memcpy(f.data<float>(), fv, sizeof fv);
  m["layer.weight"] = f;
  HostTensor d(DType::F64, {4});
  for (int i = 0; i < 4; ++i) d.data<double>()[i] = 1.0 / (i + 3) - 1e300 * (i == 3);
  m["layer.bias64"] = d;
  HostTensor i32(DType::I32, {3});
  const int32_t iv[] = {std::numeric_limits<int32_t>::min(), -1, std::numeric_limits<int32_t>::max()};
  std::memcpy(i32.data<int32_t>(), iv, sizeof iv);
  m["counts"] = i32;
  HostTensor i64(DType::I64, {1, 2});
  i64.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  i64.data<int64_t>()[1] = int64_t(1) << 62;
  m["step"] = i64;
  m["empty"] = HostTensor(DType::F32, {0, 5});
  HostTensor s(DType::F64, {});
  s.data<double>()[0] = -2.5;
  m["scalar"] = s;
  return m;
}

TEST(CheckpointSafetensors, RoundTripIsBitExactForAllDtypes) {
  TempDir dir("roundtrip");
  const std::string p = dir.file("a.safetensors");
  auto m = sample_tensors();
  save_safetensors(p, m, {{"epoch", "3"}, {"note", "héllo \"quoted\""}});
  Checkpoint c = load_safetensors(p);
  ASSERT_EQ(c.tensors.size(), m.size());
  for (const auto& [name, t] : m) {
    ASSERT_TRUE(c.tensors.count(name)) << name;
    EXPECT_TRUE(same_bits(c.tensors.at(name), t)) << name;
  }
  EXPECT_EQ(c.metadata.at("epoch"), "3");
  EXPECT_EQ(c.metadata.at("note"), "héllo \"quoted\"");
  EXPECT_EQ(c.metadata.at(kFormatKey), kFormatVersion);
  EXPECT_FALSE(fs::exists(p + ".tmp." + std::to_string(::getpid())));

  // No tensors at all is a valid checkpoint too.
  save_safetensors(p, std::map<std::string, HostTensor>{});
  EXPECT_TRUE(load_safetensors(p).tensors.empty());
}

TEST(CheckpointSafetensors, FileLayoutFollowsTheFormat) {
  TempDir dir("layout");
  const std::string p = dir.file("a.safetensors");
  auto m = sample_tensors();
  save_safetensors(p, m);
  std::vector<uint8_t> b = read_bytes(p);
  ASSERT_GE(b.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | b[size_t(i)];
  EXPECT_EQ((8 + n) % 8, 0u);
  std::string header(b.begin() + 8, b.begin() + 8 + std::ptrdiff_t(n));
  EXPECT_EQ(header.front(), '{');
  auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"][kFormatKey], "1");
  uint64_t expect_begin = 0;
  for (const auto& [name, t] : m) {  // std::map: name order
    const auto& e = json.at(name);
    EXPECT_EQ(e["dtype"], safetensors_dtype(t.dtype));
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.shape);
    EXPECT_EQ(e["data_offsets"][0].get<uint64_t>(), expect_begin) << name;
    expect_begin += t.bytes();
    EXPECT_EQ(e["data_offsets"][1].get<uint64_t>(), expect_begin) << name;
  }
  EXPECT_EQ(b.size(), 8 + n + expect_begin);
  // Raw little-endian data: the scalar -2.5 (F64) sits at its offset.
  const uint64_t at = 8 + n + json["scalar"]["data_offsets"][0].get<uint64_t>();
  double v;
  std::memcpy(&v, b.data() + at, 8);
  EXPECT_EQ(v, -2.5);
}

TEST(CheckpointSafetensors, LoadIntoChecksNamesShapesDtypesAndVersion) {
  TempDir dir("into");
  const std::string p = dir.file("m.safetensors");
  HostTensor w(DType::F32, {2, 3}), b(DType::F32, {3});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = float(i) + 0.5f;
  for (int i = 0; i < 3; ++i) b.data<float>()[i] = -float(i);
  save_safetensors(p, {{"w", &w}, {"b", &b}}, {{"step", "17"}});

  HostTensor w2(DType::F32, {2, 3}), b2(DType::F32, {3});
  const void* wbuf = w2.buffer->data();
  const uint64_t v0 = w2.buffer->version();
  Metadata md = load_into(p, {{"w", &w2}, {"b", &b2}});
  EXPECT_EQ(md.at("step"), "17");
  EXPECT_TRUE(same_bits(w, w2));
  EXPECT_TRUE(same_bits(b, b2));
  EXPECT_EQ(w2.buffer->data(), wbuf);  // in place
  EXPECT_GT(w2.buffer->version(), v0);

  HostTensor fresh(DType::F32, {2, 3}), extra(DType::F32, {1});
  expect_error([&] { load_into(p, {{"w", &fresh}}); }, {p, "unexpected tensor", "'b'"});
  expect_error([&] { load_into(p, {{"w", &fresh}, {"b", &b2}, {"c", &extra}}); }, {p, "missing tensor", "'c'"});
  HostTensor wrong_shape(DType::F32, {3, 2});
  expect_error([&] { load_into(p, {{"w", &wrong_shape}, {"b", &b2}}); }, {p, "'w'", "[2,3]", "[3,2]"});
  HostTensor wrong_dtype(DType::F64, {2, 3});
  expect_error([&] { load_into(p, {{"w", &wrong_dtype}, {"b", &b2}}); }, {p, "'w'", "f32", "f64"});
  expect_error([&] { load_into(p, {{"w", &fresh}, {"w", &fresh}}); }, {"given twice"});
  // A failed load_into writes nothing, even to the targets that matched.
  HostTensor b3(DType::F32, {3});
  expect_error([&] { load_into(p, {{"w", &wrong_shape}, {"b", &b3}}); }, {"shape"});
  EXPECT_EQ(b3.data<float>()[2], 0.0f);

  // A file from a newer format version is refused by load_into (load_safetensors reads it).
  const std::string q = dir.file("v2.safetensors");
  write_bytes(q, st_bytes(R"({"__metadata__":{"synoros.format":"2"},"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                          {7, 0, 0, 0}));
  HostTensor x(DType::I32, {1});
  expect_error([&] { load_into(q, {{"x", &x}}); }, {q, "synoros.format", "'2'"});
  EXPECT_EQ(load_safetensors(q).tensors.at("x").data<int32_t>()[0], 7);
  expect_error([&] { save_safetensors(q, {{"x", &x}}, {{"synoros.format", "2"}}); }, {"conflicts"});
}

TEST(CheckpointSafetensors, FailedSaveKeepsTheExistingFile) {
  TempDir dir("atomic");
  const std::string p = dir.file("keep.safetensors");
  auto m = sample_tensors();
  save_safetensors(p, m);
  const std::vector<uint8_t> before = read_bytes(p);

  // An invalid tensor (no buffer) is refused before anything is written.
  HostTensor broken;
  broken.shape = {4};
  expect_error([&] { save_safetensors(p, {{"a", &m.at("counts")}, {"broken", &broken}}); }, {p, "'broken'", "no buffer"});
  expect_error([&] { save_safetensors(p, {{"a", &m.at("counts")}, {"a", &m.at("step")}}); }, {"'a' given twice"});
  expect_error([&] { save_safetensors(p, {{"", &m.at("counts")}}); }, {"empty name"});
  expect_error([&] { save_safetensors(p, {{"__metadata__", &m.at("counts")}}); }, {"__metadata__"});
  EXPECT_EQ(read_bytes(p), before);

  // The temporary cannot be created (a directory squats on its name; works even as root).
  const std::string tmp = p + ".tmp." + std::to_string(::getpid());
  fs::create_directory(tmp);
  expect_error([&] { save_safetensors(p, m); }, {p, "cannot create", tmp});
  fs::remove(tmp);
  EXPECT_EQ(read_bytes(p), before);

  // A directory in the target's place is refused before a temporary is made.
  const std::string dir_target = dir.file("occupied");
  fs::create_directories(fs::path(dir_target) / "inside");
  expect_error([&] { save_safetensors(dir_target, m); }, {dir_target, "not a regular file", "a directory"});
  EXPECT_FALSE(fs::exists(dir_target + ".tmp." + std::to_string(::getpid())));
  EXPECT_TRUE(fs::is_directory(fs::path(dir_target) / "inside"));

  // A FIFO (or a device) in the target's place is refused and left as it was.
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error([&] { save_safetensors(fifo, m); }, {fifo, "not a regular file", "a FIFO"});
  EXPECT_TRUE(fs::is_fifo(fifo));

  // A symbolic link is written through: the file it names is replaced, the link stays.
  const std::string real = dir.file("real.safetensors"), link = dir.file("link.safetensors");
  save_safetensors(real, {{"a", &m.at("counts")}});
  fs::create_symlink(real, link);
  save_safetensors(link, m);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_bytes(real), before);
  // A relative link, through a second link, from another working directory.
  fs::create_directory(dir.path / "sub");
  fs::create_symlink("../real.safetensors", dir.path / "sub" / "rel.safetensors");
  fs::create_symlink("sub/rel.safetensors", dir.path / "chain.safetensors");
  save_safetensors(real, {{"a", &m.at("counts")}});
  save_safetensors(dir.file("chain.safetensors"), m);
  EXPECT_TRUE(fs::is_symlink(dir.path / "chain.safetensors"));
  EXPECT_TRUE(fs::is_symlink(dir.path / "sub" / "rel.safetensors"));
  EXPECT_EQ(read_bytes(real), before);
  // Another user's link in a sticky directory anyone can write to is not followed (root can make one).
  if (::geteuid() == 0) {
    const fs::path shared = dir.path / "shared";
    fs::create_directory(shared);
    fs::permissions(shared, fs::perms::all | fs::perms::sticky_bit);
    const fs::path theirs = shared / "theirs.safetensors";
    fs::create_symlink(real, theirs);
    ASSERT_EQ(::lchown(theirs.c_str(), 65534, 65534), 0);
    expect_error([&] { save_safetensors(theirs.string(), m); }, {"another user's symbolic link", "not followed"});
  }
  // A dangling link creates the file it names.
  const std::string gone = dir.file("gone.safetensors"), dangling = dir.file("dangling.safetensors");
  fs::create_symlink(gone, dangling);
  save_safetensors(dangling, m);
  EXPECT_TRUE(fs::is_symlink(dangling));
  EXPECT_EQ(read_bytes(gone), before);

  // A read-only directory refuses the temporary (unless we are root, who may write anyway).
  if (::geteuid() != 0) {
    fs::path ro = dir.path / "ro";
    fs::create_directory(ro);
    const std::string rp = (ro / "c.safetensors").string();
    save_safetensors(rp, m);
    const std::vector<uint8_t> ro_before = read_bytes(rp);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    expect_error([&] { save_safetensors(rp, {{"x", &m.at("scalar")}}); }, {rp, "cannot create"});
    fs::permissions(ro, fs::perms::owner_all);
    EXPECT_EQ(read_bytes(rp), ro_before);
  }
  Checkpoint c = load_safetensors(p);
  EXPECT_TRUE(same_bits(c.tensors.at("step"), m.at("step")));
}

TEST(CheckpointSafetensors, RejectsMalformedFiles) {
  TempDir dir("malformed");
  const std::string p = dir.file("bad.safetensors");
  auto check = [&](const std::vector<uint8_t>& bytes, const std::string& fragment) {
    write_bytes(p, bytes);
    expect_error([&] { load_safetensors(p); }, {p, fragment});
  };
  const std::vector<uint8_t> d8(8, 1);
  auto one = [](const std::string& body) { return std::string(R"({"t":)") + body + "}"; };
  check({}, "shorter than the 8-byte");
  check({1, 0, 0}, "shorter than the 8-byte");
  check(st_bytes("{}", {}, uint64_t(1) << 40), "exceeds the limit");
  check(st_bytes("{}", {}, 50), "only 2 bytes follow");
  check(st_bytes("{\"t\": ", {}), "not valid JSON");
  check(st_bytes("[1,2]", {}), "not a JSON object");
  check(st_bytes("\"x\"", {}), "not a JSON object");
  check(st_bytes(R"({"__metadata__":[1]})", {}), "__metadata__ is not an object");
  check(st_bytes(R"({"__metadata__":{"a":1}})", {}), "metadata value of 'a'");
  check(st_bytes(one("3"), {}), "not an object");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2]})"), d8), "needs dtype, shape and data_offsets");
  check(st_bytes(one(R"({"dtype":"BF16","shape":[4],"data_offsets":[0,8]})"), d8), "unsupported dtype 'BF16'");
  check(st_bytes(one(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"), d8), "dtype is not a string");
  check(st_bytes(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), d8), "non-negative integer");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), d8), "non-negative integer");
  check(st_bytes(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), d8), "shape is not an array");
  check(st_bytes(one(R"({"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]})"), d8),
        "overflows");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), d8), "reversed");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), d8), "pair of non-negative");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,-8]})"), d8), "pair of non-negative");
  check(st_bytes(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), d8), "truncated");
  check(st_bytes(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), d8), "needs 12");
  check(st_bytes(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1})"), d8), "unexpected field 'extra'");
  check(st_bytes(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), d8), "4 bytes after the last tensor");
  check(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 d8),
        "overlaps");
  check(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), "(gap)");
  check(st_bytes(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8), "empty name");
  expect_error([&] { load_safetensors(dir.file("absent")); }, {"absent", "cannot open"});
  expect_error([&] { load_safetensors(dir.path.string()); }, {dir.path.string(), "is a directory"});
}

// Truncation at every length and byte flips anywhere: an Error or a consistent load, never a crash.
TEST(CheckpointSafetensors, FuzzedFilesNeverCrash) {
  TempDir dir("fuzz");
  const std::string src = dir.file("good.safetensors"), p = dir.file("fuzz.safetensors");
  auto m = sample_tensors();
  save_safetensors(src, m, {{"k", "v"}});
  const std::vector<uint8_t> good = read_bytes(src);
  for (size_t len = 0; len < good.size(); ++len) {
    write_bytes(p, std::vector<uint8_t>(good.begin(), good.begin() + std::ptrdiff_t(len)));
    expect_error([&] { load_safetensors(p); }, {p});
  }
  int loaded = 0, rejected = 0;
  for (size_t pos = 0; pos < good.size(); ++pos)
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xFF)}) {
      std::vector<uint8_t> b = good;
      b[pos] ^= mask;
      write_bytes(p, b);
      try {
        Checkpoint c = load_safetensors(p);
        ++loaded;
        for (const auto& [name, t] : c.tensors) EXPECT_EQ(t.bytes(), size_t(t.numel()) * dtype_size(t.dtype));
      } catch (const Error& e) {
        ++rejected;
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos);
      }
    }
  EXPECT_GT(loaded, 0);    // flips inside tensor data are not detectable by the format
  EXPECT_GT(rejected, 0);  // flips in the length or header structure are
}

// ---------------------------------------------------------------------------------------------
// Interchange with Python. torch 1.13 has no safetensors package: the script parses the format
// itself with struct + json (and torch.frombuffer when torch is asked for).

bool python_has(const std::string& modules) {
  if (!fs::exists("/usr/bin/python3")) return false;
  std::string cmd = "/usr/bin/python3 -c 'import " + modules + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

const char* kPythonReader = R"PY(
import json, math, struct, sys
path, mode = sys.argv[1], sys.argv[2]
if mode == 'torch':
    try:
        import torch
    except ImportError:
        sys.exit(77)  # the test reports a skip
data = open(path, 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
assert (8 + n) % 8 == 0, 'data not 8-byte aligned'
header = json.loads(data[8:8 + n].decode('utf-8'))
meta = header.pop('__metadata__')
assert meta == {'synoros.format': '1', 'origin': 'synoros'}, meta
base = 8 + n
names = sorted(header)
assert [header[k]['data_offsets'][0] for k in names] == sorted(header[k]['data_offsets'][0] for k in names)
fmt = {'F32': 'f', 'F64': 'd', 'I32': 'i', 'I64': 'q'}
def load(name):
    e = header[name]
    b, end = e['data_offsets']
    count = 1
    for d in e['shape']:
        count *= d
    raw = data[base + b:base + end]
    assert len(raw) == count * struct.calcsize(fmt[e['dtype']])
    if mode == 'torch':
        dt = {'F32': torch.float32, 'F64': torch.float64, 'I32': torch.int32, 'I64': torch.int64}[e['dtype']]
        t = torch.frombuffer(bytearray(raw), dtype=dt) if count else torch.empty(0, dtype=dt)
        t = t.reshape(e['shape'])
        assert list(t.shape) == e['shape']
        return e['dtype'], e['shape'], t.flatten().tolist()
    return e['dtype'], e['shape'], list(struct.unpack('<%d%s' % (count, fmt[e['dtype']]), raw))
expect = {
    'w': ('F32', [2, 3], [i * 0.5 - 1 for i in range(6)]),
    'd': ('F64', [4], [1 / (i + 1) for i in range(4)]),
    'k': ('I32', [], [-7]),
    'ids': ('I64', [3], [-(2 ** 40), 0, 2 ** 62]),
    'e': ('F32', [0, 2], []),
}
assert sorted(expect) == names, names
for name, want in expect.items():
    got = load(name)
    assert got == want, (name, got, want)
print('python-read-ok', mode)
)PY";

const char* kPythonWriter = R"PY(
import json, math, struct, sys
tensors = [('a', 'F32', [2, 2], 'f', [1.5, -2.0, 0.25, 3.0]),
           ('b', 'I64', [3], 'q', [-1, 2 ** 40, 7]),
           ('c', 'F64', [], 'd', [math.pi]),
           ('z', 'I32', [2, 0], 'i', [])]
mode = sys.argv[2]
if mode == 'torch':
    try:
        import torch
    except ImportError:
        sys.exit(77)  # the test reports a skip
    tdt = {'F32': torch.float32, 'F64': torch.float64, 'I32': torch.int32, 'I64': torch.int64}
header, blobs, pos = {'__metadata__': {'from': 'python-' + mode}}, [], 0
for name, dt, shape, f, vals in tensors:
    if mode == 'torch':  # the bytes of a torch tensor, viewed as uint8
        t = torch.tensor(vals, dtype=tdt[dt]).reshape(shape).contiguous()
        raw = bytes(t.reshape(-1).view(torch.uint8).tolist())
    else:
        raw = struct.pack('<%d%s' % (len(vals), f), *vals)
    header[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [pos, pos + len(raw)]}
    blobs.append(raw)
    pos += len(raw)
h = json.dumps(header).encode('utf-8')
h += b' ' * ((8 - len(h) % 8) % 8)
with open(sys.argv[1], 'wb') as out:
    out.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))
)PY";

std::map<std::string, HostTensor> python_expected_tensors() {
  std::map<std::string, HostTensor> m;
  HostTensor w(DType::F32, {2, 3});
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = float(i) * 0.5f - 1.0f;
  m["w"] = w;
  HostTensor d(DType::F64, {4});
  for (int i = 0; i < 4; ++i) d.data<double>()[i] = 1.0 / (i + 1);
  m["d"] = d;
  HostTensor k(DType::I32, {});
  k.data<int32_t>()[0] = -7;
  m["k"] = k;
  HostTensor ids(DType::I64, {3});
  ids.data<int64_t>()[0] = -(int64_t(1) << 40);
  ids.data<int64_t>()[2] = int64_t(1) << 62;
  m["ids"] = ids;
  m["e"] = HostTensor(DType::F32, {0, 2});
  return m;
}

// Runs the reader script on a file we wrote; returns false when the script lacks torch.
bool run_python_reader(const std::string& mode) {
  TempDir dir("py_" + mode);
  const std::string p = dir.file("ours.safetensors"), script = dir.file("read.py");
  save_safetensors(p, python_expected_tensors(), {{"origin", "synoros"}});
  std::ofstream(script) << kPythonReader;
  const std::string cmd = "/usr/bin/python3 " + script + " " + p + " " + mode + " > " + dir.file("out.txt") + " 2>&1";
  const int status = std::system(cmd.c_str());
  std::ifstream in(dir.file("out.txt"));
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return false;
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("python-read-ok " + mode), std::string::npos) << out;
  return true;
}

TEST(CheckpointPython, PythonStructReadsOurFile) {
  if (!python_has("json, struct")) GTEST_SKIP() << "/usr/bin/python3 is not available";
  ASSERT_TRUE(run_python_reader("struct"));
}

TEST(CheckpointPython, TorchReadsOurFile) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 is not available";
  if (!run_python_reader("torch")) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
}

// Has the writer script produce a file (struct or torch bytes) and checks what we load from it.
// Returns false when the script lacks torch.
bool check_python_written(const std::string& mode) {
  TempDir dir("pywrite_" + mode);
  const std::string p = dir.file("theirs.safetensors"), script = dir.file("write.py");
  std::ofstream(script) << kPythonWriter;
  const int status = std::system(("/usr/bin/python3 " + script + " " + p + " " + mode).c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return false;
  EXPECT_EQ(status, 0);
  if (status != 0) return true;
  Checkpoint c = load_safetensors(p);
  EXPECT_EQ(c.metadata, (Metadata{{"from", "python-" + mode}}));
  EXPECT_EQ(c.tensors.size(), 4u);
  const HostTensor& a = c.tensors.at("a");
  EXPECT_EQ(a.shape, (Shape{2, 2}));
  EXPECT_EQ(a.dtype, DType::F32);
  const float want_a[] = {1.5f, -2.0f, 0.25f, 3.0f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.data<float>()[i], want_a[i]);
  const HostTensor& b = c.tensors.at("b");
  EXPECT_EQ(b.dtype, DType::I64);
  EXPECT_EQ(b.data<int64_t>()[0], -1);
  EXPECT_EQ(b.data<int64_t>()[1], int64_t(1) << 40);
  EXPECT_EQ(b.data<int64_t>()[2], 7);
  EXPECT_EQ(c.tensors.at("c").shape, Shape{});
  EXPECT_EQ(c.tensors.at("c").data<double>()[0], std::numbers::pi);
  EXPECT_EQ(c.tensors.at("z").shape, (Shape{2, 0}));
  EXPECT_EQ(c.tensors.at("z").dtype, DType::I32);
  // And into a model's tensors (no version key: a foreign file is accepted).
  HostTensor ta(DType::F32, {2, 2}), tb(DType::I64, {3}), tc(DType::F64, {}), tz(DType::I32, {2, 0});
  load_into(p, {{"a", &ta}, {"b", &tb}, {"c", &tc}, {"z", &tz}});
  EXPECT_TRUE(same_bits(ta, a));
  EXPECT_TRUE(same_bits(tb, b));
  EXPECT_EQ(tc.data<double>()[0], std::numbers::pi);
  return true;
}

TEST(CheckpointPython, WeReadAPythonStructWrittenFile) {
  if (!python_has("json, struct")) GTEST_SKIP() << "/usr/bin/python3 is not available";
  ASSERT_TRUE(check_python_written("struct"));
}

TEST(CheckpointPython, WeReadATorchWrittenFile) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 is not available";
  if (!check_python_written("torch")) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
}

}  // namespace
}  // namespace synoros::io

namespace synoros::io {
namespace {

TEST(CheckpointTensors, ParametersRoundTripInPlace) {
  TempDir dir("tensors");
  const std::string p = dir.file("params.safetensors");
  Tensor w = Tensor::randn({3, 4}, 11);
  w.requires_grad();
  Tensor b = Tensor::uniform({4}, 12, 0.5);
  save_safetensors(p, {{"fc.weight", w}, {"fc.bias", b}}, {{"epoch", "1"}});

  Tensor w2 = Tensor::zeros({3, 4}), b2 = Tensor::zeros({4});
  w2.requires_grad();
  const Tensor before = (w2 * 2.0).sum();  // a value computed from the old parameters
  EXPECT_EQ(before.item(), 0.0);
  Metadata md = load_into(p, {{"fc.weight", w2}, {"fc.bias", b2}});
  EXPECT_EQ(md.at("epoch"), "1");
  EXPECT_EQ(w2.to_vector(), w.to_vector());
  EXPECT_EQ(b2.to_vector(), b.to_vector());
  // A computation built afterwards sees the loaded values.
  EXPECT_FLOAT_EQ(float((w2 * 2.0).sum().item()), float((w * 2.0).sum().item()));

  Tensor derived = w2 * 2.0;
  expect_error([&] { load_into(p, {{"fc.weight", derived}, {"fc.bias", b2}}); }, {"'fc.weight'", "realized leaf"});
  expect_error([&] { load_into(p, {{"fc.weight", Tensor()}, {"fc.bias", b2}}); }, {"realized leaf"});
}

}  // namespace
}  // namespace synoros::io
