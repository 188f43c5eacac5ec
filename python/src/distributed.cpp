// synoros.distributed: data-parallel steps over the MPI ranks a launcher started (`mpirun -np N
// python train.py`), bit-identical for any number of ranks (synoros/distributed.hpp). MPI is
// initialised on first use when a launcher started this process and finalised at exit; outside
// a launcher the process is rank 0 of 1 and the same step runs every micro-shard itself.
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "bindings.hpp"
#include "buffer_view.hpp"
#include "cli/mpi_runtime.hpp"
#include "synoros/distributed.hpp"
#include "synoros/optim.hpp"

#ifdef SYNOROS_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

namespace synoros::py {

namespace {

std::unique_ptr<cli::MpiRuntime>& runtime_slot() {
  static std::unique_ptr<cli::MpiRuntime> r;
  return r;
}
bool finalized = false;  // MPI cannot start again once finalised

cli::MpiRuntime& runtime() {
  auto& r = runtime_slot();
  if (!r) {
    if (finalized) throw Error("synoros.distributed: MPI has been finalised (the interpreter is exiting)");
#ifdef SYNOROS_HAVE_MPI
    // Python loads this extension with its symbols private; Open MPI's plugins, loaded by
    // MPI_Init, need libmpi's symbols global (what mpi4py does too).
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&MPI_Init), &info) && info.dli_fname)
      dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
#endif
    r = std::make_unique<cli::MpiRuntime>("synoros.distributed");
  }
  return *r;
}

// A data-parallel step traced on its first call, from the micro-shard shapes of that call's
// arrays (each global array's first axis cut into `shards` equal parts).
struct DataParallel {
  nb::callable fn;
  nb::object optimizer;  // kept alive: the step applies it
  std::vector<Tensor> buffers;
  int64_t shards;
  size_t bucket;
  std::vector<std::pair<DType, Shape>> specs;  // one micro-shard's arguments, once traced
  std::unique_ptr<dist::DataParallelStep> step;
  bool overlap = true;
  std::mutex mu;  // one run at a time: the step has one set of buffers and transfers

  DataParallel(nb::callable f, nb::object opt, int64_t m, std::vector<Tensor> bufs, size_t bucket_floats)
      : fn(std::move(f)), optimizer(std::move(opt)), buffers(std::move(bufs)), shards(m), bucket(bucket_floats) {
    if (shards < 1) throw Error("DataParallelStep: shards must be at least 1, got " + std::to_string(shards));
    if (bucket < 1) throw Error("DataParallelStep: bucket_floats must be at least 1");
    nb::cast<optim::Optimizer&>(optimizer);  // a TypeError now rather than at the first step
  }

  void trace() {
    cli::MpiRuntime& mpi = runtime();
    optim::Optimizer& opt = nb::cast<optim::Optimizer&>(optimizer);
    step = std::make_unique<dist::DataParallelStep>(
        [this](const std::vector<Tensor>& args) {
          nb::list l;
          for (const Tensor& t : args) l.append(nb::cast(t));
          nb::object r = fn(*nb::tuple(l));
          if (nb::isinstance<Tensor>(r)) return std::vector<Tensor>{nb::cast<Tensor>(r)};
          return nb::cast<std::vector<Tensor>>(r);
        },
        specs, opt, buffers, shards, mpi.group(), bucket);
    step->set_overlap(overlap);
  }

  // One optimizer step over the global batch `args`; every micro-shard's loss, on every rank.
  nb::object call(nb::args args) {
    if (!fn.is_valid() || !optimizer.is_valid()) throw Error("DataParallelStep: this step has been cleared");
    const size_t n = args.size();
    if (n == 0) throw Error("DataParallelStep: expects the global batch's arrays, got none");
    std::vector<BufferView> views(n);
    std::vector<std::pair<DType, Shape>> micro(n);
    for (size_t i = 0; i < n; ++i) {
      if (!views[i].take(args[i].ptr()))
        throw Error("DataParallelStep: argument " + std::to_string(i) +
                    " is not a C-contiguous array of float32, float64, int32 or int64");
      Shape s = views[i].shape();
      if (s.empty() || s[0] % shards != 0)
        throw Error("DataParallelStep: argument " + std::to_string(i) + " has shape " + shape_str(s) +
                    ": its first axis must divide into " + std::to_string(shards) + " micro-shards");
      s[0] /= shards;
      micro[i] = {views[i].dtype, s};
    }
    if (!step) {
      specs = micro;
      trace();
    } else if (micro != specs) {
      std::string want, got;
      for (size_t i = 0; i < specs.size(); ++i) want += std::string(i ? ", " : "") + dtype_name(specs[i].first) + shape_str(specs[i].second);
      for (size_t i = 0; i < n; ++i) got += std::string(i ? ", " : "") + dtype_name(micro[i].first) + shape_str(micro[i].second);
      throw Error("DataParallelStep: micro-shards of [" + got + "], the step was traced for [" + want + "]");
    }
    // The update's per-step scalars (AdamW's bias corrections, a changed lr) advance as in a
    // compiled step; the trainer does the same before each data-parallel run.
    optim::Optimizer& opt = nb::cast<optim::Optimizer&>(optimizer);
    std::vector<double> losses;
    {
      nb::gil_scoped_release no_gil;
      std::lock_guard<std::mutex> lock(mu);
      opt.tick();
      losses = step->run(
          [&](int64_t shard) {
            std::vector<HostTensor> in;
            for (size_t i = 0; i < n; ++i) {
              HostTensor h(specs[i].first, specs[i].second);
              const size_t bytes = h.bytes();
              std::memcpy(h.buffer->data(), static_cast<const char*>(views[i].b.buf) + size_t(shard) * bytes, bytes);
              in.push_back(std::move(h));
            }
            return in;
          },
          [](int64_t, const std::vector<HostTensor>& outs) { return std::vector<double>{outs.at(0).get(0)}; }, 1);
    }
    return nb::cast(losses);
  }
};

// The garbage collector sees what a step holds: its function's globals usually hold the step.
int step_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  DataParallel* d = nb::inst_ptr<DataParallel>(self);
  Py_VISIT(d->fn.ptr());
  Py_VISIT(d->optimizer.ptr());
  return 0;
}

int step_clear(PyObject* self) {
  if (!nb::inst_ready(self)) return 0;
  DataParallel* d = nb::inst_ptr<DataParallel>(self);
  d->fn.reset();
  d->optimizer.reset();
  return 0;
}

PyType_Slot step_slots[] = {{Py_tp_traverse, reinterpret_cast<void*>(step_traverse)},
                            {Py_tp_clear, reinterpret_cast<void*>(step_clear)},
                            {0, nullptr}};

}  // namespace

void bind_distributed(nb::module_& m) {
  m.def("_dist_mpi_built", [] {
#ifdef SYNOROS_HAVE_MPI
    return true;
#else
    return false;
#endif
  });
  m.def("_dist_init", [] { runtime(); });
  m.def("_dist_rank", [] { return runtime().rank(); });
  m.def("_dist_world_size", [] { return runtime().size(); });
  m.def("_dist_barrier", [] {
    cli::MpiRuntime& r = runtime();
    nb::gil_scoped_release no_gil;
    r.meet();
  });
  m.def("_dist_abort", [](const std::string& why) {
    if (runtime_slot() && runtime_slot()->active()) runtime_slot()->abort(why);
  });
  m.def("_dist_finalize", [] {
    if (runtime_slot()) finalized = true;
    runtime_slot().reset();
  });

  nb::class_<dist::StepTimes>(m, "DataParallelTimes")
      .def_ro("compute", &dist::StepTimes::compute)
      .def_ro("communication", &dist::StepTimes::communication)
      .def_ro("update", &dist::StepTimes::update)
      .def_ro("steps", &dist::StepTimes::steps)
      .def_ro("buckets", &dist::StepTimes::buckets)
      .def_ro("early_buckets", &dist::StepTimes::early_buckets);
  nb::class_<DataParallel>(m, "DataParallelStep", nb::type_slots(step_slots))
      .def(nb::init<nb::callable, nb::object, int64_t, std::vector<Tensor>, size_t>(), nb::arg("fn"),
           nb::arg("optimizer"), nb::arg("shards"), nb::arg("buffers") = std::vector<Tensor>{},
           nb::arg("bucket_floats") = size_t(1) << 20)
      .def("__call__", &DataParallel::call)
      .def_ro("shards", &DataParallel::shards)
      .def_prop_ro("traced", [](const DataParallel& d) { return bool(d.step); })
      .def_prop_ro("local_shards", [](DataParallel& d) {
        return d.step ? d.step->local_shards() : dist::shard_range(d.shards, runtime().rank(), runtime().size());
      })
      .def_prop_ro("times", [](const DataParallel& d) { return d.step ? d.step->times() : dist::StepTimes{}; })
      .def_prop_rw("overlap", [](const DataParallel& d) { return d.overlap; },
                   [](DataParallel& d, bool on) {
                     nb::gil_scoped_release no_gil;
                     std::lock_guard<std::mutex> lock(d.mu);
                     d.overlap = on;
                     if (d.step) d.step->set_overlap(on);
                   });
}

}  // namespace synoros::py
