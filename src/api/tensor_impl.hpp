// Internal state behind Tensor: a lazy DAG node, or a realized leaf holding a value.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "synoros/tensor.hpp"

namespace synoros {

struct TensorImpl : std::enable_shared_from_this<TensorImpl> {
  TensorImpl();
  uint64_t seq;                                  // creation order: the program order
  Op op = Op::Input;
  Attrs attrs;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<std::shared_ptr<TensorImpl>> in;  // empty for leaves
  std::shared_ptr<HostTensor> value;            // set once realized (leaves)
  bool is_const = false;                         // embedded into plans as a constant
  bool requires_grad = false;
  bool stateful = false;                         // storage rewritten between runs: read in place
  bool no_grad = false;                          // recorded with gradients off: no path through it
  int32_t recompute = -1;                        // its activation-checkpoint segment (-1: none)
  std::shared_ptr<TensorImpl> grad;
  int placeholder = -1;                          // argument slot while tracing compile()
  // A realized value that kept its inputs (it lies on a gradient path): the versions of the leaf
  // buffers it was computed from. A later use recomputes it, which is only right while they hold.
  std::vector<std::pair<std::shared_ptr<Buffer>, uint64_t>> leaf_versions;
};

// A new TensorImpl, its block taken from the ones this thread freed where it can.
std::shared_ptr<TensorImpl> new_tensor_impl();
// A realized value's host tensor, its block reused from those the thread freed.
std::shared_ptr<HostTensor> new_host_tensor(HostTensor&& v);

struct TraceState {
  bool active = false;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> updates;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> saved_grads;
  // Eager assignments held back by an AssignBatch, realized together when it closes.
  int batches = 0;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> pending;
};
TraceState& trace_state();

// Holds back eager Tensor::assign calls while it is open and realizes all their values in one
// plan when close() is called, then writes each in order (an optimizer's step: one plan run
// instead of one per tensor). Every value is computed from the storage as it was when the batch
// opened, so a value must not read a tensor assigned earlier in the same batch (the optimizers'
// updates never do). Destroyed without close() (an exception), it drops what it held.
class AssignBatch {
 public:
  AssignBatch();
  ~AssignBatch();
  void close();
  AssignBatch(const AssignBatch&) = delete;
  AssignBatch& operator=(const AssignBatch&) = delete;

 private:
  bool open_ = true;
};

// A DAG flattened into a tape.
struct Lowered {
  Graph g;
  std::vector<ValueId> outputs;
  // Leaves requiring a gradient (and stateful ones): parameters, and compile()'s arguments
  // marked requires_grad while tracing.
  std::vector<std::pair<std::shared_ptr<TensorImpl>, ValueId>> params;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, ValueId>> feeds;   // other realized leaves
  std::unordered_map<const TensorImpl*, ValueId> ids;
  std::vector<std::shared_ptr<TensorImpl>> by_id;
  std::vector<int32_t> recompute;  // per value: its activation-checkpoint segment (-1: none)
};
Lowered lower_dag(const std::vector<std::shared_ptr<TensorImpl>>& roots);
// Every tensor the roots depend on, in creation order (the order lower_dag lays them out in).
std::vector<TensorImpl*> dag_in_order(const std::vector<std::shared_ptr<TensorImpl>>& roots);
// The same into `all` (its storage reused), from n roots.
void dag_in_order(TensorImpl* const* roots, size_t n, std::vector<TensorImpl*>& all);
// Whether a leaf requiring a gradient lies behind `t` (memoised over one walk).
bool depends_on_grad(const TensorImpl& t, std::unordered_map<const TensorImpl*, bool>& memo);
// Realizes `ts`; with keep_graph, those on a gradient path keep their inputs (value() reading a
// value does not detach it); without, every one becomes a leaf (gradients after backward()).
void realize(const std::vector<Tensor>& ts, bool keep_graph);
// Lazy tensors for tape values appended after lowering (gradients).
std::vector<Tensor> raise(const Lowered& low, const std::vector<ValueId>& ids);
// The cached plan for a lowered tape.
std::shared_ptr<Plan> cached_plan(const Lowered& low, const std::vector<std::pair<ValueId, ValueId>>& write_back = {});
// Feeds the inputs, runs the plan and reads the outputs, under the lock that realizations of
// shared (cached) plans hold.
std::vector<HostTensor> run_plan(Plan& plan, const std::vector<std::pair<ValueId, const HostTensor*>>& inputs,
                                 const std::vector<ValueId>& outputs);
// The same, into `values` (its storage reused).
void run_plan(Plan& plan, const std::vector<std::pair<ValueId, const HostTensor*>>& inputs,
              const std::vector<ValueId>& outputs, std::vector<HostTensor>& values);

// The eager backward's step cache (backward_cache.cpp). An eager training loop records the same
// forward graph every iteration; the plan its backward() built is kept, keyed by that graph, and
// replayed: no differentiation, no second lowering, no hash of the whole step.
// Replays backward() of `loss` where a structurally equal step was recorded, and sets the loss's
// value and its parameters' gradients; false where none was (nothing is changed then). The DAG
// behind the loss is compared with the recorded tape node by node, without lowering it.
bool replay_backward(TensorImpl& loss);
// Realizes the loss and the new gradients `gsums` (lazy) as backward() does, and records the step
// for replay where it can be replayed (`forward`: low's graph before the gradient was appended).
void realize_and_record_backward(const Lowered& low, const Graph& forward, const std::vector<ValueId>& wrt,
                                 TensorImpl& loss,
                                 const std::vector<std::shared_ptr<TensorImpl>>& old_grads,
                                 const std::vector<Tensor>& gsums);
// How many backward() calls were replayed so far, and forgetting every recorded step (tests).
size_t backward_replays();
void clear_backward_cache();

}  // namespace synoros
