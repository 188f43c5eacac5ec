// gzip'd IDX files: big-endian magic and dimensions, then unsigned bytes. Everything is checked
// (gzip integrity, magic, dimensions, exact payload length); failures name the file and cause.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "data/parsers.hpp"
#include "synoros/data.hpp"

namespace synoros::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Sanity bound on the payload an IDX header may announce (the largest MNIST-like file is 47 MB).
constexpr int64_t kMaxPayload = int64_t(1) << 32;

class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    f_.reset(gzopen(path.c_str(), "rb"));
    if (!f_) {
      std::string why = errno ? std::strerror(errno) : "gzopen failed";
      throw Error("IDX file " + path + ": cannot open: " + why);
    }
    gzbuffer(f_.get(), 1 << 17);
  }

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    auto* p = static_cast<unsigned char*>(dst);
    while (got < n) {
      unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
      int r = gzread(f_.get(), p + got, chunk);
      if (r < 0) fail_zlib();
      if (!checked_direct_) {
        checked_direct_ = true;
        // zlib passes non-gzip input through unchanged; an IDX file here must be compressed.
        if (gzdirect(f_.get())) throw Error("IDX file " + path_ + ": not a gzip file");
      }
      if (r == 0) {
        int err = Z_OK;
        gzerror(f_.get(), &err);
        if (err != Z_OK) fail_zlib();
        break;
      }
      got += size_t(r);
    }
    return got;
  }

  [[noreturn]] void fail_zlib() {
    int err = Z_OK;
    const char* msg = gzerror(f_.get(), &err);
    std::string why = msg && *msg ? msg : "zlib error " + std::to_string(err);
    if (why.starts_with(path_ + ": ")) why.erase(0, path_.size() + 2);  // zlib prefixes the path
    if (err == Z_BUF_ERROR) why = "truncated gzip stream (" + why + ")";
    else if (err == Z_DATA_ERROR) why = "corrupt gzip data (" + why + ")";
    else if (err == Z_ERRNO) why = std::string("read error: ") + std::strerror(errno);
    throw Error("IDX file " + path_ + ": " + why);
  }

 private:
  std::string path_;
  GzFile f_;
  bool checked_direct_ = false;
};

uint32_t be32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

}  // namespace

IdxArray parse_idx(const std::string& path, const ByteReader& read, uint32_t expected_magic,
                   std::optional<int64_t> limit) {
  if (limit && *limit < 0) throw Error("IDX file " + path + ": negative limit " + std::to_string(*limit));
  unsigned char head[4];
  size_t got = read(head, 4);
  if (got < 4)
    throw Error("IDX file " + path + ": truncated header (" + std::to_string(got) + " of 4 magic bytes)");
  const uint32_t magic = be32(head);
  if (magic != expected_magic)
    throw Error("IDX file " + path + ": bad magic number " + std::to_string(magic) + ", expected " +
                std::to_string(expected_magic));
  // The low byte of the magic is the rank; the third byte is the element type (0x08: ubyte).
  if (((magic >> 8) & 0xFF) != 0x08)
    throw Error("IDX file " + path + ": element type is not unsigned byte");
  const int rank = int(magic & 0xFF);
  if (rank < 1) throw Error("IDX file " + path + ": rank 0");

  IdxArray out;
  // The non-zero dims are bounded too: after a zero dim the total stays 0, but users of the
  // array multiply the other dims (the item size), which must not overflow either.
  int64_t total = 1, nonzero = 1;
  for (int i = 0; i < rank; ++i) {
    unsigned char d[4];
    got = read(d, 4);
    if (got < 4)
      throw Error("IDX file " + path + ": truncated header (dimension " + std::to_string(i) + ")");
    const int64_t dim = be32(d);
    out.dims.push_back(dim);
    if (dim != 0 && nonzero > kMaxPayload / dim)
      throw Error("IDX file " + path + ": header announces an implausible size (dimension " + std::to_string(i) +
                  " takes the product of the dimensions over " + std::to_string(kMaxPayload) + ")");
    if (dim != 0) nonzero *= dim;
    total *= dim;
  }

  const int64_t item = out.dims[0] == 0 ? 0 : total / out.dims[0];
  const int64_t keep_items = limit ? std::min(*limit, out.dims[0]) : out.dims[0];
  const int64_t keep = keep_items * item;
  // Grow as the data arrives so that a lying header cannot make us allocate a lot up front.
  out.data.reserve(size_t(std::min<int64_t>(keep, int64_t(1) << 24)));
  // Chunks of 1 MiB, or less for a small payload (no large buffer to clear for a tiny file).
  std::vector<unsigned char> chunk(size_t(std::clamp<int64_t>(total, 64, int64_t(1) << 20)));
  int64_t done = 0;
  while (done < total) {
    const size_t want = size_t(std::min<int64_t>(total - done, int64_t(chunk.size())));
    got = read(chunk.data(), want);
    if (done < keep) {
      const size_t take = size_t(std::min<int64_t>(int64_t(got), keep - done));
      out.data.insert(out.data.end(), chunk.begin(), chunk.begin() + std::ptrdiff_t(take));
    }
    done += int64_t(got);
    if (got < want)
      throw Error("IDX file " + path + ": truncated payload: header announces " + std::to_string(total) +
                  " bytes, file holds " + std::to_string(done));
  }
  unsigned char extra[64];
  got = read(extra, sizeof extra);
  if (got > 0) {
    int64_t more = int64_t(got);
    while ((got = read(chunk.data(), chunk.size())) > 0) more += int64_t(got);
    throw Error("IDX file " + path + ": " + std::to_string(more) +
                " bytes beyond the payload of " + std::to_string(total) + " bytes the header announces");
  }
  out.items = keep_items;
  return out;
}

IdxArray read_idx_gz(const std::string& path, uint32_t expected_magic, std::optional<int64_t> limit) {
  if (limit && *limit < 0) throw Error("IDX file " + path + ": negative limit " + std::to_string(*limit));
  GzReader in(path);
  return parse_idx(path, [&](void* dst, size_t n) { return in.read(dst, n); }, expected_magic, limit);
}

}  // namespace synoros::data
