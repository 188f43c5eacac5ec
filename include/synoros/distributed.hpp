// Data-parallel training whose bits do not depend on the number of processes.
//
// A step's global batch is cut into a fixed number M of micro-shards. Each process (rank) of a
// group of N <= M computes the gradients of a contiguous run of micro-shards; the step's gradient
// is the left fold h_0 + h_1 + ... + h_{M-1} over all micro-shards in index order, passed along
// the ranks as a chain (rank r adds its micro-shards onto the partial sum of ranks < r), and the
// last rank broadcasts it. The additions happen in the same order for every N, so every rank of
// every group size holds the same bits as one process running the M micro-shards in turn. A ring
// allreduce, whose summation order changes with N, would not.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "synoros/optim.hpp"
#include "synoros/tensor.hpp"

namespace synoros::dist {

// The transport: ordered byte messages between ranks (non-blocking, completed by test or wait)
// and a broadcast. Messages from one rank to another arrive in the order they were sent and
// match receives in the order those were posted. An implementation throws synoros::Error when a
// peer stops answering (see mpi_group.hpp).
class ProcessGroup {
 public:
  using Request = int64_t;
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The buffer must stay untouched until the request completes.
  virtual Request isend(int dst, const void* data, size_t bytes) = 0;
  virtual Request irecv(int src, void* data, size_t bytes) = 0;
  // True once the request has completed (and then it is gone); never waits.
  virtual bool test(Request r) = 0;
  virtual void wait(Request r) = 0;
  virtual void broadcast(int root, void* data, size_t bytes) = 0;
  // Every rank waits here until rank 0 comes, with no deadline, and then for all the others: for
  // after rank 0's long work alone (its evaluation and checkpoint), which the deadline of a
  // transport that has one (MpiGroup) must not count.
  virtual void meet() {
    char none = 0;
    broadcast(0, &none, 1);
  }
  void send(int dst, const void* data, size_t bytes) { wait(isend(dst, data, bytes)); }
  void recv(int src, void* data, size_t bytes) { wait(irecv(src, data, bytes)); }
};

// One process alone (rank 0 of 1): every transfer is a no-op.
std::shared_ptr<ProcessGroup> single_process();

// The micro-shards [first, last) rank `rank` of `ranks` computes: contiguous and balanced (the
// first M mod N ranks take one more). Throws when ranks > shards.
std::pair<int64_t, int64_t> shard_range(int64_t shards, int rank, int ranks);

// The chain fold. `local` holds this rank's micro-shards' vectors (`count` floats each) in
// index order; on return `out` holds the sum over every micro-shard of the group, added left to
// right, on every rank. Transfers go in buckets of `bucket` floats, so that rank r + 1 adds one
// bucket while rank r adds the next.
void fold(ProcessGroup& group, const std::vector<const float*>& local, size_t count, float* out,
          size_t bucket = size_t(1) << 20);

// The same fold step by step, to overlap it with the backward pass: once the local values of a
// range are final (mark_ready), every bucket they complete is folded and passed on -- in bucket
// order, as soon as the previous rank's partial sum for it has arrived -- without waiting;
// finish() folds the rest, waiting where it must, and broadcasts the sum. The bits are those of
// fold() whatever the timing.
class ChainFold {
 public:
  ChainFold(ProcessGroup& group, std::vector<const float*> local, size_t count, float* out,
            size_t bucket = size_t(1) << 20);
  // Left by an error, transfers may still be posted: the buffers (`out`, `local`) must outlive
  // them, which an MPI program that aborts on errors ensures.
  void mark_ready(size_t offset, size_t n);
  void finish();
  size_t buckets() const { return missing_.size(); }
  size_t folded() const { return next_; }  // buckets folded and passed on so far

 private:
  void advance(bool block);
  ProcessGroup& group_;
  std::vector<const float*> local_;
  size_t count_, bucket_, next_ = 0;
  float* out_;
  std::vector<size_t> missing_;  // per bucket: local floats not yet final
  std::vector<ProcessGroup::Request> recv_, send_;
};

// Whether a step of `shards` micro-shards on `group` (null: this process alone) needs a
// DataParallelStep; one micro-shard on one process is a single fused step. Refuses fast mode on
// several ranks: its kernel choices are timed on each rank and could round differently.
bool needs_data_parallel(int64_t shards, const ProcessGroup* group);

// Gathers `per_shard` values of each micro-shard (this rank's, in order, `k` values each) into
// all M shards' values on every rank.
std::vector<double> gather_shard_values(ProcessGroup& group, const std::vector<double>& local, int64_t shards,
                                        size_t k);

// Broadcasts the bytes of each tensor's value from `root` (e.g. batch-norm running statistics).
void broadcast_values(ProcessGroup& group, int root, const std::vector<Tensor>& tensors);

// Where a data-parallel step spent its time, in seconds, summed over the steps run.
struct StepTimes {
  double compute = 0;        // the micro-shards' forward and backward passes
  double communication = 0;  // the fold, the statistics and the buffers (including waiting for peers)
  double update = 0;         // the optimizer's update
  int64_t steps = 0;
  int64_t buckets = 0;        // gradient buckets folded, and of those, passed on before the
  int64_t early_buckets = 0;  // last gradient of the rank's last micro-shard was final
};

// One optimizer step over M micro-shards on a group. `grads` is built once from `loss_fn`
// (forward and loss of one micro-shard's inputs, traced by compile()): it runs the backward
// pass and returns the loss, the extra outputs of loss_fn and each optimizer parameter's gradient
// times `1 / M`. The fold's sum goes to a second compiled step that applies the optimizer. The
// gradients of a rank's last micro-shard are folded and sent bucket by bucket while its backward
// pass still runs (the flat vectors hold them in reverse parameter order, the order in which the
// backward pass finishes them).
// Module buffers (batch-norm running statistics) follow micro-shard 0 alone, as DDP's do rank
// 0's: they are the same for every N.
class DataParallelStep {
 public:
  // loss_fn(args) returns {loss, extra outputs...}; `buffers` are the module's buffers.
  DataParallelStep(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& loss_fn,
                   const std::vector<std::pair<DType, Shape>>& arg_specs, optim::Optimizer& opt,
                   std::vector<Tensor> buffers, int64_t shards, std::shared_ptr<ProcessGroup> group,
                   size_t bucket_floats = size_t(1) << 20);
  ~DataParallelStep();
  // Runs this rank's micro-shards (inputs(i) gives micro-shard i's arguments; stats(i, outputs)
  // reduces its outputs {loss, extra...} to `values_per_shard` numbers), folds and applies the
  // update. Returns every micro-shard's numbers, M x values_per_shard, on every rank.
  std::vector<double> run(const std::function<std::vector<HostTensor>(int64_t)>& inputs,
                          const std::function<std::vector<double>(int64_t, const std::vector<HostTensor>&)>& stats,
                          size_t values_per_shard);
  int64_t shards() const { return shards_; }
  std::pair<int64_t, int64_t> local_shards() const { return local_; }
  ProcessGroup& group() { return *group_; }
  const StepTimes& times() const { return times_; }
  // A run that throws may leave transfers posted: the step and the group are then unusable (an
  // MPI program aborts the job, see MpiRuntime in the command-line tool).
  // Off: the last micro-shard's gradients are folded after its whole backward pass (the same
  // bits; for tests and measurements).
  void set_overlap(bool on) { overlap_ = on; }

 private:
  optim::Optimizer& opt_;
  std::vector<Tensor> buffers_;
  int64_t shards_;
  std::shared_ptr<ProcessGroup> group_;
  std::pair<int64_t, int64_t> local_;
  std::vector<size_t> with_grad_;    // optimizer parameters that get a gradient
  std::vector<size_t> offset_;       // where each one's gradient lies in the flat vectors
  size_t extra_outputs_ = 0;         // outputs of loss_fn after the loss
  std::unique_ptr<CompiledStep> grads_, apply_;
  std::vector<std::vector<float>> local_grads_;  // one flat vector per local micro-shard
  std::vector<float> sum_;
  size_t bucket_;
  bool overlap_ = true;
  StepTimes times_;
};

}  // namespace synoros::dist
