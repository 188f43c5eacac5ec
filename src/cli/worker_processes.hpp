// Crash-isolated worker processes for `synoros trials`: a candidate that crashes or is killed
// is a failed evaluation, never the end of the run.
#pragma once

#include <string>
#include <vector>

#include "synoros/trials.hpp"

namespace synoros::cli {

// Runs `EXE trials-worker ARGS --out FILE` for each argument list, at most `parallel` at a time,
// each in its own process with SYNOROS_NUM_THREADS=1; results in the order of `jobs`. Result
// files go to `tmp_dir`.
std::vector<trials::WorkerResult> run_worker_processes(
    const std::string& exe, const std::vector<std::vector<std::string>>& jobs, int parallel,
    const std::string& tmp_dir);

}  // namespace synoros::cli
