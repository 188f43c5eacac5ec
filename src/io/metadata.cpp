// Typed reads and comparisons of checkpoint metadata.
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "synoros/checkpoint.hpp"

namespace synoros::io {

const std::string& metadata_text(const Metadata& md, const std::string& key, const std::string& path) {
  auto it = md.find(key);
  if (it == md.end()) throw Error("checkpoint '" + path + "': metadata has no '" + key + "'");
  return it->second;
}

int64_t metadata_int(const Metadata& md, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  const std::string& v = metadata_text(md, key, path);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != 0 || errno == ERANGE || x < lo || x > hi)
    throw Error("checkpoint '" + path + "': metadata '" + key + "' is '" + v + "', not an integer from " +
                std::to_string(lo) + " to " + std::to_string(hi));
  return x;
}

std::string metadata_real(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

void check_same_run(const Metadata& have, const Metadata& expected, const std::string& path) {
  for (const auto& [key, want] : expected) {
    auto it = have.find(key);
    if (it != have.end() && it->second != want)
      throw Error("checkpoint '" + path + "' was written with " + key + " = " + (it->second.empty() ? "''" : it->second) +
                  ", this command has " + (want.empty() ? "''" : want) + " (resume with the same setting)");
  }
}

}  // namespace synoros::io
