// An MPI communicator as a synoros::dist::ProcessGroup. Header-only, so that the library itself
// does not depend on MPI: a program that trains over MPI includes this header and links MPI
// (CMake: find_package(MPI) and MPI::MPI_CXX). MPI must be initialised first.
//
// Every wait polls with a deadline: a peer that has not answered within `timeout_seconds` is a
// synoros::Error naming it (a rank that crashed is normally taken down with the whole job by
// mpirun; the deadline covers a rank that hangs). Polling spins for the first millisecond (most
// messages arrive within it) and then sleeps between tests, so that a rank waiting long leaves
// its core to ranks that share it and are still computing.
#pragma once

#include <mpi.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

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
  Request isend(int dst, const void* data, size_t bytes) override {
    return post(data, bytes, [&](void* p, int n, MPI_Request* rq) {
      check(MPI_Isend(p, n, MPI_BYTE, dst, kTag, comm_, rq), "sending to", dst);
    }, "sending to", dst);
  }
  Request irecv(int src, void* data, size_t bytes) override {
    return post(data, bytes, [&](void* p, int n, MPI_Request* rq) {
      check(MPI_Irecv(p, n, MPI_BYTE, src, kTag, comm_, rq), "waiting for", src);
    }, "waiting for", src);
  }
  bool test(Request r) override {
    Pending& p = pending_.at(r);
    int done = 0;
    check(MPI_Testall(int(p.rq.size()), p.rq.data(), &done, MPI_STATUSES_IGNORE), p.what, p.peer);
    if (done) pending_.erase(r);
    return done != 0;
  }
  void wait(Request r) override {
    const Pending& p = pending_.at(r);
    const char* what = p.what;
    int peer = p.peer;
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    while (!test(r)) {
      double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited > 1e-3) std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (waited > timeout_) give_up(what, peer);
    }
  }
  void broadcast(int root, void* data, size_t bytes) override {
    Request r = post(data, bytes, [&](void* p, int n, MPI_Request* rq) {
      check(MPI_Ibcast(p, n, MPI_BYTE, root, comm_, rq), "waiting for a broadcast from", root);
    }, "waiting for a broadcast from", root);
    wait(r);
  }
  // Rank 0 tells the others when it has finished its work alone (they wait for that without a
  // deadline, sleeping to leave it the cores); then every rank must arrive within the deadline,
  // so that a rank that hangs is still found.
  void meet() override {
    char signal = 0;
    std::vector<MPI_Request> told(size_t(rank_ == 0 ? size_ - 1 : 0));
    for (int r = 1; rank_ == 0 && r < size_; ++r)
      check(MPI_Isend(&signal, 1, MPI_BYTE, r, kMeetTag, comm_, &told[size_t(r - 1)]), "sending to", r);
    if (rank_ > 0) {
      MPI_Request rq;
      check(MPI_Irecv(&signal, 1, MPI_BYTE, 0, kMeetTag, comm_, &rq), "waiting for", 0);
      for (int done = 0; !done;) {
        check(MPI_Test(&rq, &done, MPI_STATUS_IGNORE), "waiting for", 0);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    wait(post(&signal, 0, [&](void*, int, MPI_Request* rq) {
      check(MPI_Ibarrier(comm_, rq), "meeting", -1);
    }, "meeting", -1));
    if (!told.empty()) check(MPI_Waitall(int(told.size()), told.data(), MPI_STATUSES_IGNORE), "sending to", 1);
  }

 private:
  static constexpr int kTag = 7707, kMeetTag = 7708;
  struct Pending {
    std::vector<MPI_Request> rq;
    const char* what;
    int peer;
  };
  // Posts one MPI request per piece of at most 1 GiB (MPI counts are ints).
  template <class F>
  Request post(const void* data, size_t bytes, F start, const char* what, int peer) {
    Pending p{{}, what, peer};
    char* at = static_cast<char*>(const_cast<void*>(data));
    do {
      size_t n = bytes < size_t(1) << 30 ? bytes : size_t(1) << 30;
      p.rq.emplace_back();
      start(at, int(n), &p.rq.back());
      at += n, bytes -= n;
    } while (bytes > 0);
    pending_.emplace(next_, std::move(p));
    return next_++;
  }
  void check(int rc, const char* what, int peer) const {
    if (rc != MPI_SUCCESS)
      throw Error("data-parallel: rank " + std::to_string(rank_) + ": MPI failed " + what +
                  (peer < 0 ? std::string(" the other ranks") : " rank " + std::to_string(peer)));
  }
  [[noreturn]] void give_up(const char* what, int peer) const {
    throw Error("data-parallel: rank " + std::to_string(rank_) + " gave up " + what +
                (peer < 0 ? std::string(" the other ranks") : " rank " + std::to_string(peer)) + " after " +
                std::to_string(int(timeout_)) + " s (" + (peer < 0 ? "one of them" : "that rank") +
                " has stopped or hangs)");
  }
  std::map<Request, Pending> pending_;
  Request next_ = 0;
  MPI_Comm comm_;
  double timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace synoros::dist
