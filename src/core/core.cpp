#include "synoros/core.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "core/thread_block_cache.hpp"
#include "synoros/config.hpp"

namespace synoros {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

namespace {
bool shape_fits(const Shape& s, DType t) {
  int64_t n = 1, bytes = 0;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  return !__builtin_mul_overflow(n, int64_t(dtype_size(t)), &bytes);
}
}  // namespace

void check_shape(const Shape& s, DType t, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw Error(what + ": negative dimension in shape " + shape_str(s));
    if (__builtin_mul_overflow(n, d, &n)) throw Error(what + ": shape " + shape_str(s) + " has more than 2^63 elements");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, int64_t(dtype_size(t)), &bytes))
    throw Error(what + ": shape " + shape_str(s) + " of " + dtype_name(t) + " needs more than 2^63 bytes");
}

void check_shape(const Shape& s, DType t, const char* kind, const std::string& name) {
  if (!shape_fits(s, t)) check_shape(s, t, std::string(kind) + " '" + name + "'");
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int normalize_axis(int64_t axis, size_t rank, const char* op, const Shape& shape) {
  int64_t r = int64_t(rank);
  int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                shape_str(shape));
  }
  return int(a);
}

namespace {
std::atomic<size_t> g_live_bytes{0};
size_t& limit_slot() {
  static size_t limit = [] {
    if (auto v = config::integer("SYNOROS_MAX_MEMORY_BYTES")) return size_t(*v);
    return default_memory_limit();
  }();
  return limit;
}
std::string gib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(size_t(1) << 30));
  return s;
}
}  // namespace

size_t default_memory_limit() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  size_t mem = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : SIZE_MAX;
  // A container's own limit (cgroup v2), when it is lower: past it the kernel kills the process.
  if (FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r")) {
    unsigned long long cg = 0;
    if (std::fscanf(f, "%llu", &cg) == 1 && cg > 0) mem = std::min<size_t>(mem, size_t(cg));
    std::fclose(f);
  }
  return mem == SIZE_MAX ? SIZE_MAX : mem / 4 * 3;
}
size_t memory_limit() { return limit_slot(); }
void set_memory_limit(size_t bytes) { limit_slot() = bytes; }
size_t live_buffer_bytes() { return g_live_bytes.load(std::memory_order_relaxed); }

namespace {
// Small buffers freed by a thread, kept for that thread's next buffers of the same size (see
// ThreadBlockCache).
constexpr size_t kRecycledBytes = 4096;
void free_buffer(void* p) { std::free(p); }
using RecycledBuffers = ThreadBlockCache<16, free_buffer>;
void* recycled_buffer(size_t rounded) { return RecycledBuffers::take(rounded); }
bool recycle_buffer(size_t rounded, void* p) { return rounded <= kRecycledBytes && RecycledBuffers::keep(rounded, p); }
}  // namespace

namespace {
// A mapping of its own for a buffer of a huge page and more (its pages zero, its address space
// returned whole when it is freed), aligned to a huge page: `bytes` rounded up to whole small
// pages. Null when the mapping cannot be had.
void* map_huge_aligned(size_t bytes, bool advise) {
  const size_t page = 4096, length = (bytes + page - 1) / page * page, span = length + kHugePageBytes - page;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw),
                  aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) munmap(raw, aligned - start);
  if (const uintptr_t end = aligned + length; end < start + span)
    munmap(reinterpret_cast<void*>(end), start + span - end);
  // The whole huge pages only: a tail in one would be backed by all 2 MiB of it. Advice only:
  // where transparent huge pages are off, or none is free, the kernel backs the range with small
  // pages and nothing else changes.
  if (advise) madvise(reinterpret_cast<void*>(aligned), bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}
void* buffer_memory(size_t bytes, bool huge_pages) {
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) return nullptr;
  if (bytes < kHugePageBytes) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  return map_huge_aligned(bytes, huge_pages);
}
}  // namespace

void* allocate_buffer_memory(size_t bytes) { return buffer_memory(bytes, !config::flag("SYNOROS_NO_HUGE_PAGES")); }

void release_buffer_memory(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) return std::free(p);
  munmap(p, (bytes + 4095) / 4096 * 4096);
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device.kind != Device::Kind::CPU) throw Error("Buffer: only CPU buffers can be allocated here");
  if (bytes > SIZE_MAX - 64) throw Error("out of memory: cannot allocate " + std::to_string(bytes) + " bytes");
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  const bool huge_pages = rounded >= kHugePageBytes && !config::flag("SYNOROS_NO_HUGE_PAGES");
  size_t live = g_live_bytes.fetch_add(rounded, std::memory_order_relaxed) + rounded;
  if (live > memory_limit() || live < rounded) {
    g_live_bytes.fetch_sub(rounded, std::memory_order_relaxed);
    throw Error("out of memory: a buffer of " + gib(rounded) + " would bring the engine's memory to " + gib(live) +
                ", above its limit of " + gib(memory_limit()) + " (SYNOROS_MAX_MEMORY_BYTES)");
  }
  data_ = recycled_buffer(rounded);
  if (!data_) data_ = buffer_memory(rounded, huge_pages);
  if (!data_) {
    g_live_bytes.fetch_sub(rounded, std::memory_order_relaxed);
    throw Error("out of memory: cannot allocate " + gib(rounded));
  }
  if (rounded < kHugePageBytes) std::memset(data_, 0, rounded);  // a mapping of its own is zero already
}

Buffer::Buffer(void* external, size_t bytes, std::shared_ptr<void> owner, Device device)
    : data_(external), bytes_(bytes), device_(device), owner_(std::move(owner)) {
  if (!owner_) throw Error("Buffer: borrowed memory needs an owner that keeps it alive");
  if (!borrowable(external, bytes))
    throw Error("Buffer: borrowed memory must be 64-byte aligned and a non-zero multiple of 64 bytes, got " +
                std::to_string(bytes) + " bytes at offset " + std::to_string(reinterpret_cast<uintptr_t>(external) % 64));
}

Buffer::~Buffer() {
  if (owner_) return;  // the owner frees it; it was never counted
  const size_t rounded = bytes_ == 0 ? 64 : (bytes_ + 63) / 64 * 64;
  if (!recycle_buffer(rounded, data_)) release_buffer_memory(data_, rounded);
  g_live_bytes.fetch_sub(rounded, std::memory_order_relaxed);
}

namespace {
// Buffer objects (with their control block) freed by a thread, kept for its next host tensors
// (see ThreadBlockCache): an eager step makes and frees a few every step.
struct BufferTag;
using BufferAllocator = RecyclingAllocator<Buffer, ThreadBlockCache<32, delete_block, BufferTag>>;
}  // namespace

HostTensor::HostTensor(DType t, Shape s) : dtype(t), shape(std::move(s)) {
  check_shape(shape, dtype, "HostTensor");
  buffer = std::allocate_shared<Buffer>(BufferAllocator(), bytes());
}

double HostTensor::get(int64_t i) const {
  switch (dtype) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::I64: return double(data<int64_t>()[i]);
  }
  return 0;
}

void HostTensor::set(int64_t i, double v) {
  buffer->mark_modified();
  switch (dtype) {
    case DType::F32: data<float>()[i] = float(v); break;
    case DType::F64: data<double>()[i] = v; break;
    case DType::I32: data<int32_t>()[i] = int32_t(v); break;
    case DType::I64: data<int64_t>()[i] = int64_t(v); break;
  }
}

}  // namespace synoros
