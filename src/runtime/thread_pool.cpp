#include <cstdlib>
#include <string>

#include "synoros/runtime.hpp"

namespace synoros {

ThreadPool::ThreadPool(int threads) {
  if (threads < 1) throw Error("ThreadPool: thread count must be >= 1, got " + std::to_string(threads));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(uint64_t) {
  for (;;) {
    int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) break;
    fn_(ctx_, c);
  }
}

void ThreadPool::worker_loop() {
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
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(int64_t chunks, void (*fn)(const void*, int64_t), const void* ctx) {
  if (chunks <= 0) return;
  if (workers_.empty() || chunks == 1) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  chunks_ = chunks;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  work(0);
  while (pending_.load(std::memory_order_acquire) != 0) __builtin_ia32_pause();
}

namespace {
int env_threads() {
  if (const char* s = std::getenv("SYNOROS_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n >= 1) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc ? int(hc) : 1;
}
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> p = std::make_unique<ThreadPool>(env_threads());
  return p;
}
}  // namespace

ThreadPool& default_pool() { return *pool_slot(); }
void set_num_threads(int n) { pool_slot() = std::make_unique<ThreadPool>(n); }
int num_threads() { return default_pool().size(); }

}  // namespace synoros
