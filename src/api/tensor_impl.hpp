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

struct TraceState {
  bool active = false;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> updates;
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::shared_ptr<TensorImpl>>> saved_grads;
};
TraceState& trace_state();

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
// Whether a leaf requiring a gradient lies behind `t` (memoised over one walk).
bool depends_on_grad(const TensorImpl& t, std::unordered_map<const TensorImpl*, bool>& memo);
// Realizes `ts`; with keep_graph, those on a gradient path keep their inputs (value() reading a
// value does not detach it); without, every one becomes a leaf (gradients after backward()).
void realize(const std::vector<Tensor>& ts, bool keep_graph);
// Lazy tensors for tape values appended after lowering (gradients).
std::vector<Tensor> raise(const Lowered& low, const std::vector<ValueId>& ids);
// The cached plan for a lowered tape.
std::shared_ptr<Plan> cached_plan(const Lowered& low);

}  // namespace synoros
