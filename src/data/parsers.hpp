// Internal entry points of the dataset readers: the parsing behind read_idx_gz and
// read_fortune_file, on bytes from any source (used by the fuzz targets).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "synoros/data.hpp"

namespace synoros::data {

// Reads up to n bytes into dst and returns how many; fewer only at the end of the data.
// Throws Error on a read failure.
using ByteReader = std::function<size_t(void* dst, size_t n)>;

// Parses an uncompressed unsigned-byte IDX stream, with read_idx_gz's checks and limit;
// errors name `path` as the file.
IdxArray parse_idx(const std::string& path, const ByteReader& read, uint32_t expected_magic,
                   std::optional<int64_t> limit = std::nullopt);

// The fortunes in the text of one fortune file (see read_fortune_file).
std::vector<std::string> split_fortunes(std::string_view text);

}  // namespace synoros::data
