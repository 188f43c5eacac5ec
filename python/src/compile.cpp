// synoros.compile: a Python function traced into one CompiledStep per argument signature and
// replayed on arrays. Arguments are read through the buffer protocol straight into the plan's
// input buffers; anything else (lists, tensors, strided arrays) is converted first.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "bindings.hpp"
#include "buffer_view.hpp"
#include "numpy_arrays.hpp"
#include "synoros/optim.hpp"
#include "synoros/profile.hpp"

namespace synoros::py {

std::vector<nb::object>*& traced_optimizers() {
  static thread_local std::vector<nb::object>* list = nullptr;
  return list;
}

namespace {

using View = BufferView;

const char* numpy_dtype(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
  }
  return "float32";
}

// One traced step and what it needs around each run.
struct Step {
  CompiledStep step;
  std::vector<std::pair<DType, Shape>> specs;
  std::vector<nb::object> optimizers;  // stepped inside the trace: ticked before each run
  std::vector<optim::Optimizer*> ticked;  // theirs, held by `optimizers`
  bool release_gil = true;  // the step's work is large enough to let other threads run meanwhile
  std::mutex mu;                       // one run at a time: the plan has one set of buffers
  struct Output {
    DType dtype;
    Shape shape;
    size_t bytes;
    nb::object np_shape, np_dtype;  // numpy.empty's arguments, where NumPy's table is not used
  };
  std::vector<Output> outputs;  // made on the first run, then reused: a call builds no tuple

  static std::unique_ptr<Step> trace(const nb::callable& fn, std::vector<std::pair<DType, Shape>> specs) {
    auto s = std::make_unique<Step>();
    s->specs = std::move(specs);
    struct Tracing {  // optimizer steps inside the trace register with this step
      explicit Tracing(std::vector<nb::object>* l) { traced_optimizers() = l; }
      ~Tracing() { traced_optimizers() = nullptr; }
    } tracing(&s->optimizers);
    s->step = compile([&](const std::vector<Tensor>& args) {
      nb::list l;
      for (const Tensor& t : args) l.append(nb::cast(t));
      nb::object r = fn(*nb::tuple(l));
      if (nb::isinstance<Tensor>(r)) return std::vector<Tensor>{nb::cast<Tensor>(r)};
      return nb::cast<std::vector<Tensor>>(r);
    }, s->specs);
    for (const nb::object& o : s->optimizers) s->ticked.push_back(&nb::cast<optim::Optimizer&>(o));
    s->release_gil = large(s->step.plan().graph());
    return s;
  }

  // Whether a step's estimated work (the op table's flops and bytes) is worth releasing the GIL
  // for, as NumPy does for large arrays only: releasing and taking it back costs about as much
  // as a tiny step's kernels, and holding it for a few microseconds keeps no thread waiting long.
  static bool large(const Graph& g) {
    double flops = 0, bytes = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const Node& n = g.node(ValueId(i));
      const Cost c = op_info(n.op).cost(g, n);
      flops += c.flops, bytes += c.bytes;
    }
    return flops > 1e6 || bytes > double(1 << 20);
  }

  // Runs on argument views already checked against specs; new NumPy arrays out. The output
  // arrays are made first; then, under the step's lock (its plan has one set of buffers) and
  // without the GIL where the step is large, inputs go in, the step runs and outputs come out.
  // A small step's caller waits for the lock holding the GIL: every holder of the lock either
  // holds the GIL too or releases the lock before taking the GIL back.
  template <class Views>
  nb::object run(const Views& views) {
    static nb::object* empty = new nb::object(nb::module_::import_("numpy").attr("empty"));  // never freed:
    size_t n = step.num_outputs();                                                          // outlives exit
    if (outputs.size() != n) {
      static nb::object* dtype = new nb::object(nb::module_::import_("numpy").attr("dtype"));
      outputs.clear();
      for (size_t i = 0; i < n; ++i) {
        auto [dt, shape] = step.output_spec(i);
        nb::list dims;
        for (int64_t d : shape) dims.append(d);
        outputs.push_back({dt, shape, size_t(numel(shape)) * dtype_size(dt), nb::tuple(dims),
                           (*dtype)(numpy_dtype(dt))});
      }
    }
    SmallArray<nb::object> arrays(n);
    SmallArray<View> outs(n);
    SmallArray<void*> out_data(n);
    for (size_t i = 0; i < n; ++i) {
      const Output& o = outputs[i];
      if (PyObject* a = new_numpy_array(o.dtype, o.shape, &out_data[i])) {
        arrays[i] = nb::steal(a);
        continue;
      }
      arrays[i] = (*empty)(o.np_shape, o.np_dtype);
      if (!outs[i].take(arrays[i].ptr())) throw Error("compiled step: numpy.empty gave no usable buffer");
      out_data[i] = outs[i].b.buf;
    }
    {
      std::optional<nb::gil_scoped_release> no_gil;
      if (release_gil) no_gil.emplace();
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < views.size(); ++i)
        if (step.uses_input(i)) std::memcpy(step.input_ptr(i), views[i].b.buf, size_t(views[i].b.len));
      for (optim::Optimizer* o : ticked) o->tick();
      step.run();
      for (size_t i = 0; i < n; ++i) std::memcpy(out_data[i], step.output_ptr(i), outputs[i].bytes);
    }
    if (n == 1) return arrays[0];
    nb::list l;
    for (const nb::object& a : arrays) l.append(a);
    return nb::tuple(l);
  }

  // A direct call with a sequence of arrays, checked against the traced signature.
  nb::object call(nb::handle args) {
    size_t n = nb::len(args);
    if (n != specs.size())
      throw Error("compiled step: expects " + std::to_string(specs.size()) + " arguments, got " + std::to_string(n));
    SmallArray<View> views(n);
    for (size_t i = 0; i < n; ++i) {
      nb::object a = args[i];
      if (!views[i].take(a.ptr()))
        throw Error("compiled step: argument " + std::to_string(i) +
                    " is not a C-contiguous array of float32, float64, int32 or int64");
      if (views[i].dtype != specs[i].first || views[i].shape() != specs[i].second)
        throw Error("compiled step: argument " + std::to_string(i) + " is " + dtype_name(views[i].dtype) +
                    shape_str(views[i].shape()) + ", the step was traced for " + dtype_name(specs[i].first) +
                    shape_str(specs[i].second));
    }
    return run(views);
  }
};

// synoros.compile(fn): a step per argument signature (dtypes and shapes).
struct Function {
  nb::callable fn;
  nb::callable convert;  // an argument without a usable buffer -> a contiguous array
  std::map<std::vector<int64_t>, std::unique_ptr<Step>> steps;
  Step* last = nullptr;  // the step the last call ran, and the gradient mode it was traced under
  bool last_grad = false;

  Function(nb::callable f, nb::callable c) : fn(std::move(f)), convert(std::move(c)) {}
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;

  nb::object call(nb::args args) {
    if (!fn.is_valid()) throw Error("compile: this compiled function has been cleared");
    size_t n = args.size();
    SmallArray<View> views(n);
    SmallArray<nb::object> converted(n);
    for (size_t i = 0; i < n; ++i)
      if (!views[i].take(args[i].ptr())) {
        converted[i] = convert(args[i]);
        if (!views[i].take(converted[i].ptr()))
          throw Error("compile: argument " + std::to_string(i) + " did not convert to an array of an engine dtype");
      }
    if (same_as_last(views)) return last->run(views);
    std::vector<int64_t> key{int64_t(grad_enabled())};  // traced under this gradient mode
    for (size_t i = 0; i < n; ++i) {
      key.push_back(int64_t(views[i].dtype));
      key.push_back(views[i].b.ndim);
      key.insert(key.end(), views[i].b.shape, views[i].b.shape + views[i].b.ndim);
    }
    auto it = steps.find(key);
    if (it == steps.end()) {
      std::vector<std::pair<DType, Shape>> specs;
      for (const View& v : views) specs.push_back({v.dtype, v.shape()});
      it = steps.emplace(key, Step::trace(fn, std::move(specs))).first;
    }
    last = it->second.get(), last_grad = grad_enabled();
    return last->run(views);
  }

  // A loop calls with the same signature every time: the last step's, checked in place.
  bool same_as_last(const SmallArray<View>& views) const {
    if (!last || last_grad != grad_enabled() || views.size() != last->specs.size()) return false;
    for (size_t i = 0; i < views.size(); ++i) {
      const auto& [dtype, shape] = last->specs[i];
      const Py_buffer& b = views[i].b;
      if (views[i].dtype != dtype || size_t(b.ndim) != shape.size() || !std::equal(shape.begin(), shape.end(), b.shape))
        return false;
    }
    return true;
  }
};

// The garbage collector sees what a compiled function holds: a module-level function's globals
// hold the compiled function itself, a cycle that would otherwise never be freed.
int function_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  Function* f = nb::inst_ptr<Function>(self);
  Py_VISIT(f->fn.ptr());
  Py_VISIT(f->convert.ptr());
  for (const auto& [key, step] : f->steps)
    for (const nb::object& o : step->optimizers) Py_VISIT(o.ptr());
  return 0;
}

int function_clear(PyObject* self) {
  Function* f = nb::inst_ptr<Function>(self);
  f->fn.reset();
  f->convert.reset();
  for (auto& [key, step] : f->steps) step->ticked.clear(), step->optimizers.clear();
  return 0;
}

PyType_Slot function_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(function_traverse)},
                                {Py_tp_clear, reinterpret_cast<void*>(function_clear)},
                                {0, nullptr}};

}  // namespace

void bind_compile(nb::module_& m) {
  nb::class_<Profile>(m, "Profile", "Where a plan's time goes, per launch (a node or a fused group).")
      .def_ro("total_ns", &Profile::total_ns, "The median time of a whole run.")
      .def_prop_ro("entries", [](const Profile& p) {
        nb::list l;
        for (const ProfileEntry& e : p.entries)
          l.append(nb::make_tuple(e.label, e.ns, e.flops, e.bytes));
        return l;
      }, "Per launch, in launch order: (label, median ns, FLOPs, bytes).")
      .def_prop_ro("peak", [](const Profile& p) { return nb::make_tuple(p.peak.gflops, p.peak.gbps, p.peak.read_gbps); },
                   "The machine's measured limits the shares are taken against (GFLOP/s, GB/s copying, reading); "
                   "zeros when not measured.")
      .def("table", &Profile::table, "Launches sorted by time with their shares of the run and of the peak.")
      .def("by_leading_op", &Profile::by_leading_op, "Time summed by each launch's leading op, largest first.")
      .def("chrome_trace", &Profile::chrome_trace, "One run as Chrome / Perfetto trace events (JSON).");
  nb::class_<Step>(m, "CompiledStep", "One traced step (forward, backward, update), replayed on arrays.")
      .def("__call__", &Step::call, nb::arg("args"))
      .def("profile", [](Step& s, int iterations, bool measure_limits) {
        if (iterations < 1) throw Error("profile: iterations must be >= 1, got " + std::to_string(iterations));
        nb::gil_scoped_release no_gil;
        const MachinePeak peak = measure_limits ? measure_peak() : MachinePeak{};  // before the step's lock
        std::lock_guard<std::mutex> lock(s.mu);
        return profile(s.step.plan(), iterations, peak);
      }, nb::arg("iterations") = 10, nb::arg("measure_limits") = true,
         "Runs the step's plan `iterations` times on the last call's inputs, timing every launch (the "
         "parameters are not updated). With measure_limits, the machine's peak is measured first (about "
         "half a second) for the shares of the limit.")
      .def_prop_ro("specs", [](const Step& s) { return s.specs; })
      .def_prop_ro("releases_gil", [](const Step& s) { return s.release_gil; },
                   "Whether a run lets other Python threads run meanwhile: only for steps whose estimated "
                   "work (more than 1 MFLOP or 1 MiB) outweighs releasing and taking back the GIL.");
  nb::class_<Function>(m, "CompiledFunction", nb::type_slots(function_slots),
                       "A function traced once per argument signature (dtypes and shapes) and replayed.")
      .def(nb::init<nb::callable, nb::callable>(), nb::arg("fn"), nb::arg("convert"))
      .def("__call__", &Function::call)
      .def_prop_ro("steps", [](nb::handle self) {
        nb::dict d;
        for (auto& [key, step] : nb::cast<Function&>(self).steps) {
          nb::list k;
          for (int64_t x : key) k.append(x);
          d[nb::tuple(k)] = nb::cast(step.get(), nb::rv_policy::reference_internal, self);
        }
        return d;
      }, "The traced steps by signature.");
}

}  // namespace synoros::py
