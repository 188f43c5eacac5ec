// Reading the search logs' JSON records: integer fields checked before they are narrowed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "synoros/core.hpp"

namespace synoros::trials {

// An integer field within [lo, hi]; `what` names the record in the error. nlohmann converts a
// JSON float to an integer with a plain cast, undefined when it is out of range (1e300), so only
// JSON integers are taken.
inline int64_t integer_field(const nlohmann::json& j, const char* name, int64_t lo, int64_t hi,
                             const std::string& what = "trials: malformed evaluation record") {
  const nlohmann::json& v = j.at(name);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) ||
      v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    throw Error(what + ": " + name + " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

}  // namespace synoros::trials
