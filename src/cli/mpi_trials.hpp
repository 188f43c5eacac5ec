// `mpirun -np N synoros trials ...`: rank 0 proposes and ranks, ranks 1..N-1 train the candidates it hands
// out (each in a crash-isolated trials-worker process on its own machine) and send back the
// evaluation record. Compiled against Open MPI when CMake finds it; otherwise a launch under
// mpirun with more than one rank is an Error.
#pragma once

#include <functional>
#include <string>

#include "cli/mpi_runtime.hpp"
#include "synoros/trials.hpp"

namespace synoros::cli {

class MpiTrials {
 public:
  // Initialises MPI when this process was started by mpirun/mpiexec (Open MPI, MPICH or PMIx
  // environment); a no-op otherwise.
  MpiTrials() : mpi_("trials") {}
  ~MpiTrials();  // stops the worker ranks (rank 0); then MPI is finalised
  MpiTrials(const MpiTrials&) = delete;
  MpiTrials& operator=(const MpiTrials&) = delete;

  bool active() const { return mpi_.active(); }
  int rank() const { return mpi_.rank(); }
  int size() const { return mpi_.size(); }
  // Rank 0: a runner for TrialsConfig::run_workers that hands each job to an idle rank.
  std::function<std::vector<trials::WorkerResult>(const std::vector<std::vector<std::string>>&)> runner();
  // Ranks > 0: trains the jobs rank 0 sends (with `exe trials-worker`) until told to stop.
  void serve(const std::string& exe);
  // Rank 0 after an error: prints it and takes every rank down instead of leaving them waiting
  // (a no-op outside MPI, where the caller reports the error itself).
  void abort(const std::string& why) { mpi_.abort(why); }

 private:
  MpiRuntime mpi_;
};

}  // namespace synoros::cli
