#include "kernels/jit/compiler.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "kernels/jit/prelude.hpp"
#include "kernels/jit/sha256.hpp"
#include "synoros/config.hpp"

extern char** environ;

namespace synoros::kernels::jit {

namespace {

std::atomic<int64_t> g_runs{0};
constexpr int kCompileSeconds = 120;

struct State {
  std::mutex mu;
  std::map<std::string, void*> loaded;  // key -> handle (kept for the process's life)
  std::map<std::string, std::string> versions;  // compiler -> its version line
  std::map<std::string, bool> pch_failed;        // precompiled headers that did not build
  bool logged = false;
};
State& state() {
  static State s;
  return s;
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  out = s.str();
  return true;
}

// Writes through a temporary and a rename, so readers see the old file or the whole new one.
bool write_atomic(const std::string& path, const std::string& text) {
  static std::atomic<int> serial{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return false;
    f << text;
    if (!f.flush()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i)
    if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  struct stat st;
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Runs argv with stdout and stderr into log_path; returns the exit status, or -1 with why.
int run_process(const std::vector<std::string>& argv, const std::string& log_path, std::string& why) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    why = "cannot run the compiler '" + argv[0] + "': " + std::strerror(rc);
    return -1;
  }
  // A compiler that hangs must not hang the run: killed after kCompileSeconds.
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kCompileSeconds);
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      why = "waiting for the compiler failed";
      return -1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      why = "the compiler '" + argv[0] + "' took more than " + std::to_string(kCompileSeconds) + " s";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!WIFEXITED(status)) {
    why = "the compiler '" + argv[0] + "' was killed by a signal";
    return -1;
  }
  return WEXITSTATUS(status);
}

std::string compiler() {
  std::string c = config::text("SYNOROS_JIT_CXX");
  return c.empty() ? "c++" : c;
}

std::vector<std::string> isa_flags(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return {};
    case Isa::Avx2: return {"-mavx2", "-mfma"};
    case Isa::Avx512:
      return {"-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mavx2", "-mfma", "-mprefer-vector-width=512"};
  }
  return {};
}

// The engine's own floating-point flags (CMakeLists.txt), so generated code rounds as it does.
std::vector<std::string> base_flags() {
  return {"-std=c++20", "-O3", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-w"};
}

// The compiler's version line (`c++ -dumpfullversion`), once per process and compiler.
std::string compiler_version(const std::string& cxx, std::string& why) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (auto it = s.versions.find(cxx); it != s.versions.end()) return it->second;
  }
  // Written to the temporary directory: a read-only kernel cache stays usable.
  static std::atomic<int> serial{0};
  std::string log = config::temp_dir() + "/synoros-cxx-version." +
                    std::to_string(::getpid()) + "." + std::to_string(serial++) + ".txt";
  int rc = run_process({cxx, "--version"}, log, why);
  std::string v;
  read_file(log, v);
  std::remove(log.c_str());
  v = v.substr(0, v.find('\n'));  // "g++ (Debian 12.2.0-14) 12.2.0", "clang version 14.0.6"
  if (rc != 0) {
    if (why.empty()) why = "the compiler '" + cxx + "' did not report its version";
    return "";
  }
  while (!v.empty() && v.back() == '\r') v.pop_back();
  if (v.empty()) {
    why = "the compiler '" + cxx + "' did not report its version";
    return "";
  }
  std::lock_guard<std::mutex> lk(s.mu);
  s.versions[cxx] = v;
  return v;
}

// Writes the prelude headers under dir/prelude-<hash>/ (once), returning that directory.
std::string prelude_dir(const std::string& dir, std::string& hash) {
  std::string all;
  for (const PreludeFile& f : prelude_files()) all += std::string(f.path) + '\n' + f.text + '\n';
  hash = sha256_hex(all);
  std::string root = dir + "/prelude-" + hash.substr(0, 16);
  for (const PreludeFile& f : prelude_files()) {
    std::string path = root + "/" + f.path, have;
    if (read_file(path, have) && have == f.text) continue;
    if (!make_dirs(path.substr(0, path.rfind('/'))) || !write_atomic(path, f.text)) return "";
  }
  return root;
}

// The prelude headers a kernel for `isa` includes (render_cpp writes the same lines; a kernel's
// own includes of them are then no-ops: the headers are #pragma once).
std::string prelude_includes(Isa isa) {
  std::string text = "#include <cstdint>\n#include \"ir/scalar_ops.hpp\"\n";
  if (isa == Isa::Avx2) text += "#include \"kernels/cpu/vec_math.hpp\"\n#include \"kernels/cpu/vec_avx2.hpp\"\n";
  if (isa == Isa::Avx512) text += "#include \"kernels/cpu/vec_math.hpp\"\n#include \"kernels/cpu/vec_avx512.hpp\"\n";
  return text;
}

// GCC names itself by the command ("c++ (Debian 12.2.0-14) 12.2.0"); clang's .gch differs. Any
// other compiler that cannot build the header costs one failed run per process, and one that
// cannot use it parses the header's text.
bool is_gcc(const std::string& version) { return version.find("clang") == std::string::npos; }

void log_failure(const std::string& why) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.logged) return;
  s.logged = true;
  std::cerr << "synoros: jit: " << why << "; the interpreter runs the kernels it could not build\n";
}

// A lock on `path` for the lifetime of the object (flock: released if the process dies).
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    // Another process compiling this kernel holds it; past the compiler's own limit, go on
    // without it (the record's checksums and the renames keep the entry whole either way).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kCompileSeconds + 10);
    while (fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) != 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

// The entry's record: its source's and its shared object's checksums.
std::string record(const std::string& source_sum, const std::string& object_sum) {
  return "synoros-jit 1\nsource " + source_sum + "\nobject " + object_sum + "\n";
}

// Parsing the prelude headers is most of a kernel's compile time (~0.7 s of ~0.75 s with GCC
// 12), so they are precompiled once per prelude, compiler, flags and instruction set: a header
// in the prelude directory and its .gch beside it, which GCC takes for `-include header` when
// the flags match and otherwise ignores (then parsing the header as text, as before). Built
// under a lock and published by rename. Returns the header, or "" (no GCC, or it failed to
// build): kernels then compile without it, to the same code.
std::string precompiled_prelude(const std::string& include, const std::string& cxx, const std::string& version,
                                const std::vector<std::string>& flags, Isa isa) {
  if (!is_gcc(version)) return "";
  std::vector<std::string> argv = {cxx};
  for (const std::string& f : flags)
    if (f != "-shared") argv.push_back(f);
  std::string command = version;
  for (const std::string& a : argv) command += " " + a;
  std::string header = include + "/synoros-jit-" + isa_name(isa) + "-" + sha256_hex(command).substr(0, 16) + ".hpp";
  std::string gch = header + ".gch", text = prelude_includes(isa), have;
  struct stat st;
  auto ready = [&] { return read_file(header, have) && have == text && ::stat(gch.c_str(), &st) == 0; };
  if (ready()) return header;
  {
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.pch_failed.count(header)) return "";  // tried once in this process
  }
  FileLock lock(header + ".lock");
  if (ready()) return header;
  if (!write_atomic(header, text)) return "";
  static std::atomic<int> serial{0};
  std::string tmp = gch + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  for (const std::string& a : {std::string("-x"), std::string("c++-header"), std::string("-I"), include,
                               std::string("-o"), tmp, header})
    argv.push_back(a);
  std::string why;
  int rc = run_process(argv, header + ".log", why);
  std::remove((header + ".log").c_str());
  if (rc != 0 || std::rename(tmp.c_str(), gch.c_str()) != 0) {
    std::remove(tmp.c_str());
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    s.pch_failed[header] = true;
    return "";
  }
  return header;
}

}  // namespace

bool enabled() { return !config::flag("SYNOROS_NO_JIT"); }

std::string cache_dir() {
  if (std::string p = config::text("SYNOROS_JIT_CACHE"); !p.empty()) return p;
  std::string dir = config::user_cache_dir();
  return dir.empty() ? "synoros-jit" : dir + "/jit";
}

int64_t compiler_runs() { return g_runs.load(); }

void forget_loaded_kernels() {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.loaded.clear();
}

Compiled compile(const std::string& source, const std::string& symbol, Isa isa) {
  auto t0 = std::chrono::steady_clock::now();
  Compiled out;
  auto fail = [&](const std::string& why) {
    out.error = why;
    log_failure(why);
    return out;
  };
  std::string dir = cache_dir();
  if (!make_dirs(dir)) return fail("cannot create the cache directory '" + dir + "'");
  // The cache holds code this process loads: it must not be writable by other users.
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    return fail("the cache directory '" + dir + "' is not this user's alone (owner and mode)");
  std::string cxx = compiler(), why;
  std::string version = compiler_version(cxx, why);
  if (version.empty()) return fail(why);
  std::string prelude_hash;
  std::string include = prelude_dir(dir, prelude_hash);
  if (include.empty()) return fail("cannot write the prelude headers under '" + dir + "'");
  std::vector<std::string> flags = base_flags();
  for (const std::string& f : isa_flags(isa)) flags.push_back(f);
  std::string command = cxx + " " + version;
  for (const std::string& f : flags) command += " " + f;
  std::string source_sum = sha256_hex(source);
  out.key = sha256_hex(source_sum + "\n" + prelude_hash + "\n" + command + "\n" + isa_name(isa) + "\n" + symbol);
  {
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    if (auto it = s.loaded.find(out.key); it != s.loaded.end()) {
      out.symbol = ::dlsym(it->second, symbol.c_str());
      out.cached = true;
      return out;
    }
  }
  std::string base = dir + "/" + out.key.substr(0, 32);
  FileLock lock(base + ".lock");
  std::string so = base + ".so", rec, object;
  bool have = read_file(base + ".sum", rec) && read_file(so, object);
  if (have && rec == record(source_sum, sha256_hex(object))) {
    out.cached = true;
  } else {
    if (have || read_file(so, object))
      std::cerr << "synoros: jit: cache entry " << so << " does not match its record; rebuilding it\n";
    std::string src = base + ".cpp";
    if (!write_atomic(src, source)) return fail("cannot write '" + src + "'");
    static std::atomic<int> serial{0};
    std::string tmp = so + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
    std::string pch = precompiled_prelude(include, cxx, version, flags, isa);
    auto build = [&](bool with_pch) {
      std::vector<std::string> argv = {cxx};
      for (const std::string& f : flags) argv.push_back(f);
      if (with_pch) argv.insert(argv.end(), {"-include", pch});
      for (const std::string& a : {std::string("-I"), include, std::string("-o"), tmp, src}) argv.push_back(a);
      ++g_runs;
      return run_process(argv, base + ".log", why);
    };
    std::string log = base + ".log";
    int rc = build(!pch.empty());
    if (rc > 0 && !pch.empty()) {
      // A damaged precompiled header can fail a compile that the header's text would pass:
      // compile without it, and when that passes, drop it (the next kernel builds it again).
      rc = build(false);
      if (rc == 0) {
        FileLock pch_lock(pch + ".lock");
        std::remove((pch + ".gch").c_str());
      }
    }
    if (rc != 0) {
      std::remove(tmp.c_str());
      if (rc > 0) {
        std::string text;
        read_file(log, text);
        why = "compiling " + src + " failed (" + cxx + " exit " + std::to_string(rc) + "): " + text.substr(0, 400);
      }
      return fail(why);
    }
    if (!read_file(tmp, object) || std::rename(tmp.c_str(), so.c_str()) != 0)
      return fail("cannot publish '" + so + "'");
    if (!write_atomic(base + ".sum", record(source_sum, sha256_hex(object)))) return fail("cannot write the record of '" + so + "'");
    std::remove(log.c_str());
  }
  void* h = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return fail(std::string("cannot load '") + so + "': " + ::dlerror());
  out.symbol = ::dlsym(h, symbol.c_str());
  if (!out.symbol) return fail("'" + so + "' has no function " + symbol);
  {
    State& s = state();
    std::lock_guard<std::mutex> lk(s.mu);
    s.loaded.emplace(out.key, h);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace synoros::kernels::jit
