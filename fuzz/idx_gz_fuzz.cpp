// Fuzz target: gzip'd IDX files as read_idx_gz reads them from disk. The input is the
// compressed file, so this reaches zlib's error paths (bad headers, corrupt or truncated
// streams, trailing garbage, concatenated members) as well as the IDX checks behind them.
#include "fuzz_util.hpp"
#include "synoros/data.hpp"

using namespace synoros;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::MemFile file(fuzz::text_of(data, size));
  for (uint32_t magic : {2051u, 2049u}) {
    try {
      data::IdxArray a = data::read_idx_gz(file.path(), magic, size % 2 ? std::optional<int64_t>(2) : std::nullopt);
      if (a.dims.empty() || a.items > a.dims[0]) fuzz::fail("inconsistent item count");
    } catch (const Error&) {
    }
  }
  return 0;
}
