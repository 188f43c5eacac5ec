// An MPI communicator as a synoros::dist::ProcessGroup. Header-only, so that the library itself
// does not depend on MPI: a program that trains over MPI includes this header and links MPI
// (CMake: find_package(MPI) and MPI::MPI_CXX). MPI must be initialised first.
//
// Every wait polls with a deadline: a peer that has not answered within `timeout_seconds` is a
// synoros::Error naming it (a rank that crashed is normally taken down with the whole job by
// mpirun; the deadline covers a rank that hangs). Polling sleeps between tests instead of
// spinning, so a waiting rank leaves its core to a rank that is still computing.
#pragma once

#include <mpi.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "synoros/distributed.hpp"

namespace synoros::dist {

class MpiGroup final : public ProcessGroup {
 public:
  explicit MpiGroup(double timeout_seconds = 600, MPI_Comm comm = MPI_COMM_WORLD)
      : comm_(comm), timeout_(timeout_seconds) {
    int on = 0;
    MPI_Initialized(&on);
    if (!on) throw Error("data-parallel: MPI is not initialised (call MPI_Init first)");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void send(int dst, const void* data, size_t bytes) override {
    each_piece(data, bytes, [&](void* p, int n) {
      MPI_Request rq;
      check(MPI_Isend(p, n, MPI_BYTE, dst, kTag, comm_, &rq), "send to", dst);
      wait(rq, "sending to", dst);
    });
  }
  void recv(int src, void* data, size_t bytes) override {
    each_piece(data, bytes, [&](void* p, int n) {
      MPI_Request rq;
      check(MPI_Irecv(p, n, MPI_BYTE, src, kTag, comm_, &rq), "receive from", src);
      wait(rq, "waiting for", src);
    });
  }
  void broadcast(int root, void* data, size_t bytes) override {
    each_piece(data, bytes, [&](void* p, int n) {
      MPI_Request rq;
      check(MPI_Ibcast(p, n, MPI_BYTE, root, comm_, &rq), "broadcast from", root);
      wait(rq, "waiting for a broadcast from", root);
    });
  }

 private:
  static constexpr int kTag = 7707;
  template <class F>
  static void each_piece(const void* data, size_t bytes, F f) {
    char* p = static_cast<char*>(const_cast<void*>(data));
    do {
      size_t n = bytes < size_t(1) << 30 ? bytes : size_t(1) << 30;
      f(p, int(n));
      p += n, bytes -= n;
    } while (bytes > 0);
  }
  void check(int rc, const char* what, int peer) const {
    if (rc != MPI_SUCCESS)
      throw Error("data-parallel: rank " + std::to_string(rank_) + ": MPI " + what + " rank " + std::to_string(peer) +
                  " failed");
  }
  void wait(MPI_Request& rq, const char* what, int peer) const {
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&rq, &done, MPI_STATUS_IGNORE), what, peer);
      if (done) return;
      if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_)
        throw Error("data-parallel: rank " + std::to_string(rank_) + " gave up " + what + " rank " +
                    std::to_string(peer) + " after " + std::to_string(int(timeout_)) +
                    " s (that rank has stopped or hangs)");
    }
  }
  MPI_Comm comm_;
  double timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace synoros::dist
