// MPI for the commands that run under `mpirun -np N synoros ...` (search, train, finetune):
// initialised when a launcher started this process, finalised at the end, and the whole job
// taken down when one rank fails. Compiled against Open MPI when CMake finds it; otherwise a
// launch with more than one rank is an Error.
#pragma once

#include <memory>
#include <string>

#include "synoros/distributed.hpp"

namespace synoros::cli {

class MpiRuntime {
 public:
  // `command` names the command in errors.
  explicit MpiRuntime(const std::string& command);
  ~MpiRuntime();  // finalises MPI; leaving by an exception takes every rank down instead
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  bool active() const { return size_ > 1; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ranks as a process group (a single process outside MPI).
  std::shared_ptr<dist::ProcessGroup> group() const;
  // Every rank waits, with no deadline, until all have come here: after rank 0's evaluation and
  // checkpoint, so that the peers' deadline counts only training steps.
  void meet() const;
  // After an error on this rank: prints it, naming the rank, and stops every rank instead of
  // leaving them waiting (a no-op outside MPI, where the caller reports the error itself).
  void abort(const std::string& why);

 private:
  int rank_ = 0, size_ = 1;
  bool initialised_ = false;
};

}  // namespace synoros::cli
