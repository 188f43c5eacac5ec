// Internal entry point of the safetensors reader: the same parsing and checks as
// load_safetensors, on a file already held in memory (used by the fuzz targets).
#pragma once

#include <string>
#include <string_view>

#include "synoros/checkpoint.hpp"

namespace synoros::io {

// Parses the bytes of a whole safetensors file; errors name `name` as the file.
Checkpoint parse_safetensors(const std::string& name, std::string_view bytes);

}  // namespace synoros::io
