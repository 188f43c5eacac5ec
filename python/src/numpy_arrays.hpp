// New NumPy arrays made through NumPy's C API table (the `_ARRAY_API` capsule that every NumPy
// extension imports) rather than by calling numpy.empty: a compiled step's outputs cost a
// function call and its argument parsing less, and no buffer request. NumPy's headers are not
// needed at build time: two entries of the table are used, whose places are NumPy's ABI (the
// ndarray type, 2, and PyArray_New, 93), for NumPy's ABI versions 1 and 2 only, and a check
// when the table is first read (an array's data pointer against its buffer) switches the path
// off if the layout is not the expected one. Callers fall back to numpy.empty then.
#pragma once

#include <Python.h>

#include "synoros/core.hpp"

namespace synoros::py {

// Reads NumPy's table (once, when the extension is imported: NumPy is imported by then).
void load_numpy_arrays();
// Whether arrays are made through the table (false: numpy.empty).
bool numpy_arrays_direct();
// A new C-contiguous array of `dtype` and `shape` and its data pointer, or null (no Python error
// set) where the fast path is unavailable. Needs the GIL.
PyObject* new_numpy_array(DType dtype, const Shape& shape, void** data);

}  // namespace synoros::py
