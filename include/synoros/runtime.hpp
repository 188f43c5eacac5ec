// Compiled plans and the thread pool they run on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros {

namespace passes {
struct Placement;
}

// A fixed set of workers. Kernels split work into chunks whose boundaries depend only on the
// problem, or, where no output's arithmetic depends on them (the few-row GEMMs and the streamed
// blocked GEMM, whose chunks are sets of whole outputs), on the number of threads too: results
// are identical for any pool size.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(ctx, chunk) for every chunk in [0, chunks), spread over the workers and the caller.
  // Callers on several threads take turns, one job at a time (plans run from several threads
  // share the pool); a chunk that calls run on the pool it runs in does its chunks itself.
  void run(int64_t chunks, void (*fn)(const void* ctx, int64_t chunk), const void* ctx);

 private:
  void worker_loop();
  void stop_workers();
  void work(uint64_t gen);
  void wait_done(int64_t chunks);

  std::vector<std::thread> workers_;
  std::mutex job_mu_;  // held by the thread whose job the workers run
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  // (generation << 32) | next unclaimed chunk: a worker that wakes late for a finished job
  // can never claim a chunk of the next one.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_{0};  // chunks finished in the current job
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::atomic<int64_t> chunks_{0};
  void (*fn_)(const void*, int64_t) = nullptr;
  const void* ctx_ = nullptr;
  bool stop_ = false;
};

// The process-wide pool: SYNOROS_NUM_THREADS threads (default: all cores).
ThreadPool& default_pool();

// Largest working memory (arena) one plan may take; building a bigger one raises Error instead
// of exhausting the machine. Default: SYNOROS_MAX_PLAN_BYTES, else 3/4 of physical memory.
size_t plan_memory_limit();
void set_plan_memory_limit(size_t bytes);
void set_num_threads(int n);
int num_threads();

// Fast mode (default off; SYNOROS_FAST=1): kernel selection may also take kernels that round
// differently from the engine's canonical order (vendor GEMMs, oneDNN convolutions). Off, every
// choice is among candidates with identical bits, so results never depend on the tuning cache,
// the thread count or the instruction set. Plans compiled under one mode are not reused under
// the other.
bool fast_mode();
void set_fast_mode(bool on);

// One kernel call with everything resolved at compile time.
struct Launch {
  void (*fn)(const void* args, ThreadPool& pool);
  const void* args;
  ValueId node;
};

struct CompileOptions {
  bool check_finite = false;        // raise Error at the first op producing NaN or Inf
  bool plan_memory = true;          // share arena space between values whose lifetimes are
                                    // disjoint (SYNOROS_NO_PLAN=1 turns it off everywhere)
  bool keep_intermediates = false;  // every value stays readable after run() (verify needs it)
  bool fuse = true;                 // fuse elementwise chains (SYNOROS_NO_FUSION=1 turns it off)
  ThreadPool* pool = nullptr;       // default_pool() when null
  bool recompile = true;            // Recompile on the second run (see Plan::recompile; needs
                                    // generated kernels on: SYNOROS_NO_JIT=1 turns them off)
  // (output, parameter): the output replaces the parameter's value once the run is over (a
  // training step's updates). Where it is safe, the plan writes it straight into the parameter's
  // storage, as early as it can (Plan::written_into): every run() then changes the parameter
  // (and moves its version on), and a launch that throws leaves the updates written before it.
  std::vector<std::pair<ValueId, ValueId>> write_back;
};

// What one core of this machine can do, measured (synoros/profile.hpp: measure_peak).
struct MachinePeak {
  double gflops = 0;  // one core, f32 FMA, the active instruction set
  double gbps = 0;    // one core, streaming copy from DRAM: bytes read + written per second
  std::string isa;
  double read_gbps = 0;  // one core, streaming read from DRAM (what decoding's weights and caches take)
  // The same three measured on `threads` threads at once (the limit a parallel kernel runs
  // against: a core's clock with every core busy, the memory shared); equal to the one-core
  // figures at one thread.
  int threads = 1;
  double gflops_threads = 0, gbps_threads = 0, read_gbps_threads = 0;
};

// Recompile: fused elementwise groups replaced by kernels generated for them (a loop kernel
// rendered to C++, compiled by the system compiler, loaded; cached on disk). Each candidate runs
// against the interpreter's kernel on the first 65,536 elements of the plan's current data and
// is refused unless the bits are equal, is timed against it and taken only when faster; the
// choice is kept in the tuning cache like every selection. Errors leave the interpreter.
struct RecompileOptions {
  // The measured time of each launch, in launch order (a profile's, or a timed run's): only
  // the groups of launches taking at least min_share of their sum and min_ns each are
  // candidates (an epilogue's launch time includes its producer's). Empty: every group is one.
  std::vector<double> launch_ns;
  double min_share = 0.01;
  double min_ns = 20000;
  // With the machine's peak (measured) and launch times, the roofline model decides before any
  // compile or timing: a group whose launch is bound by memory and already takes at most
  // roofline_slack times its roofline time has too little to gain and is left to the interpreter.
  MachinePeak peak;
  double roofline_slack = 1.25;
};
struct RecompileEntry {
  ValueId node;         // the launch it runs in (its output node)
  std::string kernel;   // its loop kernel, as text
  std::string outcome;  // "generated", "interpreter" (faster), "rejected: ...", "failed: ..."
  double interpreter_ns = 0, generated_ns = 0;  // on the probe elements (0: a cached choice)
  double compile_seconds = 0;
  bool cached = false;  // the choice came from the tuning cache
};
struct RecompileReport {
  std::vector<RecompileEntry> entries;  // one per candidate group
  int generated() const;
  std::string table() const;
};

// Where one value lives in a plan's arena, and when (launch steps, inclusive; -1 = before the
// first launch, INT_MAX = never reused).
struct BufferInfo {
  ValueId value;
  size_t offset, bytes;
  int start, end;
  ValueId inplace_of;  // the value whose bytes it took over, or kNoValue
};

// One candidate of a kernel selection, as Select saw it.
struct CandidateRecord {
  std::string name, version;
  bool passed = false;  // it passed its check (a candidate after the first that passed is not
                        // checked when the choice is not timed, nor any when it was read)
  bool checked = false;
  std::string why;    // why it failed ("" when it passed or was not checked)
  double error = -1;  // worst |result - float64| / allowed on the probe (<= 1 passes); -1: the
                      // reference lowering, a bit-for-bit check, or not checked
  double ns = 0;      // measured time of one probe run (0: not timed)
};

// A selection certificate: for one selectable problem (its tuning key), the candidates, each
// one's float64 check against its bound and its measured time, the one chosen and where the
// choice came from, and the problem's work for the roofline model.
struct SelectionCertificate {
  std::string key;
  // "measured", "only candidate", "first that passed" (not timed), "tuning cache", "replayed",
  // "none passed", "checked again, refused" (a cached choice that failed its check now)
  std::string source;
  int chosen = -1;     // index into candidates
  std::vector<CandidateRecord> candidates;
  double flops = 0, bytes = 0;  // one probe run's (0: unknown)
};

// What one launch computes: the ops it runs (a fused group lists all of them, producer first)
// and the values it reads from memory.
struct LaunchInfo {
  std::vector<ValueId> ops;
  std::vector<ValueId> reads;
  std::string kernel;  // the kernel selection pinned (e.g. engine-packed, openblas), or the op
  std::vector<SelectionCertificate> selections;  // the choices its lowering (and Recompile) made
};

namespace kernels::jit {
struct LoopKernel;
}

// A compiled program: a flat list of launches over pre-resolved buffers. run() allocates nothing.
class Plan {
 public:
  Plan(const Graph& g, std::vector<ValueId> outputs, CompileOptions opts = {});
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // Runs the launches. The second run of a plan compiled with CompileOptions::recompile also
  // times each launch and then recompiles its hot groups (with those times), once.
  void run();
  // run() calling after(i) once launch i has finished (data-parallel training sends each
  // gradient as soon as it is final). A run that checks values or recompiles calls
  // after(launches().size() - 1) once, at the end.
  void run_observed(const std::function<void(size_t launch)>& after);
  // Recompile now (see RecompileOptions); never while another thread runs this plan.
  RecompileReport recompile(const RecompileOptions& opts = {});
  // The loop kernels of its launches: fused groups and row kernels (what Recompile and the
  // renderers work on).
  std::vector<const kernels::jit::LoopKernel*> loop_kernels() const;

  // Inputs are plan-owned buffers. set_input checks dtype and shape against the input node.
  void set_input(ValueId input, const HostTensor& value);
  void set_input(const std::string& name, const HostTensor& value);
  template <class T>
  T* data(ValueId v) {
    return static_cast<T*>(ptr(v));
  }
  void* ptr(ValueId v);
  // Copy of any computed value (outputs; intermediates are also kept in this unplanned plan).
  HostTensor read(ValueId v) const;

  const Graph& graph() const { return graph_; }
  // Runs later launches on `pool` (results never depend on its size); null: the default pool.
  void set_pool(ThreadPool* pool) { pool_ = pool; }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  // The (output, parameter) pairs it was compiled with, and the parameter whose storage an output
  // is written into during the run (kNoValue: the output has bytes of its own).
  const std::vector<std::pair<ValueId, ValueId>>& write_back() const;
  ValueId written_into(ValueId output) const;
  const std::vector<Launch>& launches() const { return launches_; }
  const std::vector<LaunchInfo>& launch_info() const;
  // The kernel configuration the plan was compiled under ("avx512", "avx2 strict", ...).
  const std::string& compiled_for() const;
  ValueId find_input(const std::string& name) const;
  size_t arena_bytes() const;      // peak bytes of all planned values
  size_t unplanned_bytes() const;  // what the same values take with no sharing
  size_t scratch_bytes() const;    // kernel scratch (GEMM packing, gathers), outside the arena
  bool keeps_intermediates() const;
  std::vector<BufferInfo> buffers() const;
  std::string describe() const;    // launches, buffer offsets and lifetimes, peak bytes

 private:
  struct Impl;
  void run_checked();
  void run_and_recompile();
  void bind_buffers(const passes::Placement& p);
  Graph graph_;
  std::vector<ValueId> outputs_;
  std::vector<Launch> launches_;
  std::vector<void*> ptrs_;
  ThreadPool* pool_;
  bool check_finite_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace synoros
