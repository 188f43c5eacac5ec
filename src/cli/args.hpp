// The command-line parser every command uses: a table of typed flags per command, from which
// parsing, range checks and `--help` all come, so the help text cannot drift from what is read.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "synoros/core.hpp"

namespace synoros::cli {

// A mistake in how a command was called (exit status 2); other Errors are failures (exit 1).
class UsageError : public Error {
 public:
  using Error::Error;
};

enum class Type : uint8_t { Flag, Int, Real, Choice, Path, Text };

struct Opt {
  std::string name;
  Type type = Type::Flag;
  std::string fallback;  // the default: a value in the flag's syntax, or words when it depends
  std::string help;
  // Int: [imin, imax]; Real: [rmin, rmax] (NaN and infinities are always refused).
  int64_t imin = 0, imax = std::numeric_limits<int64_t>::max();
  double rmin = -std::numeric_limits<double>::max(), rmax = std::numeric_limits<double>::max();
  std::string choices;  // Choice: values separated by '|'
  std::string scope;    // "": every form of the command; otherwise the form it applies to
};

// Builders for the table rows.
Opt flag(std::string name, std::string help, std::string scope = "");
Opt integer(std::string name, int64_t fallback, int64_t lo, int64_t hi, std::string help, std::string scope = "");
Opt integer_words(std::string name, std::string fallback, int64_t lo, int64_t hi, std::string help,
                  std::string scope = "");
Opt real(std::string name, std::string fallback, double lo, double hi, std::string help, std::string scope = "");
Opt choice(std::string name, std::string fallback, std::string choices, std::string help, std::string scope = "");
Opt path(std::string name, std::string fallback, std::string help, std::string scope = "");
Opt text(std::string name, std::string fallback, std::string help, std::string scope = "");

struct CommandSpec {
  std::string name;
  std::string summary;               // one line for `synoros help`
  std::string details;               // printed under the usage line of `--help`
  std::vector<Opt> opts;
  std::map<std::string, std::string> scopes;  // scope name -> when it applies (for the help text)
  bool hidden = false;               // internal (worker processes): not listed by `synoros help`
};

// `synoros CMD --help`: the usage line, details, and each flag with its type, default and meaning.
std::string help_text(const CommandSpec& spec);

class Args {
 public:
  // Parses `--name value` pairs and `--flag`s; every value is checked against its row now, so a
  // bad value stops the command before any work. Throws UsageError.
  Args(const CommandSpec& spec, int argc, char** argv);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  // The given value, else the row's default (which must then be a value, not words), else `fallback`.
  std::string str(const std::string& name) const;
  std::string str(const std::string& name, const std::string& fallback) const;
  int64_t integer(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t fallback) const;
  double real(const std::string& name) const;
  double real(const std::string& name, double fallback) const;
  // Refuses (UsageError) every given flag whose scope is set and is not `scope`; `what` names the
  // form in the message, e.g. "gpt-tiny".
  void require_scope(const std::string& scope, const std::string& what) const;
  // Refuses a flag that makes no sense with another choice (e.g. --momentum with adamw).
  void refuse(const std::string& name, const std::string& why) const;

 private:
  const Opt& row(const std::string& name) const;
  const CommandSpec& spec_;
  std::map<std::string, std::string> values_;
};

// True when argv asks for help (`--help` or `-h` in place of a flag, not as an option's value):
// the command must print it and do no work.
bool wants_help(const CommandSpec& spec, int argc, char** argv);

}  // namespace synoros::cli
