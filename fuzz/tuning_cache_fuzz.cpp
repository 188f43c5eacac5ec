// Fuzz target: the kernel tuning cache file. The first byte chooses the mode: odd, the rest is
// the file as it is (mostly refused by the checksum); even, the rest is placed between the
// header line and a correct checksum line, so that the entry lines are what gets parsed. What
// parses must serialize to text that parses to the same entries.
#include <cstdio>

#include "fuzz_util.hpp"
#include "kernels/providers.hpp"

using namespace synoros;

namespace {

// FNV-1a, as the cache file's checksum line (see providers.hpp).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool wrap = data[0] % 2 == 0;
  std::string text(fuzz::text_of(data + 1, size - 1));
  if (wrap) {
    text = "synoros-tuning-cache 1\n" + text;
    char sum[40];
    std::snprintf(sum, sizeof(sum), "checksum %016llx\n", static_cast<unsigned long long>(fnv1a(text)));
    text += sum;
  }
  std::map<std::string, kernels::TuningEntry> entries;
  std::string why;
  if (!kernels::parse_tuning_cache(text, entries, why)) {
    if (why.empty()) fuzz::fail("a refused cache without a reason");
    if (wrap && why != "malformed line") fuzz::fail("a correctly summed cache refused for: " + why);
    return 0;
  }
  std::map<std::string, kernels::TuningEntry> again;
  if (!kernels::parse_tuning_cache(kernels::serialize_tuning_cache(entries), again, why))
    fuzz::fail("a serialized cache does not parse: " + why);
  if (again.size() != entries.size()) fuzz::fail("the round trip changes the entries");
  for (const auto& [k, e] : entries) {
    auto it = again.find(k);
    if (it == again.end() || it->second.provider != e.provider || it->second.version != e.version)
      fuzz::fail("the round trip changes entry " + k);
  }
  return 0;
}
