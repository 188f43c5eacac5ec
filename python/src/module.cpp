// The extension's entry: errors, dtypes, and each area's bindings.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "numpy_arrays.hpp"

namespace synoros::py {
namespace {
uint64_t& seed_state() {
  static uint64_t s = 0x5eed;
  return s;
}
}  // namespace

uint64_t seed_arg(std::optional<uint64_t> seed) {
  if (seed) return *seed;
  // splitmix64 over a counter: a fixed sequence after manual_seed(), the same on every machine.
  uint64_t z = (seed_state() += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<int64_t> axes_arg(const nb::handle& dims) {
  if (dims.is_none()) return {};
  if (nb::isinstance<nb::int_>(dims)) return {nb::cast<int64_t>(dims)};
  return nb::cast<std::vector<int64_t>>(dims);
}

Shape shape_arg(const nb::handle& shape) {
  if (nb::isinstance<nb::int_>(shape)) return {nb::cast<int64_t>(shape)};
  return nb::cast<Shape>(shape);
}

DType dtype_of(const AnyArray& a) {
  if (a.dtype() == nb::dtype<float>()) return DType::F32;
  if (a.dtype() == nb::dtype<double>()) return DType::F64;
  if (a.dtype() == nb::dtype<int32_t>()) return DType::I32;
  if (a.dtype() == nb::dtype<int64_t>()) return DType::I64;
  throw Error("tensor: unsupported array dtype (code " + std::to_string(a.dtype().code) + ", " +
              std::to_string(a.dtype().bits) + " bits); synoros holds float32, float64, int32 and int64");
}

HostTensor host_from_array(const AnyArray& a, bool share) {
  HostTensor h;
  h.dtype = dtype_of(a);
  for (size_t i = 0; i < a.ndim(); ++i) h.shape.push_back(int64_t(a.shape(i)));
  check_shape(h.shape, h.dtype, "tensor");
  size_t bytes = h.bytes();
  if (share && Buffer::borrowable(a.data(), bytes)) {
    // The array (or whatever owns its memory) stays alive as long as the buffer; releasing it
    // may run Python code (a DLPack deleter), so that happens holding the GIL.
    std::shared_ptr<void> owner(new AnyArray(a), [](void* p) {
      if (!Py_IsInitialized()) return;  // released after the interpreter ended: nothing to free
      nb::gil_scoped_acquire gil;
      delete static_cast<AnyArray*>(p);
    });
    h.buffer = std::make_shared<Buffer>(const_cast<void*>(a.data()), bytes, std::move(owner));
    return h;
  }
  h.buffer = std::make_shared<Buffer>(bytes);
  if (bytes) std::memcpy(h.buffer->data(), a.data(), bytes);
  return h;
}

nb::object array_from_host(const HostTensor& h, bool numpy) {
  std::vector<size_t> shape(h.shape.begin(), h.shape.end());
  auto* keep = new std::shared_ptr<Buffer>(h.buffer);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Buffer>*>(p); });
  nb::dlpack::dtype dt = h.dtype == DType::F32   ? nb::dtype<float>()
                         : h.dtype == DType::F64 ? nb::dtype<double>()
                         : h.dtype == DType::I32 ? nb::dtype<int32_t>()
                                                 : nb::dtype<int64_t>();
  if (!numpy) {
    nb::ndarray<nb::ro> arr(h.buffer->data(), shape.size(), shape.data(), owner, nullptr, dt);
    return nb::cast(arr, nb::rv_policy::reference);
  }
  nb::ndarray<nb::numpy, nb::ro> arr(h.buffer->data(), shape.size(), shape.data(), owner, nullptr, dt);
  return nb::cast(arr, nb::rv_policy::reference);
}

}  // namespace synoros::py

NB_MODULE(_C, m) {
  using namespace synoros;
  using namespace synoros::py;
  m.doc() = "Synoros: the engine behind the synoros package";
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);
  nb::enum_<DType>(m, "dtype")
      .value("float32", DType::F32)
      .value("float64", DType::F64)
      .value("int32", DType::I32)
      .value("int64", DType::I64);
  m.def("manual_seed", [](uint64_t s) { seed_state() = s; }, nb::arg("seed"),
        "Restarts the sequence that gives modules and random tensors their seeds when none is passed.");
  bind_tensor(m);
  bind_functions(m);
  bind_nn(m);
  bind_optim(m);
  bind_io(m);
  bind_gpt(m);
  bind_runtime(m);
  bind_trials(m);
  load_numpy_arrays();
  m.def("_numpy_arrays_direct", &numpy_arrays_direct, "Whether compiled steps make their output arrays "
        "through NumPy's C API table (else numpy.empty).");
  bind_compile(m);
  bind_distributed(m);
  bind_train(m);
}
