// The environment, read in one place: the table of SYNOROS_* variables and their parsers.
#include "synoros/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include "synoros/core.hpp"

namespace synoros::config {

const std::vector<Variable>& variables() {
  static const std::vector<Variable> table = {
      {"SYNOROS_NUM_THREADS", Kind::Integer, "1..1024", "all cores", "threads of the engine's pool"},
      {"SYNOROS_ISA", Kind::Choice, "scalar|avx2|avx512", "the best this CPU has",
       "cap the instruction set of the engine's own kernels"},
      {"SYNOROS_FAST", Kind::Flag, "0|1", "0",
       "fast mode: selection may also take kernels that round differently (vendor GEMMs, oneDNN "
       "convolutions); checkpoints record the choices"},
      {"SYNOROS_STRICT", Kind::Flag, "0|1", "0", "canonical-order kernels even where SYNOROS_FAST=1 asks for fast mode"},
      {"SYNOROS_NO_FUSION", Kind::Flag, "0|1", "0", "switch fusion off (one launch per op)"},
      {"SYNOROS_NO_PLAN", Kind::Flag, "0|1", "0", "switch memory planning off (a buffer per value)"},
      {"SYNOROS_NO_WEIGHT_PACKS", Kind::Flag, "0|1", "0",
       "keep no packed copy of weights that do not change between calls (products pack them per call)"},
      {"SYNOROS_MAX_PLAN_BYTES", Kind::Bytes, "bytes, with an optional K, M or G suffix",
       "3/4 of physical memory", "largest arena one plan may use"},
      {"SYNOROS_MAX_MEMORY_BYTES", Kind::Bytes, "bytes, with an optional K, M or G suffix",
       "3/4 of physical memory", "largest total of the engine's live buffers"},
      {"SYNOROS_WINDOW_EINSUM", Kind::Flag, "0|1", "1", "the window kernel for small convolutions"},
      {"SYNOROS_CONV_DIRECT", Kind::Flag, "0|1", "1", "the engine's direct convolution kernels (forward, input and weight gradients)"},
      {"SYNOROS_CONV_LOWERING", Kind::Choice, "gemm|onednn-conv|onednn-wino|onednn-bwd", "measured",
       "force one convolution lowering (for comparisons)"},
      {"SYNOROS_TUNING_CACHE", Kind::Path, "a file path", "$XDG_CACHE_HOME/synoros/tuning.txt",
       "where kernel choices are cached"},
      {"SYNOROS_DATA_DIR", Kind::Path, "a directory", "/usr/share/datasets/fashion-mnist",
       "Fashion-MNIST's IDX files"},
      {"SYNOROS_FORTUNES_DIR", Kind::Path, "a directory", "/usr/share/games/fortunes", "the fortunes corpus"},
      {"SYNOROS_NO_JIT", Kind::Flag, "0|1", "0",
       "switch generated kernels off (Recompile keeps the interpreter's kernels)"},
      {"SYNOROS_JIT_CXX", Kind::Path, "a C++ compiler (a program name or path, no arguments)", "c++",
       "the compiler of generated kernels"},
      {"SYNOROS_JIT_CACHE", Kind::Path, "a directory", "$XDG_CACHE_HOME/synoros/jit",
       "where compiled kernels are cached"},
      {"SYNOROS_VERBOSE", Kind::Flag, "0|1", "0", "log kernel selection (rejected candidates) on stderr"},
      {"SYNOROS_DIST_TIMEOUT", Kind::Integer, "1..86400", "600",
       "seconds a data-parallel rank waits for a peer in a step before it stops with an error (rank 0's evaluation and checkpoint are not counted)"},
      {"SYNOROS_FAULT", Kind::Path, "kill|hang|slow:RANK:STEP", "unset",
       "tests: that rank of a data-parallel run dies, hangs, or pauses past the peers' deadline after that step"},
      {"SYNOROS_EXHAUSTIVE", Kind::Flag, "0|1", "0", "tests: check vector math over every float input"},
  };
  return table;
}

namespace {
struct State {
  std::mutex mu;
  bool loaded = false;
  std::map<std::string, std::optional<std::string>> raw;  // unset or empty: nullopt
};
State& state() {
  static State s;
  return s;
}

const Variable& find(const std::string& name) {
  for (const Variable& v : variables())
    if (name == v.name) return v;
  throw Error("config: unknown variable '" + name + "'");
}

// The engine's one read of the environment.
const char* env(const char* name) { return std::getenv(name); }

std::optional<std::string> raw_value(const char* name) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!s.loaded) {
    for (const Variable& v : variables()) {
      const char* e = env(v.name);
      s.raw[v.name] = e && *e ? std::optional<std::string>(e) : std::nullopt;
    }
    s.loaded = true;
  }
  find(name);
  return s.raw[name];
}

[[noreturn]] void bad(const Variable& v, const std::string& value) {
  throw Error(std::string(v.name) + "='" + value + "' is not valid: expected " + v.accepts);
}

int64_t parse_integer(const Variable& v, const std::string& s) {
  if (v.kind == Kind::Bytes) {
    size_t digits = 0;
    while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
    if (digits == 0) bad(v, s);
    std::string suffix = s.substr(digits);
    int shift = suffix.empty() ? 0 : suffix == "K" ? 10 : suffix == "M" ? 20 : suffix == "G" ? 30 : -1;
    if (shift < 0) bad(v, s);
    errno = 0;
    unsigned long long n = std::strtoull(s.substr(0, digits).c_str(), nullptr, 10);
    if (errno == ERANGE || n == 0 || n > (uint64_t(INT64_MAX) >> shift)) bad(v, s);
    return int64_t(n << shift);
  }
  char* end = nullptr;
  errno = 0;
  long long n = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || *end != 0 || end == s.c_str()) bad(v, s);
  std::string range = v.accepts;
  size_t dots = range.find("..");
  if (dots != std::string::npos) {
    long long lo = std::stoll(range.substr(0, dots)), hi = std::stoll(range.substr(dots + 2));
    if (n < lo || n > hi) bad(v, s);
  }
  return n;
}

void check_value(const Variable& v, const std::string& s) {
  switch (v.kind) {
    case Kind::Flag:
      if (s != "0" && s != "1") bad(v, s);
      break;
    case Kind::Integer:
    case Kind::Bytes: parse_integer(v, s); break;
    case Kind::Choice: {
      std::string choices = std::string("|") + v.accepts + "|";
      if (s.find('|') != std::string::npos || choices.find("|" + s + "|") == std::string::npos) bad(v, s);
      break;
    }
    case Kind::Path: break;
  }
}

const Variable& typed(const char* name, Kind a, Kind b) {
  const Variable& v = find(name);
  if (v.kind != a && v.kind != b) throw Error(std::string("config: ") + name + " is not read that way");
  return v;
}
}  // namespace

void check_environment() {
  for (const Variable& v : variables())
    if (auto s = raw_value(v.name)) check_value(v, *s);
}

bool flag(const char* name, bool fallback) {
  const Variable& v = typed(name, Kind::Flag, Kind::Flag);
  auto s = raw_value(name);
  if (!s) return fallback;
  check_value(v, *s);
  return *s == "1";
}

std::optional<int64_t> integer(const char* name) {
  const Variable& v = typed(name, Kind::Integer, Kind::Bytes);
  auto s = raw_value(name);
  if (!s) return std::nullopt;
  return parse_integer(v, *s);
}

std::string text(const char* name) {
  const Variable& v = typed(name, Kind::Choice, Kind::Path);
  auto s = raw_value(name);
  if (!s) return "";
  check_value(v, *s);
  return *s;
}

std::string system_variable(const char* name) {
  static const char* const known[] = {"HOME",      "XDG_CACHE_HOME",       "TMPDIR",  "CUDA_HOME",
                                      "CUDA_PATH", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  if (std::none_of(std::begin(known), std::end(known), [&](const char* k) { return std::strcmp(k, name) == 0; }))
    throw Error(std::string("config: '") + name + "' is not a system variable the engine follows");
  const char* e = env(name);
  return e ? e : "";
}

std::string user_cache_dir() {
  if (std::string x = system_variable("XDG_CACHE_HOME"); !x.empty()) return x + "/synoros";
  if (std::string h = system_variable("HOME"); !h.empty()) return h + "/.cache/synoros";
  return "";
}

std::string temp_dir() {
  std::string t = system_variable("TMPDIR");
  return t.empty() ? "/tmp" : t;
}

std::string describe_variables() {
  std::ostringstream o;
  for (const Variable& v : variables()) {
    o << "  " << v.name << "=" << v.accepts << "\n      " << v.doc << " (default: " << v.fallback << ")\n";
  }
  return o.str();
}

ScopedOverride::ScopedOverride(const char* name, const char* value) : name_(name) {
  saved_ = raw_value(name);  // loads the table first
  std::lock_guard<std::mutex> lk(state().mu);
  state().raw[name_] = value && *value ? std::optional<std::string>(value) : std::nullopt;
}

ScopedOverride::~ScopedOverride() {
  std::lock_guard<std::mutex> lk(state().mu);
  state().raw[name_] = saved_;
}

}  // namespace synoros::config
