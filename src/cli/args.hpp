// A small option parser for the CLI commands: --name value pairs and --flags, with clear
// errors for unknown options, missing values and malformed numbers.
#pragma once

#include <map>
#include <set>
#include <string>

#include "synoros/core.hpp"

namespace synoros::cli {

class Args {
 public:
  // `options` take a value, `flags` do not.
  Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> flags);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name, int64_t fallback, int64_t min = INT64_MIN) const;
  double real(const std::string& name, double fallback) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
};

}  // namespace synoros::cli
