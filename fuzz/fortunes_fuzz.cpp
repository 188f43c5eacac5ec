// Fuzz target: fortune files. The input is one file; split in memory and read from a file, the
// fortunes must be the same, and each must be non-empty, end with a newline and hold no
// separator line.
#include "data/parsers.hpp"
#include "fuzz_util.hpp"

using namespace synoros;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::text_of(data, size);
  std::vector<std::string> fortunes = data::split_fortunes(text);
  fuzz::MemFile file(text);
  try {
    if (data::read_fortune_file(file.path()) != fortunes) fuzz::fail("file and memory reads differ");
  } catch (const Error& e) {
    fuzz::fail(std::string("a readable file was refused: ") + e.what());
  }
  size_t bytes = 0;
  for (const std::string& f : fortunes) {
    if (f.empty() || f.back() != '\n') fuzz::fail("a fortune is empty or lacks its final newline");
    size_t pos = 0;
    while (pos < f.size()) {
      size_t eol = f.find('\n', pos);
      std::string_view line(f.data() + pos, eol - pos);
      if (line == "%" || line == "%\r") fuzz::fail("a fortune holds a separator line");
      pos = eol + 1;
    }
    bytes += f.size() - 1;  // at most the final newline is added
  }
  if (bytes > size) fuzz::fail("the fortunes hold more bytes than the file");
  return 0;
}
