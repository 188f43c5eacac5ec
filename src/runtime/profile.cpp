#include "synoros/profile.hpp"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/config.hpp"

namespace synoros {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Independent FMA chains, enough to cover the FMA latency on every port.
__attribute__((target("avx512f"))) double fma_rate_avx512(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  auto t0 = Clock::now();
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  double s = seconds_since(t0);
  alignas(64) float out[16];
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  _mm512_store_ps(out, sum);
  asm volatile("" : : "r"(out) : "memory");
  return double(iters) * 12 * 16 * 2 / s;
}

__attribute__((target("avx2,fma"))) double fma_rate_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  auto t0 = Clock::now();
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  double s = seconds_since(t0);
  alignas(32) float out[8];
  __m256 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  _mm256_store_ps(out, sum);
  asm volatile("" : : "r"(out) : "memory");
  return double(iters) * 12 * 8 * 2 / s;
}

double fma_rate_scalar(int64_t iters) {
  float acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto t0 = Clock::now();
  for (int64_t k = 0; k < iters; ++k)
    for (int i = 0; i < 8; ++i) acc[i] = acc[i] * 0.999f + 0.001f;
  double s = seconds_since(t0);
  asm volatile("" : : "r"(acc) : "memory");
  return double(iters) * 8 * 2 / s;
}

std::string launch_label(const Graph& g, const LaunchInfo& li) {
  std::string l;
  for (ValueId v : li.ops) l += (l.empty() ? "" : "+") + std::string(op_name(g.node(v).op));
  return l;
}
// Reads n words (a multiple of 32) once, in address order; returns their sum.
__attribute__((target("avx2"))) uint64_t read_stream_avx2(const uint64_t* x, size_t n) {
  __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (size_t i = 0; i < n; i += 16)
    for (int j = 0; j < 4; ++j)
      a[j] = _mm256_add_epi64(a[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(x + i + 4 * size_t(j))));
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), _mm256_add_epi64(_mm256_add_epi64(a[0], a[1]), _mm256_add_epi64(a[2], a[3])));
  return t[0] + t[1] + t[2] + t[3];
}
__attribute__((target("avx512f"))) uint64_t read_stream_avx512(const uint64_t* x, size_t n) {
  __m512i a[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  for (size_t i = 0; i < n; i += 32)
    for (int j = 0; j < 4; ++j) a[j] = _mm512_add_epi64(a[j], _mm512_load_si512(x + i + 8 * size_t(j)));
  alignas(64) uint64_t t[8];
  _mm512_store_si512(t, _mm512_add_epi64(_mm512_add_epi64(a[0], a[1]), _mm512_add_epi64(a[2], a[3])));
  uint64_t sum = 0;
  for (uint64_t v : t) sum += v;
  return sum;
}
uint64_t read_stream_scalar(const uint64_t* x, size_t n) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] += x[i + j];
  uint64_t s = 0;
  for (uint64_t v : acc) s += v;
  return s;
}

// Bytes per stream buffer of measure_peak: twice the last-level cache, within [64, 512] MiB.
size_t stream_bytes() {
  size_t llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  if (long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE); l3 > 0) llc = size_t(l3);
#endif
  return std::clamp<size_t>(2 * llc, size_t(64) << 20, size_t(512) << 20) / 4096 * 4096;
}

// Runs body(t, rep) for t in [0, threads) on that many threads at once (the caller is thread 0),
// reps times, every thread starting each rep together; returns each rep's wall time, from the
// first thread's start to the last one's end (with more threads than cores, threads that run one
// after another are not counted as running at once).
template <class Body>
std::vector<double> run_together(int threads, int reps, Body body) {
  std::vector<Clock::time_point> start(size_t(reps) * size_t(threads)), end(start.size());
  std::barrier sync(threads);
  std::atomic<int> go{0};  // 1: run, -1: a thread could not be started
  auto work = [&](int t) {
    while (go.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    if (go.load(std::memory_order_acquire) < 0) return;
    for (int rep = 0; rep < reps; ++rep) {
      sync.arrive_and_wait();
      const size_t i = size_t(rep) * size_t(threads) + size_t(t);
      start[i] = Clock::now();
      body(t, rep);
      end[i] = Clock::now();
    }
  };
  std::vector<std::thread> others;
  try {
    for (int t = 1; t < threads; ++t) others.emplace_back(work, t);
  } catch (const std::system_error& e) {
    go.store(-1, std::memory_order_release);
    for (std::thread& th : others) th.join();
    throw Error("peak: cannot start " + std::to_string(threads) + " threads: " + e.what());
  }
  go.store(1, std::memory_order_release);
  work(0);
  for (std::thread& th : others) th.join();
  std::vector<double> seconds(static_cast<size_t>(reps));
  for (int rep = 0; rep < reps; ++rep) {
    const auto first = start.begin() + rep * threads, last = end.begin() + rep * threads;
    seconds[size_t(rep)] =
        std::chrono::duration<double>(*std::max_element(last, last + threads) - *std::min_element(first, first + threads))
            .count();
  }
  return seconds;
}
}  // namespace

MachinePeak measure_peak(int threads) {
  if (threads < 1 || threads > config::kMaxThreads)
    throw Error("peak: threads must be in [1, " + std::to_string(config::kMaxThreads) + "], got " + std::to_string(threads));
  MachinePeak p;
  p.threads = threads;
  kernels::Isa isa = kernels::active_isa();
  p.isa = kernels::isa_name(isa);
  constexpr int64_t kVectorIters = 2'000'000, kScalarIters = 5'000'000;
  auto fma_rate = [isa] {
    return isa == kernels::Isa::Avx512 ? fma_rate_avx512(kVectorIters)
           : isa == kernels::Isa::Avx2 ? fma_rate_avx2(kVectorIters)
                                       : fma_rate_scalar(kScalarIters);
  };
  // The flops of one fma_rate() call (12 chains of 16 or 8 lanes, or 8 scalar chains).
  const double fma_flops = isa == kernels::Isa::Avx512 ? double(kVectorIters) * 12 * 16 * 2
                           : isa == kernels::Isa::Avx2 ? double(kVectorIters) * 12 * 8 * 2
                                                       : double(kScalarIters) * 8 * 2;
  // Streams from DRAM: buffers of twice the last-level cache (at least 64 MiB, at most 512 MiB;
  // a VM may report a cache of hundreds of MiB, and 64 MiB then measured the cache). They are
  // the measurement's own (outside the engine's memory limit, which a loaded model may fill);
  // where the large ones cannot be had, 64 MiB ones. Allocated as the engine's buffers are (in
  // huge pages where the system has them), so the limit is what the engine's own streams reach.
  struct Stream {
    size_t length;
    void* mem;
    explicit Stream(size_t n) : length(n), mem(allocate_buffer_memory(n)) {}
    ~Stream() { release_buffer_memory(mem, length); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    void* get() const { return mem; }
  };
  size_t bytes = stream_bytes();
  auto src = std::make_unique<Stream>(bytes), dst = std::make_unique<Stream>(bytes);
  if (!src->get() || !dst->get()) {
    src.reset();
    dst.reset();
    bytes = size_t(64) << 20;
    src = std::make_unique<Stream>(bytes);
    dst = std::make_unique<Stream>(bytes);
    if (!src->get() || !dst->get()) throw Error("peak: cannot allocate two buffers of 64 MiB to measure the bandwidth");
  }
  std::memset(src->get(), 1, bytes);
  std::memset(dst->get(), 2, bytes);
  auto read_stream = [&](const void* q, size_t n_bytes) {
    const uint64_t* x = static_cast<const uint64_t*>(q);
    const size_t n = n_bytes / sizeof(uint64_t);
    return isa == kernels::Isa::Avx512 ? read_stream_avx512(x, n)
           : isa == kernels::Isa::Avx2 ? read_stream_avx2(x, n)
                                       : read_stream_scalar(x, n);
  };
  // The best rates of n threads running at once, each started together with the others (a core's
  // clock with every core busy is what a parallel kernel gets): the FMA chains over 15 reps, then
  // the streams split across the threads in whole pages, even reps reading both buffers (four
  // times the cache and more, before the copy touches them), odd reps copying. A rep's rate is
  // all the threads' work over its wall time. (The buffers were first touched by this thread: on
  // a machine of several memory nodes, the several-thread figures are one node's memory.)
  struct Rates {
    double gflops = 0, copy_gbps = 0, read_gbps = 0;
  };
  auto measure = [&](int n) {
    Rates r;
    for (double secs : run_together(n, 15, [&](int, int) { fma_rate(); }))
      r.gflops = std::max(r.gflops, double(n) * fma_flops / secs / 1e9);
    const size_t slice = bytes / size_t(n) / 4096 * 4096;
    auto offset = [&](int t) { return size_t(t) * slice; };
    auto length = [&](int t) { return t + 1 == n ? bytes - offset(t) : slice; };
    const std::vector<double> secs = run_together(n, 6, [&](int t, int rep) {
      char* s = static_cast<char*>(src->get()) + offset(t);
      char* d = static_cast<char*>(dst->get()) + offset(t);
      if (rep % 2 == 0) {
        const uint64_t sum = read_stream(s, length(t)) + read_stream(d, length(t));
        asm volatile("" : : "r"(sum) : "memory");
      } else {
        std::memcpy(d, s, length(t));
      }
    });
    for (size_t rep = 0; rep < secs.size(); ++rep) {
      double& best = rep % 2 == 0 ? r.read_gbps : r.copy_gbps;
      best = std::max(best, 2.0 * double(bytes) / secs[rep] / 1e9);
    }
    return r;
  };
  const Rates one = measure(1), all = threads > 1 ? measure(threads) : one;
  p.gflops = one.gflops, p.gbps = one.copy_gbps, p.read_gbps = one.read_gbps;
  p.gflops_threads = all.gflops, p.gbps_threads = all.copy_gbps, p.read_gbps_threads = all.read_gbps;
  return p;
}

LaunchWork launch_work(const Plan& plan, size_t k) {
  const Graph& g = plan.graph();
  const LaunchInfo& info = plan.launch_info().at(k);
  LaunchWork w;
  for (ValueId v : info.ops) w.flops += op_info(g.node(v).op).cost(g, g.node(v)).flops;
  // Memory traffic: what the launch reads from memory and the one value it writes.
  for (ValueId r : info.reads) w.bytes += double(numel(g.shape(r)) * int64_t(dtype_size(g.dtype(r))));
  const Node& out = g.node(plan.launches()[k].node);
  w.bytes += double(numel(out.shape) * int64_t(dtype_size(out.dtype)));
  return w;
}

Profile profile(Plan& plan, int iterations, const MachinePeak& peak) {
  if (iterations < 1) throw Error("profile: iterations must be >= 1");
  const Graph& g = plan.graph();
  const auto& launches = plan.launches();
  const auto& info = plan.launch_info();
  ThreadPool& pool = default_pool();
  // A step that writes its updates into its parameters would apply them once per run: their
  // values are put back afterwards (and their version moved on), so profiling changes nothing.
  std::vector<std::pair<HostTensor*, std::vector<char>>> kept;
  for (const auto& [out, leaf] : plan.write_back())
    if (plan.written_into(out) == leaf) {
      HostTensor* h = g.node(leaf).data.get();
      const char* b = static_cast<const char*>(h->buffer->data());
      kept.push_back({h, std::vector<char>(b, b + h->bytes())});
    }
  struct PutBack {
    std::vector<std::pair<HostTensor*, std::vector<char>>>& kept;
    ~PutBack() {
      for (auto& [h, bytes] : kept) {
        std::memcpy(h->buffer->data(), bytes.data(), bytes.size());
        h->buffer->mark_modified();
      }
    }
  } put_back{kept};
  plan.run();  // warm up (and check inputs are fed)
  std::vector<std::vector<double>> samples(launches.size());
  std::vector<double> totals;
  for (int it = 0; it < iterations; ++it) {
    auto run0 = Clock::now();
    for (size_t k = 0; k < launches.size(); ++k) {
      auto t0 = Clock::now();
      launches[k].fn(launches[k].args, pool);
      samples[k].push_back(seconds_since(t0) * 1e9);
    }
    totals.push_back(seconds_since(run0) * 1e9);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Profile p;
  p.peak = peak;
  p.total_ns = median(totals);
  for (size_t k = 0; k < launches.size(); ++k) {
    ProfileEntry e;
    e.node = launches[k].node;
    e.label = launch_label(g, info[k]);
    if (info[k].kernel != op_name(g.node(e.node).op)) e.label += " [" + info[k].kernel + "]";
    e.fast = kernels::is_fast_mode_kernel(info[k].kernel);
    e.ns = median(samples[k]);
    LaunchWork w = launch_work(plan, k);
    e.flops = w.flops, e.bytes = w.bytes;
    p.entries.push_back(e);
  }
  return p;
}

std::string Profile::table() const {
  std::vector<const ProfileEntry*> order;
  double sum = 0;
  for (const auto& e : entries) order.push_back(&e), sum += e.ns;
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->ns > b->ns; });
  std::ostringstream o;
  o << std::fixed;
  o << "run " << std::setprecision(1) << total_ns << " ns (launches " << sum << " ns); peak "
    << std::setprecision(1) << peak.gflops << " GFLOP/s, " << peak.gbps << " GB/s DRAM (" << peak.isa
    << ", one core)\n";
  o << std::left << std::setw(8) << "node" << std::setw(34) << "launch" << std::right << std::setw(12)
    << "ns" << std::setw(8) << "share" << std::setw(11) << "GFLOP/s" << std::setw(9) << "GB/s"
    << std::setw(10) << "of peak" << "  order\n";
  for (const ProfileEntry* e : order) {
    // Share of the machine's limit: compute for launches with arithmetic, else memory bandwidth
    // (which small, cache-resident launches can exceed).
    double of_peak = e->flops >= e->bytes ? (peak.gflops > 0 ? e->gflops() / peak.gflops : 0)
                                          : (peak.gbps > 0 ? e->gbps() / peak.gbps : 0);
    std::string label = e->label.size() > 32 ? e->label.substr(0, 29) + "..." : e->label;
    o << std::left << std::setw(8) << ("%" + std::to_string(e->node)) << std::setw(34) << label << std::right
      << std::setprecision(1) << std::setw(12) << e->ns << std::setw(7) << (sum > 0 ? 100 * e->ns / sum : 0) << "%"
      << std::setprecision(2) << std::setw(11) << e->gflops() << std::setw(9) << e->gbps()
      << std::setprecision(1) << std::setw(9) << 100 * of_peak << "%  " << (e->fast ? "fast" : "canonical") << "\n";
  }
  return o.str();
}

std::vector<std::pair<std::string, double>> Profile::by_leading_op() const {
  std::map<std::string, double> ns;
  for (const ProfileEntry& e : entries) ns[e.label.substr(0, e.label.find_first_of("+ ["))] += e.ns;
  std::vector<std::pair<std::string, double>> out(ns.begin(), ns.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

std::string Profile::by_leading_op_table() const {
  double sum = 0;
  for (const ProfileEntry& e : entries) sum += e.ns;
  std::ostringstream o;
  o << std::fixed << "time by leading op (a fused group counts under its first op: a GEMM with its epilogue is einsum)\n";
  for (const auto& [op, ns] : by_leading_op())
    o << "  " << std::left << std::setw(24) << op << std::right << std::setprecision(1) << std::setw(14) << ns
      << " ns" << std::setw(7) << (sum > 0 ? 100 * ns / sum : 0) << "%\n";
  return o.str();
}

std::string Profile::chrome_trace() const {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3);
  o << "{\"traceEvents\": [\n";
  double ts = 0;
  for (size_t k = 0; k < entries.size(); ++k) {
    const ProfileEntry& e = entries[k];
    o << (k ? ",\n" : "") << "  {\"name\": \"" << e.label << "\", \"cat\": \"launch\", \"ph\": \"X\", \"ts\": "
      << ts / 1e3 << ", \"dur\": " << e.ns / 1e3 << ", \"pid\": 0, \"tid\": 0, \"args\": {\"node\": " << e.node
      << ", \"fast\": " << (e.fast ? "true" : "false") << ", \"flops\": " << e.flops << ", \"bytes\": " << e.bytes << "}}";
    ts += e.ns;
  }
  o << "\n], \"displayTimeUnit\": \"ns\"}\n";
  return o.str();
}

}  // namespace synoros
