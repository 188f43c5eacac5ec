// The runtime compiler: C++ source to a loaded function, through the system compiler and an
// on-disk cache. A kernel is keyed by the SHA-256 of its source, the prelude headers, the
// compiler's command and version and the instruction set, so a second run compiles nothing and
// a changed compiler or flag compiles afresh. Each entry keeps the checksums of its source and
// shared object: a corrupt, truncated or foreign entry is detected, reported and rebuilt.
// Processes compiling the same kernel take a lock per key and publish by atomic rename.
//
// Settings (synoros help env): SYNOROS_NO_JIT=1 switches generation off; SYNOROS_JIT_CXX names
// the compiler (default c++); SYNOROS_JIT_CACHE the cache directory (default
// $XDG_CACHE_HOME/synoros/jit or ~/.cache/synoros/jit).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/kernel_api.hpp"

namespace synoros::kernels::jit {

// False when SYNOROS_NO_JIT=1 (read at each use).
bool enabled();
std::string cache_dir();

struct Compiled {
  void* symbol = nullptr;  // null: failed, see error
  std::string key;         // the cache key (64 hex digits)
  std::string error;
  bool cached = false;     // loaded from the cache without compiling
  double seconds = 0;      // time to compile (or load)
};

// Compiles `source` for `isa` (or loads it from the cache) and returns its function `symbol`.
// Never throws for a compiler's failure: the result carries the error, and the first failure of
// a process is logged on stderr in one line.
Compiled compile(const std::string& source, const std::string& symbol, Isa isa);

// Forgets which kernels this process loaded, so the next compile() looks in the cache directory
// as a new process would (tests; loaded code stays mapped).
void forget_loaded_kernels();

// How many times this process ran the compiler on a kernel (tests: a warm cache compiles
// nothing). Building the prelude's precompiled header is not counted.
int64_t compiler_runs();

}  // namespace synoros::kernels::jit
