#include "numpy_arrays.hpp"

#include <cstring>

namespace synoros::py {

namespace {

using NewArray = PyObject* (*)(PyTypeObject*, int, const Py_ssize_t*, int, const Py_ssize_t*, void*, int, int,
                               PyObject*);

struct Api {
  PyTypeObject* ndarray = nullptr;
  NewArray new_array = nullptr;
};

// NumPy's type numbers (part of its ABI) for the engine's dtypes on an LP64 system.
int type_num(DType t) {
  switch (t) {
    case DType::F32: return 11;  // NPY_FLOAT
    case DType::F64: return 12;  // NPY_DOUBLE
    case DType::I32: return 5;   // NPY_INT
    case DType::I64: return 7;   // NPY_LONG
  }
  return -1;
}

// An array's data pointer: the first field after the object header (PyArrayObject_fields).
void* data_of(PyObject* a) { return *reinterpret_cast<void**>(reinterpret_cast<char*>(a) + sizeof(PyObject)); }

constexpr size_t kMaxDims = 32;  // NumPy 1's limit (NumPy 2 allows 64)

PyObject* make(const Api& api, DType dtype, const Shape& shape, void** data) {
  Py_ssize_t dims[kMaxDims];
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = Py_ssize_t(shape[i]);
  PyObject* a = api.new_array(api.ndarray, int(shape.size()), dims, type_num(dtype), nullptr, nullptr, 0, 0, nullptr);
  if (a) *data = data_of(a);
  return a;
}

// The table, read and checked once: a float32 [2,3] array made through it must have the data
// pointer, shape and item size its buffer reports.
Api load() {
  Api api;
  if (sizeof(void*) != 8 || sizeof(long) != 8) return api;
  PyObject* mod = PyImport_ImportModule("numpy._core.multiarray");  // NumPy 2
  if (!mod) {
    PyErr_Clear();
    mod = PyImport_ImportModule("numpy.core.multiarray");  // NumPy 1
  }
  if (!mod) {
    PyErr_Clear();
    return api;
  }
  PyObject* capsule = PyObject_GetAttrString(mod, "_ARRAY_API");
  Py_DECREF(mod);
  void** table = capsule && PyCapsule_CheckExact(capsule) ? static_cast<void**>(PyCapsule_GetPointer(capsule, nullptr))
                                                           : nullptr;
  Py_XDECREF(capsule);  // the table is static in NumPy's module, which stays loaded
  if (!table) {
    PyErr_Clear();
    return api;
  }
  const unsigned abi = reinterpret_cast<unsigned (*)()>(table[0])();  // PyArray_GetNDArrayCVersion
  if ((abi >> 24 != 1 && abi >> 24 != 2) || !table[2] || !table[93]) return api;
  Api candidate{static_cast<PyTypeObject*>(table[2]), reinterpret_cast<NewArray>(table[93])};
  void* data = nullptr;
  PyObject* probe = make(candidate, DType::F32, {2, 3}, &data);
  if (!probe) {
    PyErr_Clear();
    return api;
  }
  Py_buffer b;
  bool ok = Py_TYPE(probe) == candidate.ndarray && PyObject_GetBuffer(probe, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0;
  if (ok) {
    ok = b.buf == data && b.ndim == 2 && b.shape[0] == 2 && b.shape[1] == 3 && b.itemsize == 4 && b.format &&
         std::strchr(b.format, 'f') != nullptr;
    PyBuffer_Release(&b);
  } else {
    PyErr_Clear();
  }
  Py_DECREF(probe);
  return ok ? candidate : api;
}

Api g_api;  // set once, when the extension is imported

}  // namespace

void load_numpy_arrays() { g_api = load(); }
bool numpy_arrays_direct() { return g_api.new_array != nullptr; }

PyObject* new_numpy_array(DType dtype, const Shape& shape, void** data) {
  const Api& api = g_api;
  if (!api.new_array || shape.size() > kMaxDims) return nullptr;
  PyObject* a = make(api, dtype, shape, data);
  if (!a) PyErr_Clear();
  return a;
}

}  // namespace synoros::py
