// Kernel providers for contractions, and Select: for each GEMM shape every provider that
// supports it is first checked against a float64 reference on probe inputs (a mismatch is
// reported and the provider rejected), then timed; the fastest is pinned and remembered in an
// on-disk tuning cache, so reruns make the same choice without measuring.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "synoros/runtime.hpp"

namespace synoros::kernels {

struct GemmCall {
  GemmShape shape;
  const float* A;
  const float* B;
  float* C;
  float* scratch;  // scratch_floats(shape) floats
  bool accumulate = false;  // continue the chains stored in C (C += A B in canonical order)
  const float* packed_b = nullptr;  // B as pack_b laid it out for this shape (null: B as given)
};

class GemmProvider {
 public:
  virtual ~GemmProvider() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;
  // True when the provider follows the engine's canonical reduction order (one FMA chain per
  // output in ascending k), so its bits equal the canonical kernel's on every machine.
  virtual bool canonical() const = 0;
  virtual bool supports(const GemmShape& s) const = 0;
  virtual size_t scratch_floats(const GemmShape& s) const = 0;
  virtual void run(const GemmCall& call, ThreadPool& pool) const = 0;
  // A provider that lays B out in a layout of its own for this shape returns its floats here
  // (0: none), and pack_b writes it; run then reads a call's packed_b instead of packing B again.
  // A plan keeps a weight packed this way while the weight does not change.
  virtual size_t packed_b_floats(const GemmShape&) const { return 0; }
  virtual void pack_b(const GemmShape&, const float* /*B*/, float* /*dst*/, ThreadPool&) const {}
};

// What a candidate's check found on the probe: "" when it passed, else "name: why"; and its
// worst error as a share of what the float64 gate allows (<= 1 passes; -1 when the check
// compares bits instead, or found no number to report).
struct Verdict {
  std::string why;
  double error = -1;
  Verdict(std::string w = {}, double e = -1) : why(std::move(w)), error(e) {}  // NOLINT: from a reason
};

// One way to compute a selectable problem, whatever it is (a GEMM provider, a convolution
// algorithm, the engine's own lowering, a generated kernel): the name and version the tuning
// cache records, and how it runs on the problem's probe inputs.
struct Candidate {
  std::string name, version;
  // Runs on the probe and compares with the problem's float64 reference. Unset for the
  // reference lowering itself, which needs no check.
  std::function<Verdict()> check;
  std::function<void()> run;  // one run on the probe, for timing (only after check passed)
};

struct Choice {
  int index = -1;           // into the candidates; -1 when none passed its check
  bool from_cache = false;  // the tuning cache's or a replayed choice, not measured now
  bool replayed = false;    // fast mode's replay of a recorded choice
  std::vector<std::string> rejected;  // "name: why" for every candidate that failed its check
  std::vector<double> ns;             // per candidate: ns per probe run when timed now, else 0
};

struct ChooseOptions {
  bool replay = true;   // honour fast mode's replayed choices
  bool cached = true;   // read and write the tuning cache
  bool time = true;     // time the passing candidates (else the first that passes wins)
  // Keep a choice that no comparison made (one candidate passed). Off where a failed check may
  // not last (a generated kernel's compiler missing for now).
  bool store_unmeasured = true;
  // The work of one probe run, for the roofline model of the selection's certificate (0: unknown).
  double flops = 0, bytes = 0;
};

// Select, the one procedure every selectable kernel goes through. For `key` (see tuning_key):
// a replayed choice (fast mode), else the tuning cache's, when a candidate has its name and
// version; else every candidate checked (a failure is recorded and the candidate dropped), the
// passing ones timed in interleaved rounds, the fastest stored in the cache. A replayed choice
// no candidate matches is an Error: the recorded run's bits depend on it. Measurements run one
// at a time in the process; a check may itself select (a lowering on probe buffers).
Choice choose(const std::string& key, const std::vector<Candidate>& candidates, const ChooseOptions& options = {});
// Every choice made (or read from the tuning cache or a replay) on this thread while a trace is
// alive is appended to its list as a certificate: the candidates, their checks and timings. A
// plan keeps the certificates of each launch's lowering (LaunchInfo::selections).
class SelectionTrace {
 public:
  explicit SelectionTrace(std::vector<SelectionCertificate>* into);
  ~SelectionTrace();
  SelectionTrace(const SelectionTrace&) = delete;
  SelectionTrace& operator=(const SelectionTrace&) = delete;

 private:
  std::vector<SelectionCertificate>* prev_;
};

// The last certificate of this thread's trace chose again: its choice failed a later check
// (a cached generated kernel that no longer gives the interpreter's bits), `chosen` runs instead.
void amend_certificate(int chosen, const std::string& why);

// A replayed choice this build cannot run (an Error that a fallback must not swallow).
struct UnreplayableChoice : Error {
  using Error::Error;
};
UnreplayableChoice unreplayable_choice(const std::string& key, const std::string& name, const std::string& version);

// The registered providers (the engine's own first). Tests may add or remove providers.
std::vector<std::shared_ptr<GemmProvider>>& gemm_providers();

struct Selection {
  const GemmProvider* provider = nullptr;
  bool from_cache = false;
  std::vector<std::string> rejected;  // "name: why" for every provider that failed the oracle
};

// The provider for this shape: from the tuning cache, else measured now (and cached).
// strict: only canonical providers take part.
Selection select_gemm(const GemmShape& s, bool strict);

// Tuning cache: SYNOROS_TUNING_CACHE (a file path), else $XDG_CACHE_HOME or ~/.cache
// /synoros/tuning.txt. A corrupt file is reported and rebuilt. clear_tuning_cache() forgets
// every choice (in memory and on disk).
std::string tuning_cache_path();
void clear_tuning_cache();
// Forgets the in-memory copy; the next selection reads the file again (as a new process would).
void reload_tuning_cache();
size_t tuning_cache_size();

// The cache file: the line "synoros-tuning-cache 1", one "key<TAB>provider<TAB>version" line
// per choice, then "checksum <16 hex digits>" (FNV-1a of everything before it).
struct TuningEntry {
  std::string provider, version;
};
std::string serialize_tuning_cache(const std::map<std::string, TuningEntry>& entries);
// Returns false, with why, when the text is not a valid cache file.
bool parse_tuning_cache(const std::string& text, std::map<std::string, TuningEntry>& out, std::string& why);

// The tuning cache for choices other than a GEMM provider (how a convolution is lowered): the
// key is completed with the ISA, strict mode (with the thread count the choice was timed at),
// the provider set and the CPU model.
std::string tuning_key(const std::string& what, bool strict);
void store_choice(const std::string& key, const std::string& name, const std::string& version);
void record_rejection(const std::string& key, const std::string& why);

// Times the candidates in interleaved rounds (one sample each per round, the best per candidate
// kept) so that a burst of noise on this machine hits all of them alike instead of the one whose
// turn it was. A sample repeats the call until it lasts ~5 us, so the clock's own cost does not
// decide between tiny kernels; the first call calibrates that and warms up (JIT, packing). At
// most 50 rounds, at least 3, about 20 ms per candidate in all. Returns the best ns per call.
std::vector<double> best_times_interleaved(const std::vector<std::function<void()>>& runs);

// Replaces the clock in best_times_interleaved (a test hook: given the number of candidates,
// the "measured" ns of each); an empty function restores the clock.
using SelectionTimer = std::function<std::vector<double>(size_t candidates)>;
void set_selection_timer(SelectionTimer timer);

// Fast mode's record of choices: every selection this process made or read (from the tuning
// cache or a replay) and the replayed ones it has not needed yet, one
// "key<TAB>kernel<TAB>version" line each, sorted; keys leave out the provider set and the CPU
// model. Checkpoints and run directories keep it, and replay_choices() pins those choices
// ahead of the cache and of measuring, replacing any earlier replay (throws Error, naming
// source, on a malformed record or one made under another instruction set). A replayed choice
// this build cannot run is an Error at selection. The replayed set's id is part of
// kernel_config(), so plans compiled before a replay are not reused after it.
std::string recorded_choices();
void clear_recorded_choices();
void replay_choices(const std::string& text, const std::string& source);
void clear_replayed_choices();
std::string replayed_choices_id();

// True when a launch's kernel label ("libxsmm+gather", "onednn-bwd", "engine-packed+fold")
// names a kernel that does not follow the canonical order: one only fast mode selects.
bool is_fast_mode_kernel(const std::string& label);

// Problems the selection saw rejected, for reports (cleared by clear_tuning_cache()).
std::vector<std::string> selection_rejections();

}  // namespace synoros::kernels
