// SHA-256 (FIPS 180-4), for the keys and checksums of compiled kernels.
#pragma once

#include <string>

namespace synoros::kernels::jit {

// The digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(const std::string& data);

}  // namespace synoros::kernels::jit
