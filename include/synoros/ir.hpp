// The tape: a flat vector of nodes addressed by integer ValueIds, and the single op table.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "synoros/core.hpp"

namespace synoros {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// The op set of DESIGN.md, expanded from its one definition (ops.def; docs/architecture.md has
// the checklist for adding an op).
enum class Op : uint8_t {
#define SYNOROS_OP(Enum, ...) Enum,
#define SYNOROS_MAP(Enum, ...) Enum,
#include "synoros/ops.def"
  Count
};
constexpr size_t kOpCount = size_t(Op::Count);

enum class OpKind : uint8_t { Leaf, Elementwise, Reduce, View, Contraction, Composite };

// What the passes may assume of an op, beyond its kind (the last column of ops.def).
enum OpProp : uint16_t {
  kMap = 1,           // an elementwise map: one line kernel, fusable with its neighbours
  kIntegers = 2,      // also over integer tensors (comparisons, where)
  kAlias = 4,         // the output is the input's storage (reshape): no launch, no data moved
  kAffineView = 8,    // an index map a strided read can follow (permute, slice, stride, expand, reshape)
  kGatedView = 16,    // affine plus a zero-padding gate (pad, unfold)
  kFoldableView = 32, // a view that may fold into the reads of its consumers
};

struct Attrs {
  std::vector<int64_t> ints;  // axes / perm / target shape / (axis, a, b) triples, per op
  double scalar = 0.0;        // eps, dropout probability
  uint64_t seed = 0;          // dropout
  bool keepdim = false;       // reductions
  std::string spec;           // einsum
  bool operator==(const Attrs&) const = default;
};

struct Node {
  Op op = Op::Input;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<ValueId> in;
  Attrs attrs;
  std::string name;                         // Input / Param
  std::shared_ptr<HostTensor> data;         // Const value, or the storage a Param is bound to
};

class Graph;

struct Cost {
  double flops = 0;
  double bytes = 0;
};

// One row per op: everything the passes need to know about it, and nothing about kernels.
struct OpInfo {
  Op op;
  const char* name;
  int arity;  // -N: from 1 to N inputs (einsum 1-2, layernorm 1 or 3)
  OpKind kind;
  // Sets node.shape and node.dtype from the inputs and attrs; throws Error naming op and shapes.
  void (*infer)(const Graph&, Node&);
  // Appends the nodes computing each input's adjoint; leaves kNoValue where none flows.
  // nullptr: not differentiable.
  void (*vjp)(Graph&, ValueId node, ValueId grad_out, std::vector<ValueId>& grad_in);
  // float64 reference (integer tensors stay I64).
  HostTensor (*oracle)(const Node&, const std::vector<const HostTensor*>& in);
  Cost (*cost)(const Graph&, const Node&);
  unsigned props;  // OpProp bits
  bool has(OpProp p) const { return (props & p) != 0; }
};

const OpInfo& op_info(Op op);
inline const char* op_name(Op op) { return op_info(op).name; }

class Graph {
 public:
  // Leaves.
  ValueId input(DType t, Shape s, std::string name);
  ValueId param(std::shared_ptr<HostTensor> storage, std::string name);
  ValueId constant(HostTensor value);
  ValueId scalar(double v, DType t = DType::F32);

  // Appends a node after checking it; returns its id.
  ValueId add(Op op, std::vector<ValueId> in, Attrs attrs = {}, DType cast_to = DType::F32);

  // Builders for the common ops (used by autodiff, tests and the front end).
  ValueId unary(Op op, ValueId a) { return add(op, {a}); }
  ValueId binary(Op op, ValueId a, ValueId b) { return add(op, {a, b}); }
  ValueId sum(ValueId a, std::vector<int64_t> axes, bool keepdim = false);
  ValueId mean(ValueId a, std::vector<int64_t> axes, bool keepdim = false);
  ValueId reshape(ValueId a, Shape s);
  ValueId permute(ValueId a, std::vector<int64_t> perm);
  ValueId expand(ValueId a, Shape s);
  ValueId einsum(const std::string& spec, std::vector<ValueId> in);
  ValueId matmul(ValueId a, ValueId b);  // [.., m, k] @ [.., k, n]
  ValueId cast(ValueId a, DType t) { return add(Op::Cast, {a}, {}, t); }
  // Sums `g` over broadcast axes so it has `target`'s shape (the adjoint of broadcasting).
  ValueId sum_to(ValueId g, Shape target);

  const Node& node(ValueId v) const { return nodes_.at(size_t(v)); }
  Node& node_mut(ValueId v) { return nodes_.at(size_t(v)); }
  const Shape& shape(ValueId v) const { return node(v).shape; }
  DType dtype(ValueId v) const { return node(v).dtype; }
  size_t size() const { return nodes_.size(); }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Structural hash of the tape restricted to what `outputs` need (ops, attrs, shapes, dtypes,
  // wiring, const contents, param identities). Equal graphs hash equal.
  uint64_t structural_hash() const;
  bool structurally_equal(const Graph& o) const;
  std::string to_string() const;

 private:
  std::vector<Node> nodes_;
};

// Broadcast two shapes numpy-style; throws Error naming `op` on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace synoros
