// Shared pieces of the extension synoros._C: one bind_* function per area, and the conversions
// between Python values (sequences, NumPy arrays) and the engine's shapes and host tensors.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <vector>

#include "synoros/core.hpp"
#include "synoros/tensor.hpp"

namespace synoros::py {

namespace nb = nanobind;

void bind_tensor(nb::module_& m);
void bind_functions(nb::module_& m);
void bind_nn(nb::module_& m);
void bind_optim(nb::module_& m);
void bind_io(nb::module_& m);
void bind_gpt(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_trials(nb::module_& m);
void bind_compile(nb::module_& m);
void bind_distributed(nb::module_& m);
void bind_train(nb::module_& m);

// A C-contiguous CPU array of any dtype, as NumPy, PyTorch (DLPack) or any buffer gives it.
using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

DType dtype_of(const AnyArray& a);
// The array as a host tensor: sharing its memory when the array has the engine's buffer layout
// (64-byte aligned, a multiple of 64 bytes) and `share` is set, else copied.
HostTensor host_from_array(const AnyArray& a, bool share);
// A read-only NumPy array over the host tensor's buffer (no copy); it keeps the buffer alive.
// Without numpy: a DLPack capsule of the same memory.
nb::object array_from_host(const HostTensor& h, bool numpy = true);

// None, an int, or a sequence of ints: the axes of a reduction (None: all).
std::vector<int64_t> axes_arg(const nb::handle& dims);
Shape shape_arg(const nb::handle& shape);
// While compile() traces a Python function: the optimizers whose step() it called, which the
// compiled step must tick (advance their per-step scalars) before each run. Null otherwise.
std::vector<nb::object>*& traced_optimizers();

// A new tensor's seed: the given one, or the next of the global seeded sequence (manual_seed).
uint64_t seed_arg(std::optional<uint64_t> seed);

}  // namespace synoros::py
