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

// The transport: blocking, ordered byte messages between ranks and a broadcast. An
// implementation throws synoros::Error when a peer stops answering (see mpi_group.hpp).
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void send(int dst, const void* data, size_t bytes) = 0;
  virtual void recv(int src, void* data, size_t bytes) = 0;
  virtual void broadcast(int root, void* data, size_t bytes) = 0;
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
};

// One optimizer step over M micro-shards on a group. `grads` is built once from `loss_fn`
// (forward and loss of one micro-shard's inputs, traced by compile()): it runs the backward
// pass and returns the loss, the extra outputs of loss_fn and each optimizer parameter's gradient
// times `1 / M`. The fold's sum goes to a second compiled step that applies the optimizer.
// Module buffers (batch-norm running statistics) follow micro-shard 0 alone, as DDP's do rank
// 0's: they are the same for every N.
class DataParallelStep {
 public:
  // loss_fn(args) returns {loss, extra outputs...}; `buffers` are the module's buffers.
  DataParallelStep(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& loss_fn,
                   const std::vector<std::pair<DType, Shape>>& arg_specs, optim::Optimizer& opt,
                   std::vector<Tensor> buffers, int64_t shards, std::shared_ptr<ProcessGroup> group);
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

 private:
  optim::Optimizer& opt_;
  std::vector<Tensor> buffers_;
  int64_t shards_;
  std::shared_ptr<ProcessGroup> group_;
  std::pair<int64_t, int64_t> local_;
  std::vector<size_t> with_grad_;    // optimizer parameters that get a gradient
  size_t extra_outputs_ = 0;         // outputs of loss_fn after the loss
  std::unique_ptr<CompiledStep> grads_, apply_;
  std::vector<std::vector<float>> local_grads_;  // one flat vector per local micro-shard
  std::vector<float> sum_;
  StepTimes times_;
};

}  // namespace synoros::dist
