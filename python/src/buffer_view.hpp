// An argument's memory read through the buffer protocol, for the calls that copy arrays
// straight into a plan's buffers (synoros.compile, synoros.distributed).
#pragma once

#include <Python.h>

#include <array>
#include <cstddef>
#include <memory>

#include "synoros/core.hpp"

namespace synoros::py {

// One argument's memory, held for the duration of a call.
struct BufferView {
  Py_buffer b{};
  bool held = false;
  DType dtype = DType::F32;
  BufferView() = default;
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  ~BufferView() {
    if (held) PyBuffer_Release(&b);
  }
  // A C-contiguous buffer of an engine dtype; false (and nothing held) otherwise.
  bool take(PyObject* o) {
    if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      return false;
    }
    held = true;
    const char* f = b.format ? b.format : "B";
    if (*f == '@' || *f == '=' || *f == '<') ++f;
    bool ok = f[1] == '\0';
    if (ok && *f == 'f' && b.itemsize == 4) dtype = DType::F32;
    else if (ok && *f == 'd' && b.itemsize == 8) dtype = DType::F64;
    else if (ok && (*f == 'i' || *f == 'l') && b.itemsize == 4) dtype = DType::I32;
    else if (ok && (*f == 'l' || *f == 'q') && b.itemsize == 8) dtype = DType::I64;
    else ok = false;
    if (!ok) {
      PyBuffer_Release(&b);
      held = false;
    }
    return ok;
  }
  Shape shape() const { return Shape(b.shape, b.shape + b.ndim); }
};

// n default-constructed values, on the stack for up to Small of them (a call's few arguments and
// outputs), without a heap allocation per call.
template <class T, size_t Small = 8>
class SmallArray {
 public:
  explicit SmallArray(size_t n) : n_(n) {
    if (n > Small) big_ = std::make_unique<T[]>(n);
    p_ = n > Small ? big_.get() : small_.data();
  }
  SmallArray(const SmallArray&) = delete;
  SmallArray& operator=(const SmallArray&) = delete;
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  size_t size() const { return n_; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  std::array<T, Small> small_;
  std::unique_ptr<T[]> big_;
  T* p_;
  size_t n_;
};

}  // namespace synoros::py
