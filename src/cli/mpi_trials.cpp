// Distributed candidate evaluation over MPI (see mpi_trials.hpp). Messages are byte strings:
// a job is "<index>\0<arg>\0<arg>...", a result "<index>\0<ok>\0<where>\0<line or error>".
// Waiting polls with a short sleep instead of blocking in MPI, whose busy-wait would take a core
// from the worker training next to it.
#include "cli/mpi_trials.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <deque>
#include <exception>
#include <iostream>
#include <filesystem>
#include <thread>

#include "cli/worker_processes.hpp"
#include "synoros/config.hpp"

#ifdef SYNOROS_HAVE_MPI
#include <mpi.h>
#endif

namespace synoros::cli {

#ifdef SYNOROS_HAVE_MPI
namespace {
constexpr int kJob = 1, kResult = 2, kStop = 3;

// Splits at NULs into at most `max_parts` parts (the last keeps any further NULs).
std::vector<std::string> split0(const std::string& s, size_t max_parts = size_t(-1)) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = out.size() + 1 == max_parts ? std::string::npos : s.find('\0', p);
    if (q == std::string::npos) q = s.size();
    out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

std::string join0(const std::vector<std::string>& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) (i ? s.push_back('\0') : void()), s += parts[i];
  return s;
}

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(std::string("trials: MPI ") + what + " failed");
}

// Waits (polling, see above) for a message from `source` with `tag` and returns its bytes.
std::string receive(int source, int tag, MPI_Status& st) {
  for (;;) {
    int flag = 0;
    check(MPI_Iprobe(source, tag, MPI_COMM_WORLD, &flag, &st), "probe");
    if (flag) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int n = 0;
  check(MPI_Get_count(&st, MPI_CHAR, &n), "count");
  std::string s(size_t(n), '\0');
  check(MPI_Recv(s.data(), n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "receive");
  return s;
}

void send(const std::string& s, int dest, int tag) {
  check(MPI_Send(s.data(), int(s.size()), MPI_CHAR, dest, tag, MPI_COMM_WORLD), "send");
}
}  // namespace

MpiTrials::~MpiTrials() {
  if (!active() || rank() != 0 || std::uncaught_exceptions() > 0) return;
  for (int r = 1; r < size(); ++r) MPI_Send(nullptr, 0, MPI_CHAR, r, kStop, MPI_COMM_WORLD);
}

std::function<std::vector<trials::WorkerResult>(const std::vector<std::vector<std::string>>&)> MpiTrials::runner() {
  int size = this->size();
  return [size](const std::vector<std::vector<std::string>>& jobs) {
    std::vector<trials::WorkerResult> out(jobs.size());
    std::deque<int> idle;
    for (int r = 1; r < size; ++r) idle.push_back(r);
    size_t next = 0, pending = 0;
    while (next < jobs.size() || pending > 0) {
      for (; next < jobs.size() && !idle.empty(); ++next, ++pending) {
        std::vector<std::string> msg = {std::to_string(next)};
        msg.insert(msg.end(), jobs[next].begin(), jobs[next].end());
        send(join0(msg), idle.front(), kJob);
        idle.pop_front();
      }
      MPI_Status st;
      std::vector<std::string> r = split0(receive(MPI_ANY_SOURCE, kResult, st), 4);
      if (r.size() != 4) throw Error("trials: malformed result message from rank " + std::to_string(st.MPI_SOURCE));
      size_t i = std::stoul(r[0]);
      if (i >= out.size()) throw Error("trials: result for an unknown job from rank " + std::to_string(st.MPI_SOURCE));
      out[i].ok = r[1] == "1";
      out[i].where = r[2];
      (out[i].ok ? out[i].line : out[i].error) = r[3];
      idle.push_back(st.MPI_SOURCE);
      --pending;
    }
    return out;
  };
}

void MpiTrials::serve(const std::string& exe) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string where = "rank " + std::to_string(rank()) + " on " + host;
  std::string tmp = config::temp_dir() + "/synoros-rank" + std::to_string(rank()) + "-" + std::to_string(getpid());
  for (;;) {
    MPI_Status st;
    std::string msg = receive(0, MPI_ANY_TAG, st);
    if (st.MPI_TAG == kStop) break;
    std::vector<std::string> parts = split0(msg);
    std::vector<std::string> args(parts.begin() + 1, parts.end());
    // Whatever happens here, rank 0 gets an answer for the job (a failure is recorded as one
    // evaluation, never a rank that stops answering).
    trials::WorkerResult r;
    try {
      r = run_worker_processes(exe, {args}, 1, tmp)[0];
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = std::string("worker rank failed: ") + e.what();
    }
    send(join0({parts[0], r.ok ? "1" : "0", where, r.ok ? r.line : r.error}), 0, kResult);
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
}

#else  // built without MPI (MpiRuntime refuses a launch with several ranks)

MpiTrials::~MpiTrials() = default;
std::function<std::vector<trials::WorkerResult>(const std::vector<std::vector<std::string>>&)> MpiTrials::runner() {
  return {};
}
void MpiTrials::serve(const std::string&) {}

#endif

}  // namespace synoros::cli
