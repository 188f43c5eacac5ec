#include "cli/args.hpp"

#include <cstdlib>

namespace synoros::cli {

Args::Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> flags)
    : command_(command) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error(command_ + ": unexpected argument '" + a + "'");
    std::string name = a.substr(2);
    if (flags.count(name)) {
      values_[name] = "1";
    } else if (options.count(name)) {
      if (i + 1 >= argc) throw Error(command_ + ": " + a + " needs a value");
      values_[name] = argv[++i];
    } else {
      throw Error(command_ + ": unknown option '" + a + "'");
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end) throw Error(command_ + ": --" + name + " expects an integer, got '" + it->second + "'");
  if (v < min) throw Error(command_ + ": --" + name + " must be >= " + std::to_string(min));
  return v;
}

double Args::real(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end) throw Error(command_ + ": --" + name + " expects a number, got '" + it->second + "'");
  return v;
}

}  // namespace synoros::cli
