#include <algorithm>
#include <cstdlib>
#include <string>
#include <system_error>

#include "synoros/config.hpp"

#include "synoros/runtime.hpp"

namespace synoros {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw Error("ThreadPool: thread count must be >= 1, got " + std::to_string(threads));
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    stop_workers();  // the threads already started are joined, not left to std::terminate
    throw Error("threads: cannot start " + std::to_string(threads) + " threads: " + e.what());
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(uint64_t gen) {
  for (;;) {
    uint64_t cur = claim_.load(std::memory_order_acquire);
    if ((cur >> 32) != (gen & 0xffffffffu)) return;  // a later job already started
    int64_t c = int64_t(cur & 0xffffffffu);
    if (c >= chunks_.load(std::memory_order_acquire)) return;
    if (!claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
    // Claimed chunk c of this job: the job (fn_, ctx_, chunks_) stays current until it is done.
    fn_(ctx_, c);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks_.load(std::memory_order_relaxed)) {
      // The caller may be asleep in wait_done: taking the lock orders this wake after its check.
      { std::lock_guard<std::mutex> lk(done_mu_); }
      done_cv_.notify_one();
    }
  }
}

namespace {
// The pool whose job the calling thread is running (a worker: always its own pool).
thread_local const ThreadPool* t_in_job = nullptr;
}  // namespace

void ThreadPool::worker_loop() {
  t_in_job = this;
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: plans issue many short launches back to back.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      __builtin_ia32_pause();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_.load() != seen; });
      gen = generation_.load();
    }
    seen = gen;
    if (stop_) return;
    work(gen);
  }
}

void ThreadPool::wait_done(int64_t chunks) {
  // The caller already ran every chunk it could claim; what is left is in a worker's hands.
  // Spin a little, then sleep: a worker descheduled by another process must not cost a spin.
  for (int spin = 0; spin < 4000; ++spin) {
    if (done_.load(std::memory_order_acquire) == chunks) return;
    __builtin_ia32_pause();
  }
  std::unique_lock<std::mutex> lk(done_mu_);
  done_cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == chunks; });
}

void ThreadPool::run(int64_t chunks, void (*fn)(const void*, int64_t), const void* ctx) {
  if (chunks <= 0) return;
  if (workers_.empty() || chunks == 1 || t_in_job == this) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    return;
  }
  if (chunks > int64_t(0xffffffffu)) throw Error("ThreadPool: too many chunks in one launch");
  // One job at a time: the fields below describe it until every chunk is done.
  std::lock_guard<std::mutex> job(job_mu_);
  struct InJob {
    const ThreadPool* outer = t_in_job;
    explicit InJob(const ThreadPool* p) { t_in_job = p; }
    ~InJob() { t_in_job = outer; }
  } in_job(this);
  uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  // Close the previous job first: a worker still looking at it can no longer claim anything, so
  // the new job's fields below are never paired with a stale claim.
  claim_.store(((gen & 0xffffffffu) << 32) | 0xffffffffu, std::memory_order_seq_cst);
  fn_ = fn;
  ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  chunks_.store(chunks, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    claim_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
  }
  cv_.notify_all();
  work(gen);
  wait_done(chunks);
}

namespace {
int env_threads() {
  if (auto n = config::integer("SYNOROS_NUM_THREADS")) return int(*n);
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(std::min<unsigned>(hc, unsigned(config::kMaxThreads))) : 1;
}
std::unique_ptr<ThreadPool> make_pool(int n) {
  if (n < 1 || n > config::kMaxThreads)
    throw Error("threads: " + std::to_string(n) + " is out of range (1 to " + std::to_string(config::kMaxThreads) + ")");
  return std::make_unique<ThreadPool>(n);
}
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> p = make_pool(env_threads());
  return p;
}
}  // namespace

ThreadPool& default_pool() { return *pool_slot(); }

void set_num_threads(int n) {
  std::unique_ptr<ThreadPool> p = make_pool(n);  // the old pool stays if this throws
  pool_slot() = std::move(p);
}
int num_threads() { return default_pool().size(); }

}  // namespace synoros
