#include "synoros/config.hpp"
#include "kernels/providers.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include "kernels/kernel_api.hpp"
#include "kernels/vendor_gemm.hpp"
#include "oracle/contraction.hpp"

namespace synoros::kernels {

namespace {
// ---- providers
class EngineGemm : public GemmProvider {
 public:
  EngineGemm(std::string name, int mode) : name_(std::move(name)), mode_(mode) {}
  std::string name() const override { return name_; }
  std::string version() const override { return "1"; }
  bool canonical() const override { return true; }
  bool supports(const GemmShape& s) const override {
    // The unpacked path only makes sense (and is only kept) for small problems.
    return mode_ != 1 || s.M * s.N * s.K <= (int64_t(1) << 21);
  }
  size_t scratch_floats(const GemmShape& s) const override {
    // Without AVX2 the small path falls back to the packed one.
    return gemm_scratch_floats(s, active_isa() == Isa::Scalar ? 0 : mode_);
  }
  void run(const GemmCall& c, ThreadPool& pool) const override {
    sgemm(c.shape, c.A, c.B, c.C, c.scratch, int(active_isa()), pool, mode_, c.accumulate, c.packed_b);
  }
  size_t packed_b_floats(const GemmShape& s) const override {
    const int isa = int(active_isa());
    return sgemm_packs_b(s, isa, mode_) ? sgemm_packed_b_floats(s, isa) : 0;
  }
  void pack_b(const GemmShape& s, const float* B, float* dst, ThreadPool& pool) const override {
    sgemm_pack_b(s, B, dst, int(active_isa()), pool);
  }

 private:
  std::string name_;
  int mode_;
};

// ---- the tuning cache
using Entry = TuningEntry;

struct Cache {
  std::mutex mu;
  bool loaded = false;
  std::map<std::string, Entry> entries;
  std::vector<std::string> rejections;
  // Fast mode's record: every choice this process made or read, and the choices replayed from
  // a checkpoint or a run directory (which win over the cache and over measuring). Both are
  // keyed without the provider set and the CPU model, so a replay survives those changing.
  std::map<std::string, Entry> used, replayed;
  std::string replayed_id;
};
Cache& cache() {
  static Cache c;
  return c;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ULL;
  return h;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown-cpu";
}

void load_locked(Cache& c) {
  if (c.loaded) return;
  c.loaded = true;
  std::string path = tuning_cache_path();
  std::ifstream f(path, std::ios::binary);
  if (!f) return;  // no cache yet
  std::stringstream ss;
  ss << f.rdbuf();
  std::string why;
  std::map<std::string, Entry> m;
  if (!parse_tuning_cache(ss.str(), m, why)) {
    std::cerr << "synoros: warning: tuning cache " << path << " is corrupt (" << why
              << "); it will be rebuilt\n";
    c.entries.clear();
    return;
  }
  c.entries = std::move(m);
}

// Written to a temporary file, flushed to disk, then renamed over the old one: a crash never
// leaves a half-written cache. Processes sharing the file (trial workers, data-parallel ranks,
// parallel tests) take turns through a lock file, and each merges the entries the file holds now
// with its own (its own win for the keys it holds), so no process drops another's choices.
void save_locked(Cache& c) {
  std::string path = tuning_cache_path();
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    std::string dir = path.substr(0, slash);
    for (size_t i = 1; i <= dir.size(); ++i)
      if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  }
  const int lock = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock >= 0)
    while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
    }
  {
    std::ifstream f(path, std::ios::binary);
    std::map<std::string, Entry> now;
    std::string why;
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      if (parse_tuning_cache(ss.str(), now, why))
        for (auto& [key, e] : now) c.entries.emplace(key, e);  // keeps ours where both hold a key
    }
  }
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string text = serialize_tuning_cache(c.entries);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  bool ok = fd >= 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (fd >= 0 && (!ok || std::rename(tmp.c_str(), path.c_str()) != 0)) std::remove(tmp.c_str());
  if (lock >= 0) ::close(lock);  // an unwritable cache only costs re-measuring next time
}

// A choice's key without the provider set and the CPU model (the tail tuning_key adds last).
std::string replay_key(const std::string& key) { return key.substr(0, key.find(" providers=")); }

void note_used_locked(Cache& c, const std::string& key, const Entry& e) { c.used[replay_key(key)] = e; }

const Entry* replayed_locked(const Cache& c, const std::string& key) {
  auto it = c.replayed.find(replay_key(key));
  return it == c.replayed.end() ? nullptr : &it->second;
}

SelectionTimer& timer_slot() {
  static SelectionTimer t;
  return t;
}

// The registered providers and their versions, hashed: a choice made among other candidates
// (a provider added, removed or upgraded) is measured again rather than reused.
std::string provider_set_id() {
  std::string all;
  for (const auto& p : gemm_providers()) all += p->name() + "@" + p->version() + ";";
  char id[20];
  std::snprintf(id, sizeof(id), "%08llx", static_cast<unsigned long long>(fnv1a(all) & 0xffffffffULL));
  return id;
}

std::string key_of(const GemmShape& s, bool strict) {
  std::ostringstream o;
  o << "sgemm M=" << s.M << " N=" << s.N << " K=" << s.K << " a=" << s.a_rs << "," << s.a_cs << " b="
    << s.b_rs << "," << s.b_cs << " c=" << s.c_rs;
  return tuning_key(o.str(), strict);
}

// ---- probing: the oracle gate and the timer
struct Probe {
  GemmShape s;
  std::vector<float> A, B;
  std::vector<int64_t> rows, cols;       // the output elements checked against float64
  std::vector<oracle::PointSum> ref;    // their sums, from the oracle
};

Probe make_probe(const GemmShape& s) {
  Probe p{s, {}, {}, {}, {}, {}};
  p.A.resize(size_t((s.M - 1) * s.a_rs + (s.K - 1) * s.a_cs + 1));
  p.B.resize(size_t((s.K - 1) * s.b_rs + (s.N - 1) * s.b_cs + 1));
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float& x : p.A) x = u(rng);
  for (float& x : p.B) x = u(rng);
  // All elements when small; otherwise the corners, the edges' neighbours and a random sample.
  if (s.M * s.N <= 4096) {
    for (int64_t m = 0; m < s.M; ++m)
      for (int64_t n = 0; n < s.N; ++n) p.rows.push_back(m), p.cols.push_back(n);
  } else {
    for (int64_t m : {int64_t(0), s.M - 1})
      for (int64_t n : {int64_t(0), s.N - 1}) p.rows.push_back(m), p.cols.push_back(n);
    std::uniform_int_distribution<int64_t> rm(0, s.M - 1), rn(0, s.N - 1);
    for (int i = 0; i < 252; ++i) p.rows.push_back(rm(rng)), p.cols.push_back(rn(rng));
  }
  // "mk,kn->mn" over the strided operands: labels (m, n, k).
  const oracle::Operand ops[] = {
      {p.A.data(), nullptr, {oracle::axis(3, 0, s.a_rs), oracle::axis(3, 2, s.a_cs)}},
      {p.B.data(), nullptr, {oracle::axis(3, 2, s.b_rs), oracle::axis(3, 1, s.b_cs)}}};
  const int64_t K[] = {s.K};
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const int64_t at[] = {p.rows[i], p.cols[i]};
    p.ref.push_back(oracle::contraction_point(ops, at, K));
  }
  return p;
}

// Checks the provider on the probe against float64: why it failed ("" when it passed) and the
// worst error as a share of the allowed bound.
Verdict check(const GemmProvider& prov, const Probe& p, std::vector<float>& C, float* scratch, ThreadPool& pool) {
  const GemmShape& s = p.s;
  std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
  try {
    prov.run({s, p.A.data(), p.B.data(), C.data(), scratch}, pool);
  } catch (const std::exception& e) {  // e.g. a JIT that cannot build this shape
    return prov.name() + ": failed: " + e.what();
  }
  oracle::PointVerdict v;
  for (size_t i = 0; i < p.rows.size(); ++i)
    v.check(C[size_t(p.rows[i] * s.c_rs + p.cols[i])], p.ref[i], double(s.K), prov.name(),
            "C[" + std::to_string(p.rows[i]) + "," + std::to_string(p.cols[i]) + "]");
  return {v.why, v.worst};
}

}  // namespace

std::string serialize_tuning_cache(const std::map<std::string, TuningEntry>& m) {
  std::string body = "synoros-tuning-cache 1\n";
  for (const auto& [k, e] : m) body += k + "\t" + e.provider + "\t" + e.version + "\n";
  char sum[32];
  std::snprintf(sum, sizeof(sum), "%016llx", static_cast<unsigned long long>(fnv1a(body)));
  return body + "checksum " + sum + "\n";
}

bool parse_tuning_cache(const std::string& text, std::map<std::string, TuningEntry>& out, std::string& why) {
  size_t cut = text.rfind("checksum ");
  if (text.rfind("synoros-tuning-cache 1\n", 0) != 0) return why = "bad header", false;
  if (cut == std::string::npos) return why = "no checksum", false;
  std::string body = text.substr(0, cut), sum = text.substr(cut + 9);
  while (!sum.empty() && (sum.back() == '\n' || sum.back() == '\r')) sum.pop_back();
  char expect[32];
  std::snprintf(expect, sizeof(expect), "%016llx", static_cast<unsigned long long>(fnv1a(body)));
  if (sum != expect) return why = "checksum mismatch", false;
  std::istringstream in(body);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    size_t a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) return why = "malformed line", false;
    out[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  return true;
}

std::vector<std::shared_ptr<GemmProvider>>& gemm_providers() {
  static std::vector<std::shared_ptr<GemmProvider>> p = [] {
    std::vector<std::shared_ptr<GemmProvider>> v = {
        std::make_shared<EngineGemm>("engine-packed", 2),
        std::make_shared<EngineGemm>("engine-small", 1),
    };
    for (auto& q : vendor_gemm_providers()) v.push_back(q);
    return v;
  }();
  return p;
}

std::string tuning_cache_path() {
  if (std::string p = config::text("SYNOROS_TUNING_CACHE"); !p.empty()) return p;
  std::string dir = config::user_cache_dir();
  return dir.empty() ? "synoros-tuning.txt" : dir + "/tuning.txt";
}

void clear_tuning_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.entries.clear();
  c.rejections.clear();
  c.loaded = true;
  std::remove(tuning_cache_path().c_str());
}

void reload_tuning_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.entries.clear();
  c.loaded = false;
}

size_t tuning_cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  load_locked(c);
  return c.entries.size();
}

std::vector<std::string> selection_rejections() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  return c.rejections;
}

void set_selection_timer(SelectionTimer timer) { timer_slot() = std::move(timer); }

std::vector<double> best_times_interleaved(const std::vector<std::function<void()>>& runs) {
  if (const SelectionTimer& t = timer_slot()) {
    std::vector<double> ns = t(runs.size());
    if (ns.size() != runs.size()) throw Error("selection timer: returned the wrong number of times");
    return ns;
  }
  using Clock = std::chrono::steady_clock;
  std::vector<double> best(runs.size(), 1e300);
  std::vector<int64_t> reps(runs.size(), 1);
  for (size_t i = 0; i < runs.size(); ++i) {  // calibrate the repetitions per sample (also a warm-up)
    auto t0 = Clock::now();
    runs[i]();
    double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    reps[i] = std::clamp<int64_t>(int64_t(5000.0 / std::max(ns, 1.0)), 1, 1000);
  }
  auto t_end = Clock::now() + std::chrono::milliseconds(20 * int64_t(runs.size()));
  for (int round = 0; round < 50; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      auto t0 = Clock::now();
      for (int64_t r = 0; r < reps[i]; ++r) runs[i]();
      auto t1 = Clock::now();
      best[i] = std::min(best[i], std::chrono::duration<double, std::nano>(t1 - t0).count() / double(reps[i]));
    }
    if (round >= 2 && Clock::now() > t_end) break;
  }
  return best;
}

std::string tuning_key(const std::string& what, bool strict) {
  // Strict (default-mode) candidates give the same bits, so their choice may follow the thread
  // count they were timed at; fast mode's replayed choices must not depend on it.
  return what + " isa=" + isa_name(active_isa()) + (strict ? " strict threads=" + std::to_string(num_threads()) : "") +
         " providers=" + provider_set_id() + " cpu=" + cpu_model();
}

void store_choice(const std::string& key, const std::string& name, const std::string& version) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  load_locked(c);
  c.entries[key] = {name, version};
  note_used_locked(c, key, c.entries[key]);
  save_locked(c);
}

bool is_fast_mode_kernel(const std::string& label) {
  std::vector<std::string> fast = {"onednn-conv", "onednn-wino", "onednn-bwd"};
  for (const auto& p : gemm_providers())
    if (!p->canonical()) fast.push_back(p->name());
  size_t i = 0;
  while (i < label.size()) {
    size_t j = label.find_first_of("+ ,", i);
    if (j == std::string::npos) j = label.size();
    std::string tok = label.substr(i, j - i);
    if (tok.size() > 5 && tok.compare(tok.size() - 5, 5, "-data") == 0) tok.resize(tok.size() - 5);
    for (const std::string& f : fast)
      if (tok == f) return true;
    i = j + 1;
  }
  return false;
}

std::string recorded_choices() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  // The replayed choices this process has not needed (yet) stay in the record: a resumed run
  // saved before it evaluates still carries its evaluation's kernels.
  std::map<std::string, Entry> all = c.replayed;
  for (const auto& [k, e] : c.used) all[k] = e;
  std::string out;
  for (const auto& [k, e] : all) out += k + "\t" + e.provider + "\t" + e.version + "\n";
  return out;
}

void clear_recorded_choices() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.used.clear();
}

void replay_choices(const std::string& text, const std::string& source) {
  std::map<std::string, Entry> m;
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(pos, end - pos);
    pos = end + 1, ++line;
    size_t a = row.find('\t'), b = a == std::string::npos ? a : row.find('\t', a + 1);
    if (a == 0 || b == std::string::npos || b == a + 1 || b + 1 >= row.size() || row.find('\t', b + 1) != std::string::npos)
      throw Error(source + ": kernel choice " + std::to_string(line) + " is not 'key<TAB>kernel<TAB>version'");
    std::string key = row.substr(0, a);
    // Fast mode's kernels depend on the instruction set: a record made under another one
    // cannot be replayed here (its keys would match nothing and the bits would change).
    size_t at = key.find(" isa=");
    std::string isa = at == std::string::npos ? "" : key.substr(at + 5, key.find(' ', at + 5) - at - 5);
    if (!isa.empty() && isa != isa_name(active_isa()))
      throw Error(source + ": its kernel choices were made for isa " + isa + ", this process runs " +
                  isa_name(active_isa()) + " (set SYNOROS_ISA=" + isa + " where the CPU has it)");
    m[key] = {row.substr(a + 1, b - a - 1), row.substr(b + 1)};
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.replayed = std::move(m);  // one record at a time: a second load replaces the first
  char id[20];
  std::string all;
  for (const auto& [k, e] : c.replayed) all += k + "\t" + e.provider + "\t" + e.version + "\n";
  std::snprintf(id, sizeof(id), "%08llx", static_cast<unsigned long long>(fnv1a(all) & 0xffffffffULL));
  c.replayed_id = c.replayed.empty() ? "" : id;
}

void clear_replayed_choices() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  c.replayed.clear();
  c.replayed_id.clear();
}

std::string replayed_choices_id() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  return c.replayed_id;
}

namespace {
// A candidate the float64 gate turned down: kept for the profile, and on stderr only with
// SYNOROS_VERBOSE=1 (a tiny convolution's Winograd candidate is rejected in normal use).
void note_rejection_locked(Cache& c, const std::string& key, const std::string& why) {
  c.rejections.push_back(key + ": " + why);
  if (config::flag("SYNOROS_VERBOSE")) std::cerr << "synoros: rejected kernel " << why << " (" << key << ")\n";
}
}  // namespace

void record_rejection(const std::string& key, const std::string& why) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lk(c.mu);
  note_rejection_locked(c, key, why);
}

UnreplayableChoice unreplayable_choice(const std::string& key, const std::string& name, const std::string& version) {
  return UnreplayableChoice("select: the recorded kernel choice for '" + replay_key(key) + "' is " + name + " " + version +
               ", which this build cannot run here (the run's bits depend on it)");
}

namespace {
thread_local std::vector<SelectionCertificate>* trace_into = nullptr;

// The certificate of one choice, handed to the trace alive on this thread (if any) once the
// choice is made: a choice that throws leaves none.
class CertificateNote {
 public:
  CertificateNote(const std::string& key, const std::vector<Candidate>& cands, const ChooseOptions& o) {
    if (!trace_into) return;
    cert_.key = key;
    cert_.flops = o.flops, cert_.bytes = o.bytes;
    for (const Candidate& c : cands) {
      CandidateRecord r;
      r.name = c.name, r.version = c.version;
      cert_.candidates.push_back(std::move(r));
    }
  }
  CandidateRecord* operator[](size_t i) { return trace_into ? &cert_.candidates[i] : nullptr; }
  void source(const char* s) { source_ = s; }
  void finish(const Choice& ch) {
    if (!trace_into) return;
    cert_.chosen = ch.index;
    cert_.source = ch.index < 0 ? "none passed" : source_;
    for (size_t i = 0; i < ch.ns.size() && i < cert_.candidates.size(); ++i) cert_.candidates[i].ns = ch.ns[i];
    trace_into->push_back(std::move(cert_));
  }

 private:
  SelectionCertificate cert_;
  const char* source_ = "measured";
};

Choice choose_noted(const std::string& key, const std::vector<Candidate>& cands, const ChooseOptions& o,
                    CertificateNote& note);
}  // namespace

SelectionTrace::SelectionTrace(std::vector<SelectionCertificate>* into) : prev_(trace_into) { trace_into = into; }
SelectionTrace::~SelectionTrace() { trace_into = prev_; }

void amend_certificate(int chosen, const std::string& why) {
  if (!trace_into || trace_into->empty()) return;
  SelectionCertificate& c = trace_into->back();
  if (c.chosen >= 0 && size_t(c.chosen) < c.candidates.size()) {
    c.candidates[size_t(c.chosen)].why = why;
    c.candidates[size_t(c.chosen)].passed = false;
    c.candidates[size_t(c.chosen)].checked = true;
  }
  c.chosen = chosen;
  c.source = "checked again, refused";
}

Choice choose(const std::string& key, const std::vector<Candidate>& cands, const ChooseOptions& o) {
  CertificateNote note(key, cands, o);
  Choice ch = choose_noted(key, cands, o, note);
  note.finish(ch);
  return ch;
}

namespace {
Choice choose_noted(const std::string& key, const std::vector<Candidate>& cands, const ChooseOptions& o,
                    CertificateNote& note) {
  Cache& c = cache();
  Choice ch;
  auto find = [&](const Entry& e) {
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i].name == e.provider && cands[i].version == e.version) return int(i);
    return -1;
  };
  // The cache's choice when a candidate has its name and version (c.mu held).
  auto cached_locked = [&] {
    auto hit = o.cached ? c.entries.find(key) : c.entries.end();
    if (hit == c.entries.end() || (ch.index = find(hit->second)) < 0) return false;
    ch.from_cache = true;
    note.source("tuning cache");
    note_used_locked(c, key, hit->second);
    return true;
  };
  {
    std::lock_guard<std::mutex> lk(c.mu);
    load_locked(c);
    if (const Entry* r = o.replay && fast_kernels() ? replayed_locked(c, key) : nullptr) {
      ch.index = find(*r);
      if (ch.index < 0) throw unreplayable_choice(key, r->provider, r->version);
      ch.from_cache = ch.replayed = true;
      note.source("replayed");
      note_used_locked(c, key, *r);
      return ch;
    }
    if (cached_locked()) return ch;
  }
  // One measurement at a time in the process: candidates share the default pool, timings would
  // disturb each other, and two threads choosing for one key must not pin two kernels. The lock
  // is recursive: a check may select for another key (a convolution's alternative lowering
  // selects its GEMM). A choice another thread stored meanwhile is taken as it is.
  static std::recursive_mutex measuring;
  std::lock_guard<std::recursive_mutex> one_at_a_time(measuring);
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (cached_locked()) return ch;
  }
  std::vector<int> passed;
  for (size_t i = 0; i < cands.size(); ++i) {
    Verdict v = cands[i].check ? cands[i].check() : Verdict();
    if (CandidateRecord* r = note[i]) r->checked = true, r->passed = v.why.empty(), r->why = v.why, r->error = v.error;
    if (v.why.empty()) {
      passed.push_back(int(i));
      if (!o.time) break;
      continue;
    }
    ch.rejected.push_back(v.why);
    std::lock_guard<std::mutex> lk(c.mu);
    note_rejection_locked(c, key, v.why);
  }
  if (passed.empty()) return ch;
  ch.index = passed[0];
  ch.ns.assign(cands.size(), 0.0);
  bool measured = o.time && passed.size() > 1;
  if (!measured) note.source(o.time ? "only candidate" : "first that passed");
  if (measured) {
    std::vector<std::function<void()>> runs;
    for (int i : passed) runs.push_back(cands[size_t(i)].run);
    std::vector<double> ns = best_times_interleaved(runs);
    double best = 1e300;
    for (size_t i = 0; i < passed.size(); ++i) {
      ch.ns[size_t(passed[i])] = ns[i];
      if (ns[i] < best) best = ns[i], ch.index = passed[i];
    }
  }
  if (o.cached && (measured || o.store_unmeasured)) {
    std::lock_guard<std::mutex> lk(c.mu);
    Entry& e = c.entries[key] = {cands[size_t(ch.index)].name, cands[size_t(ch.index)].version};
    note_used_locked(c, key, e);
    save_locked(c);
  }
  return ch;
}

}  // namespace

Selection select_gemm(const GemmShape& s, bool strict) {
  std::string key = key_of(s, strict);
  std::vector<const GemmProvider*> provs;
  for (const auto& p : gemm_providers())
    if (p->supports(s) && (!strict || p->canonical())) provs.push_back(p.get());
  // The probe and the candidates' scratch are made only when the choice is measured.
  std::optional<Probe> probe;
  std::vector<float> C;
  std::vector<std::unique_ptr<Buffer>> scratch(provs.size());  // 64-byte aligned, as in a plan
  ThreadPool& pool = default_pool();
  std::vector<Candidate> cands;
  for (size_t i = 0; i < provs.size(); ++i)
    cands.push_back({provs[i]->name(), provs[i]->version(),
                     [&, i] {
                       if (!probe) probe = make_probe(s), C.resize(size_t((s.M - 1) * s.c_rs + s.N));
                       scratch[i] = std::make_unique<Buffer>(provs[i]->scratch_floats(s) * sizeof(float));
                       return check(*provs[i], *probe, C, static_cast<float*>(scratch[i]->data()), pool);
                     },
                     [&, i] {
                       provs[i]->run({s, probe->A.data(), probe->B.data(), C.data(),
                                      static_cast<float*>(scratch[i]->data())},
                                     pool);
                     }});
  // Strict mode never replays: a replay records fast mode's choices, and strict takes none of them.
  ChooseOptions o;
  o.replay = !strict;
  o.flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
  o.bytes = 4.0 * (double(s.M) * double(s.K) + double(s.K) * double(s.N) + double(s.M) * double(s.N));
  Choice ch = choose(key, cands, o);
  if (ch.index < 0) throw Error("select: no kernel passed the float64 oracle for " + key);
  return {provs[size_t(ch.index)], ch.from_cache, ch.rejected};
}

}  // namespace synoros::kernels
