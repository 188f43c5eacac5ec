// The environment, read in one place: the table of SYNOROS_* variables and their parsers.
#include "synoros/config.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iterator>
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
       "keep no packed or transformed copy of weights that do not change between calls (products pack "
       "them per call or read them in place; Winograd convolutions transform them every call)"},
      {"SYNOROS_NO_HUGE_PAGES", Kind::Flag, "0|1", "0",
       "no transparent huge pages advised for buffers of 2 MiB and more (weights, caches, arenas)"},
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
  std::vector<std::optional<std::string>> raw;  // per variable, in the table's order; unset or empty: nullopt
};
State& state() {
  static State s;
  return s;
}

// The engine's one read of the environment.
const char* env(const char* name) { return std::getenv(name); }

// The variable's place in the table. Kernels ask on every plan lookup with a string literal, so
// each thread remembers its last answers by the name's address (and checks the name).
size_t index_of(const char* name) {
  const std::vector<Variable>& vars = variables();
  struct Seen {
    const char* name = nullptr;
    size_t index = 0;
  };
  thread_local std::array<Seen, 16> seen;
  Seen& slot = seen[(reinterpret_cast<uintptr_t>(name) >> 3) % seen.size()];
  if (slot.name == name && std::strcmp(vars[slot.index].name, name) == 0) return slot.index;
  for (size_t i = 0; i < vars.size(); ++i)
    if (std::strcmp(vars[i].name, name) == 0) {
      slot = {name, i};
      return i;
    }
  throw Error(std::string("config: unknown variable '") + name + "'");
}

// The raw value of variable i, under the state's lock (loaded from the environment on first use).
const std::optional<std::string>& raw_locked(State& s, size_t i) {
  if (!s.loaded) {
    std::vector<std::optional<std::string>> raw;
    for (const Variable& v : variables()) {
      const char* e = env(v.name);
      raw.push_back(e && *e ? std::optional<std::string>(e) : std::nullopt);
    }
    s.raw.swap(raw);
    s.loaded = true;
  }
  return s.raw[i];
}

std::optional<std::string> raw_value(size_t i) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  return raw_locked(s, i);
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

size_t typed(const char* name, Kind a, Kind b) {
  const size_t i = index_of(name);
  const Kind k = variables()[i].kind;
  if (k != a && k != b) throw Error(std::string("config: ") + name + " is not read that way");
  return i;
}
}  // namespace

void check_environment() {
  for (size_t i = 0; i < variables().size(); ++i)
    if (auto s = raw_value(i)) check_value(variables()[i], *s);
}

bool flag(const char* name, bool fallback) {
  const size_t i = typed(name, Kind::Flag, Kind::Flag);
  State& st = state();
  std::lock_guard<std::mutex> lk(st.mu);
  const std::optional<std::string>& s = raw_locked(st, i);
  if (!s) return fallback;
  check_value(variables()[i], *s);
  return *s == "1";
}

std::optional<int64_t> integer(const char* name) {
  const size_t i = typed(name, Kind::Integer, Kind::Bytes);
  auto s = raw_value(i);
  if (!s) return std::nullopt;
  return parse_integer(variables()[i], *s);
}

std::string text(const char* name) {
  const size_t i = typed(name, Kind::Choice, Kind::Path);
  auto s = raw_value(i);
  if (!s) return "";
  check_value(variables()[i], *s);
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
  const size_t i = index_of(name);
  std::lock_guard<std::mutex> lk(state().mu);
  saved_ = raw_locked(state(), i);  // loads the table first
  state().raw[i] = value && *value ? std::optional<std::string>(value) : std::nullopt;
}

ScopedOverride::~ScopedOverride() {
  const size_t i = index_of(name_.c_str());
  std::lock_guard<std::mutex> lk(state().mu);
  state().raw[i] = saved_;
}

}  // namespace synoros::config
