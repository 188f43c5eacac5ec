// Fuzz target: IDX arrays (the MNIST container). The input is an uncompressed IDX file; the
// expected magic is taken from the input itself so that every rank is reachable. It is parsed
// from memory with and without an item limit, and read_idx_gz must give the same on its gzip'd
// form.
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "data/parsers.hpp"
#include "fuzz_util.hpp"

using namespace synoros;

namespace {

// gzip container (windowBits 16 + 15) around the input.
std::string gzip(std::string_view raw) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) fuzz::fail("deflateInit2");
  std::string out(deflateBound(&z, uLong(raw.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = uInt(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) fuzz::fail("deflate");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Outcome {
  data::IdxArray array;
  std::string error;
};

Outcome parse_memory(const std::string& name, std::string_view raw, uint32_t magic, std::optional<int64_t> limit) {
  size_t pos = 0;
  auto read = [&](void* dst, size_t n) {
    const size_t take = std::min(n, raw.size() - pos);
    if (take > 0) std::memcpy(dst, raw.data() + pos, take);
    pos += take;
    return take;
  };
  Outcome o;
  try {
    o.array = data::parse_idx(name, read, magic, limit);
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

void check(const Outcome& o, std::optional<int64_t> limit) {
  if (!o.error.empty()) return;
  const data::IdxArray& a = o.array;
  if (a.dims.empty() || a.items < 0 || a.items > a.dims[0] || (limit && a.items > *limit))
    fuzz::fail("inconsistent item count");
  if (a.dims[0] == 0) {
    if (!a.data.empty()) fuzz::fail("an empty array holds data");
    return;
  }
  int64_t item = 1;  // the whole payload fits in memory, so no product overflows here
  for (size_t i = 1; i < a.dims.size(); ++i) item *= a.dims[i];
  if (int64_t(a.data.size()) != a.items * item) fuzz::fail("payload size does not match the dims");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view raw = fuzz::text_of(data, size);
  uint32_t magic = 2051;
  if (size >= 4) magic = uint32_t(data[0]) << 24 | uint32_t(data[1]) << 16 | uint32_t(data[2]) << 8 | data[3];
  const std::optional<int64_t> limit = size > 0 ? std::optional<int64_t>(data[size - 1] % 4) : std::nullopt;

  fuzz::MemFile file(gzip(raw));
  const Outcome whole = parse_memory(file.path(), raw, magic, std::nullopt);
  const Outcome part = parse_memory(file.path(), raw, magic, limit);
  check(whole, std::nullopt);
  check(part, limit);
  if (whole.error.empty() != part.error.empty()) fuzz::fail("a limit changed whether the file is valid");

  // The gzip'd file gives the same array or the same error.
  std::string gz_error;
  try {
    data::IdxArray a = data::read_idx_gz(file.path(), magic, limit);
    if (a.dims != part.array.dims || a.items != part.array.items || a.data != part.array.data)
      fuzz::fail("read_idx_gz and parse_idx disagree");
  } catch (const Error& e) {
    gz_error = e.what();
  }
  if (gz_error != part.error) fuzz::fail("read_idx_gz fails with '" + gz_error + "', parse_idx with '" + part.error + "'");
  return 0;
}
