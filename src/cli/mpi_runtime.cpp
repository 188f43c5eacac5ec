// MPI start-up and shutdown for the commands (see mpi_runtime.hpp).
#include "cli/mpi_runtime.hpp"

#include "synoros/config.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

#ifdef SYNOROS_HAVE_MPI
#include "synoros/mpi_group.hpp"
#endif

namespace synoros::cli {

namespace {
int env_int(const char* name) {
  return std::atoi(config::system_variable(name).c_str());
}
// World size announced by the launcher, 0 when not started by one.
int launcher_world_size() {
  for (const char* n : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (int s = env_int(n)) return s;
  // PMIx launchers (srun --mpi=pmix) set the rank, not the size: let MPI_Comm_size tell.
  if (!config::system_variable("PMIX_RANK").empty()) return 1;
  return 0;
}
// Seconds a rank waits for a peer before it gives up.
[[maybe_unused]] double peer_timeout() { return double(config::integer("SYNOROS_DIST_TIMEOUT").value_or(600)); }
}  // namespace

#ifdef SYNOROS_HAVE_MPI

MpiRuntime::MpiRuntime(const std::string& command) {
  if (launcher_world_size() < 1) return;
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) throw Error(command + ": MPI_Init failed");
  initialised_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  if (!initialised_) return;
  // Leaving by an exception: the other ranks may be waiting on this one, and MPI_Finalize
  // would wait for them -- take the job down instead.
  if (std::uncaught_exceptions() > 0 && size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

std::shared_ptr<dist::ProcessGroup> MpiRuntime::group() const {
  if (!initialised_) return dist::single_process();
  return std::make_shared<dist::MpiGroup>(peer_timeout());
}

void MpiRuntime::meet() const {
  if (size_ > 1) group()->meet();
}

void MpiRuntime::abort(const std::string& why) {
  if (!initialised_) return;
  // One write, so that the lines of ranks failing together do not interleave.
  std::string line = "synoros: error: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + why +
                     " (stopping every MPI rank)\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

#else  // built without MPI

MpiRuntime::MpiRuntime(const std::string& command) {
  if (launcher_world_size() > 1)
    throw Error(command + ": started by mpirun with " + std::to_string(launcher_world_size()) +
                " ranks, but this synoros was built without MPI (install libopenmpi-dev and rebuild)");
}
MpiRuntime::~MpiRuntime() = default;
std::shared_ptr<dist::ProcessGroup> MpiRuntime::group() const { return dist::single_process(); }
void MpiRuntime::meet() const {}
void MpiRuntime::abort(const std::string&) {}

#endif

}  // namespace synoros::cli
