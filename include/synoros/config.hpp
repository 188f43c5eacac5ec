// The engine's settings from the environment: every SYNOROS_* variable, with its type, default and
// meaning, in one table. Values are read once, on first use, and checked there: a bad value is an
// Error naming the variable and the values it accepts, never a silent fallback.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace synoros::config {

enum class Kind : uint8_t { Flag, Integer, Bytes, Choice, Path };

struct Variable {
  const char* name;
  Kind kind;
  const char* accepts;  // Choice: values separated by '|'; Integer: "min..max"; otherwise a description
  const char* fallback;  // what applies when unset
  const char* doc;
};

// The table: every variable the engine and the command-line tool read.
const std::vector<Variable>& variables();
// The table as aligned text (for `synoros help env` and the README).
std::string describe_variables();

// Reads and checks every variable now (the CLI calls this at start-up, so a bad value stops the
// command before any work). Throws Error naming the first bad variable.
void check_environment();

// Typed values; each throws Error when the variable is set to a value its kind does not accept,
// and returns nothing / false / "" when it is unset (or set to the empty string).
bool flag(const char* name, bool fallback = false);  // Flag: "0" or "1"
std::optional<int64_t> integer(const char* name);  // Integer within its range, or Bytes (K/M/G suffixes)
std::string text(const char* name);               // Choice or Path

// The standard variables of the system the engine also follows (not SYNOROS_*; read at each
// call, never cached): HOME, XDG_CACHE_HOME, TMPDIR, CUDA_HOME, CUDA_PATH, and the MPI launchers'
// OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK. "" when unset; any other name is an Error.
std::string system_variable(const char* name);
// Where the engine keeps caches of its own (the tuning cache, compiled kernels):
// $XDG_CACHE_HOME/synoros, else $HOME/.cache/synoros; "" when neither is set.
std::string user_cache_dir();
// The directory for temporary files: $TMPDIR, else /tmp.
std::string temp_dir();

// Replaces a variable's value for the lifetime of the object (tests; nullptr: unset). Only
// settings read at use time see it (SYNOROS_NO_FUSION, SYNOROS_NO_PLAN, SYNOROS_VERBOSE, the data
// and cache paths); those cached at first use (the ISA, the thread count, strict mode, the window
// kernel, the forced convolution lowering, both memory limits) have setters of their own.
class ScopedOverride {
 public:
  ScopedOverride(const char* name, const char* value);
  ~ScopedOverride();
  ScopedOverride(const ScopedOverride&) = delete;
  ScopedOverride& operator=(const ScopedOverride&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

// The most threads a pool may have: a typo such as 100000 is refused instead of exhausting the
// process's thread limit.
constexpr int kMaxThreads = 1024;

}  // namespace synoros::config
