// Core vocabulary: element types, shapes, devices, errors and host buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace synoros {

// Every error the engine raises on bad input. The message names the op, the shapes and the cause.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

enum class DType : uint8_t { F32, F64, I32, I64 };

constexpr size_t dtype_size(DType t) {
  return (t == DType::F32 || t == DType::I32) ? 4 : 8;
}
constexpr bool is_float(DType t) { return t == DType::F32 || t == DType::F64; }
const char* dtype_name(DType t);

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
// Checks that a shape is usable: no negative dimension, and its element count and byte size (at
// dtype t) fit in 63 bits. Throws Error naming `what` and the shape. Every shape that enters the
// engine (leaves, graph nodes, host tensors) passes through here, so numel() never wraps.
void check_shape(const Shape& s, DType t, const std::string& what);
// The same, naming `kind 'name'` ("input 'x'"), a string built only when the check fails.
void check_shape(const Shape& s, DType t, const char* kind, const std::string& name);
std::string shape_str(const Shape& s);
// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(const Shape& s);
// Normalises a possibly negative axis against rank; throws Error naming `op` when out of range.
int normalize_axis(int64_t axis, size_t rank, const char* op, const Shape& shape);

// Where a buffer lives. Providers and plans are per device; today only the CPU executes.
struct Device {
  enum class Kind : uint8_t { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
};

// The most bytes the engine's live buffers may hold together (SYNOROS_MAX_MEMORY_BYTES; default
// 3/4 of physical memory). An allocation past it is an Error naming the sizes, not a crash or a
// visit from the out-of-memory killer.
size_t memory_limit();
void set_memory_limit(size_t bytes);
size_t default_memory_limit();  // 3/4 of physical memory (SIZE_MAX when unknown)
size_t live_buffer_bytes();

// Memory for a buffer (`bytes` rounded up to 64), zero, released with release_buffer_memory(p,
// bytes): 64-byte aligned; from kHugePageBytes on a mapping of its own that starts on a huge page,
// its whole huge pages advised into transparent huge pages (MADV_HUGEPAGE), so a stream through
// a model's weights or a key/value cache misses the TLB once per 2 MiB rather than once per
// 4 KiB (docs/benchmarks.md has the decoding step before and after). SYNOROS_NO_HUGE_PAGES=1
// leaves them in the system's default pages. Where the system compacts memory for advised ranges
// (its `defrag` setting), making a large buffer may wait for that. Null when the memory cannot
// be had.
constexpr size_t kHugePageBytes = size_t(2) << 20;
void* allocate_buffer_memory(size_t bytes);
void release_buffer_memory(void* p, size_t bytes);

// A 64-byte aligned, owned allocation on one device.
class Buffer {
 public:
  Buffer(size_t bytes, Device device = {});
  // Memory owned elsewhere (a NumPy array, a PyTorch tensor), kept alive by `owner` while the
  // buffer lives. It must have the layout of the engine's own buffers: 64-byte aligned, its size
  // rounded up to 64 bytes readable (kernels may load whole vectors); see borrowable().
  Buffer(void* external, size_t bytes, std::shared_ptr<void> owner, Device device = {});
  static bool borrowable(const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % 64 == 0 && bytes % 64 == 0 && bytes > 0;
  }
  bool borrowed() const { return owner_ != nullptr; }
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Bumped on every change made through the engine (optimizer updates, Tensor::assign,
  // HostTensor::set). Plans re-pack weights they keep in a kernel's layout when it moves.
  // Code that writes a buffer's memory directly must call mark_modified() afterwards.
  uint64_t version() const { return version_; }
  void mark_modified() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  uint64_t version_ = 0;
  std::shared_ptr<void> owner_;  // set for borrowed memory
};

// A dense row-major host tensor: what users feed in and read out.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::shared_ptr<Buffer> buffer;

  HostTensor() = default;
  HostTensor(DType t, Shape s);
  int64_t numel() const { return synoros::numel(shape); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  template <class T>
  T* data() {
    return static_cast<T*>(buffer->data());
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(buffer->data());
  }
  // Element i converted to double, whatever the dtype.
  double get(int64_t i) const;
  void set(int64_t i, double v);
};

}  // namespace synoros
