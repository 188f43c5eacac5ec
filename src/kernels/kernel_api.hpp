// What a kernel lowering sees: one node, its resolved buffers, and plan-owned storage for its
// arguments and scratch. Lowerings run at compile time; the Launch they return runs in Plan::run.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/jit/loop_ir.hpp"
#include "synoros/runtime.hpp"
#include "passes/views.hpp"

namespace synoros::kernels {

// A launch whose work Recompile may hand to a generated kernel: a fused elementwise group
// (fused.cpp) or a row kernel (composite.cpp). `args` is its lowering's argument block, `ops` how
// to run it either way.
struct JitSite {
  struct Ops {
    void (*prepare)(const void* args);  // once before evals (refreshes tiled broadcast rows)
    // Output elements [begin, end) into dst (nothing written to the output), by the generated
    // run where one is set, else by the interpreter.
    void (*eval)(const void* args, int64_t begin, int64_t end, void* dst);
    void (*set_run)(void* args, jit::RunFn run);  // null: the interpreter
    jit::RunFn (*run)(const void* args);
  };
  ValueId node;
  void* args;
  const jit::LoopKernel* kernel;  // null: no loop kernel replaces it
  int64_t elements;               // the output's
  int64_t granule;                // evals cover multiples of it (1, or a row)
  std::string walk;  // how the runtime walks the output (runs of another length or shape may
                     // favour another kernel)
  const Ops* ops;
  // A kernel with column steps: the rows each of its calls sums. An eval then writes, after its
  // output elements, the column sums of each call over those rows (begin's row first). The probe
  // takes any NaN sum for any other, so the launch must write a NaN it makes of them as one NaN.
  int64_t column_rows = 0;
};

// Plan-owned storage for launch arguments, and each launch's scratch frame. A plan lowers
// twice: once to size every frame (pointers are then placeholders that no lowering may
// dereference), then for real, with each frame placed by the memory planner in the arena.
class PlanStorage {
 public:
  template <class T>
  T* make() {
    blocks_.push_back(std::make_unique<Buffer>(sizeof(T)));
    return new (blocks_.back()->data()) T();
  }
  // Memory that lives as long as the plan (pinned weights), outside the arena.
  void* persistent(size_t bytes) {
    blocks_.push_back(std::make_unique<Buffer>(bytes));
    persistent_ += bytes;
    return blocks_.back()->data();
  }
  size_t persistent_bytes() const { return persistent_; }
  // An object that lives as long as the plan and is destroyed with it (vendor primitives).
  template <class T>
  T* own(std::unique_ptr<T> p) {
    T* raw = p.get();
    owned_.push_back(std::shared_ptr<void>(std::move(p)));
    return raw;
  }
  // True in the first, sizing lowering: pointers are placeholders, nothing may run.
  bool sizing() const { return sizing_; }
  void set_sizing(bool on) { sizing_ = on; }
  void begin_frame(char* base) {
    base_ = base;
    frame_ = 0;
  }
  size_t frame_bytes() const { return frame_; }
  void* scratch(size_t bytes) {
    size_t off = frame_;
    frame_ += (bytes + 63) / 64 * 64;
    peak_ = std::max(peak_, frame_);
    return base_ + off;
  }
  size_t scratch_bytes() const { return peak_; }
  // Memory a launch fills for a later launch of the same plan, by the node that fills it
  // (attention's log-sum-exp of each row, which its gradient then need not compute again).
  void share(ValueId node, void* p) { shared_.push_back({node, p}); }
  void* shared(ValueId node) const {
    for (auto it = shared_.rbegin(); it != shared_.rend(); ++it)
      if (it->first == node) return it->second;
    return nullptr;
  }
  // The launches lowered into this plan that Recompile may replace with generated kernels.
  void register_jit_site(const JitSite& s) { jit_sites_.push_back(s); }
  // Sites registered from `from` on run inside `launch` (a node's own, or an epilogue's producer,
  // or a reduction's fused prologue): Recompile finds them by that launch and judges them by its
  // time.
  void place_jit_sites(size_t from, ValueId launch) {
    for (size_t k = from; k < jit_sites_.size(); ++k) jit_sites_[k].node = launch;
  }
  // The plan's launch order, where known (the lowering for real; not the sizing pass): step[v] is
  // node v's place among the launches (a producer takes its epilogue's), -1 for a node that is
  // no launch of its own (folded, or run inside another launch as a prologue or chain member).
  void set_launch_order(std::vector<int> step) { step_ = std::move(step); }
  // True when both nodes launch on every run, a before b (false where the order is not known).
  bool launches_before(ValueId a, ValueId b) const {
    const auto at = [&](ValueId v) { return v >= 0 && size_t(v) < step_.size() ? step_[size_t(v)] : -1; };
    return at(a) >= 0 && at(b) >= 0 && at(a) < at(b);
  }
  const std::vector<JitSite>& jit_sites() const { return jit_sites_; }

 private:
  std::vector<JitSite> jit_sites_;
  std::vector<int> step_;
  std::vector<std::unique_ptr<Buffer>> blocks_;
  std::vector<std::shared_ptr<void>> owned_;
  std::vector<std::pair<ValueId, void*>> shared_;
  bool sizing_ = false;
  char* base_ = nullptr;
  size_t frame_ = 0, peak_ = 0, persistent_ = 0;
};

// A launch whose work is a fixed list of independent chunks, chunk `ch` writing the output
// elements [ch * chunk_elems, min(total, (ch + 1) * chunk_elems)) and nothing else. Lowerings
// that can say so fill LowerCtx::chunks; an elementwise epilogue then runs on each chunk while
// it is still in cache instead of streaming the whole output through memory a second time.
struct OutputChunks {
  void (*run)(const void* args, int64_t chunk) = nullptr;
  const void* args = nullptr;
  int64_t chunks = 0, chunk_elems = 0;
};

struct LowerCtx {
  const Graph& g;
  ValueId id;
  const Node& node;
  std::vector<void*> in;
  void* out;
  PlanStorage& storage;
  // Set by the lowering: the kernel it chose (recorded in the plan).
  std::string kernel = {};
  // Per operand: the parameter buffer it reads (directly or through a folded view), else null.
  std::vector<const Buffer*> in_param = {};
  // Per operand: element strides when it is read through a folded view (else contiguous).
  std::vector<std::vector<int64_t>> in_strides = {};
  // Per operand read through a folded view: its zero-padding gates (pad, unfold), else empty.
  std::vector<std::vector<passes::ViewGate>> in_gates = {};
  // Per operand read through a folded view: the shape of the buffer the view reads, and the
  // view's offset into it in elements (already applied to `in`), else empty.
  std::vector<Shape> in_base_shapes = {};
  std::vector<int64_t> in_offsets = {};
  // Set by lowerings whose launch splits into output chunks (see OutputChunks).
  OutputChunks chunks = {};
  // A convolution's data gradient fold(fold(einsum(dY, W))) lowered as one launch of the last
  // fold: the einsum and the first fold (in that order), whose values the plan does not keep,
  // and the einsum's operand buffers and parameter buffers (see lower_conv_data_grad).
  std::vector<ValueId> chain = {};
  std::vector<void*> chain_in = {};
  std::vector<const Buffer*> chain_param = {};
  // A reduction's fused elementwise prologue: the group computing its input (which the plan does
  // not keep), its externals and their buffers.
  std::vector<ValueId> pro_members = {}, pro_externals = {};
  std::vector<void*> pro_ptrs = {};

  const Shape& in_shape(size_t i) const { return g.shape(node.in[i]); }
  std::vector<int64_t> in_stride(size_t i) const {
    return i < in_strides.size() ? in_strides[i] : contiguous_strides(in_shape(i));
  }
  std::vector<passes::ViewGate> in_gate(size_t i) const {
    return i < in_gates.size() ? in_gates[i] : std::vector<passes::ViewGate>{};
  }
  DType in_dtype(size_t i) const { return g.dtype(node.in[i]); }
  template <class T>
  T* args() {
    static_assert(std::is_trivially_destructible_v<T>, "launch args must be trivially destructible");
    return storage.make<T>();
  }
};

// Builds the launch for one node. Throws Error for unsupported dtypes.
Launch lower(LowerCtx& ctx);

// One launch that runs `first`, then `second`.
Launch sequence(PlanStorage& storage, Launch first, Launch second, ValueId node);

// One launch that runs each chunk of `producer` and then the fused group `group` (a launch of
// lower_group reading the producer's output in place, at the same indices) on that chunk's
// elements. The same bits as sequence(producer, group): each element sees the same operations.
Launch stream_epilogue(PlanStorage& storage, const OutputChunks& producer, Launch group, ValueId node);

// Instruction-set level chosen at start-up: the best the CPU has. SYNOROS_ISA=scalar|avx2 caps
// it (the determinism tests compare all levels bit for bit).
enum class Isa { Scalar, Avx2, Avx512 };
Isa active_isa();
// The default mode selects only kernels with the engine's canonical reduction order, so every
// selection chooses among candidates with identical bits: the same results with or without a
// tuning cache, at any thread count and on every instruction set. Fast mode (SYNOROS_FAST=1,
// `--fast` on the commands) also lets selection take kernels that round differently (vendor
// GEMMs, oneDNN convolutions), each behind the float64 gate; checkpoints record those choices
// and replay them. strict_kernels() is !fast_kernels().
bool fast_kernels();
bool strict_kernels();
void set_fast_kernels(bool on);
void set_strict_kernels(bool on);
// The kernel configuration a plan is compiled under ("avx512 jit", "avx2 fast", "avx512
// conv=gemm"; "jit" while generated kernels are on): plans are reused only under the same one.
std::string kernel_config();
Isa best_isa();  // what this CPU supports
void set_isa(Isa isa);
const char* isa_name(Isa isa);

}  // namespace synoros::kernels
