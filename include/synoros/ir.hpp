// The tape: a flat vector of nodes addressed by integer ValueIds, and the single op table.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
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

// Each op's attributes, typed: one small struct per meaning; ops.def names the struct of each op,
// and Graph::add refuses any other. tie() lists the fields, so equality, the structural hash and
// printing need no code per op.
namespace attr {
struct None {
  static constexpr const char* kName = "none";
  auto tie() const { return std::tuple<>(); }
  bool operator==(const None&) const = default;
};
// sum, mean, reduce_max, reduce_max_grad: the axes reduced (none given: all of them).
struct Reduce {
  static constexpr const char* kName = "reduce";
  static constexpr bool kOptional = true;  // an op given none reduces every axis
  std::vector<int64_t> axes;
  bool keepdim = false;
  auto tie() const { return std::tie(axes, keepdim); }
  bool operator==(const Reduce&) const = default;
};
// reshape, expand: the output's shape.
struct Target {
  static constexpr const char* kName = "target";
  Shape shape;
  auto tie() const { return std::tie(shape); }
  bool operator==(const Target&) const = default;
};
struct Permute {  // output axis i is input axis perm[i]
  static constexpr const char* kName = "permute";
  std::vector<int64_t> perm;
  auto tie() const { return std::tie(perm); }
  bool operator==(const Permute&) const = default;
};
struct Slice {  // [start, end) along axis
  static constexpr const char* kName = "slice";
  int64_t axis = 0, start = 0, end = 0;
  auto tie() const { return std::tie(axis, start, end); }
  bool operator==(const Slice&) const = default;
};
struct Pad {  // zeros before and after along axis
  static constexpr const char* kName = "pad";
  int64_t axis = 0, before = 0, after = 0;
  auto tie() const { return std::tie(axis, before, after); }
  bool operator==(const Pad&) const = default;
};
struct Stride {  // every step-th element along axis, from the first
  static constexpr const char* kName = "stride";
  int64_t axis = 0, step = 1;
  auto tie() const { return std::tie(axis, step); }
  bool operator==(const Stride&) const = default;
};
struct Shift {  // out[i] = in[i + offset] along axis, zero outside
  static constexpr const char* kName = "shift";
  int64_t axis = 0, offset = 0;
  auto tie() const { return std::tie(axis, offset); }
  bool operator==(const Shift&) const = default;
};
// unfold, fold: window positions i * stride + (j - center) * dilation, center = (window - 1) / 2;
// length: fold's output extent (-1: the number of positions; unfold takes -1 only).
struct Window {
  static constexpr const char* kName = "window";
  int64_t axis = 0, window = 1, dilation = 1, stride = 1, length = -1;
  auto tie() const { return std::tie(axis, window, dilation, stride, length); }
  bool operator==(const Window&) const = default;
};
struct Einsum {
  static constexpr const char* kName = "einsum";
  std::string spec;
  auto tie() const { return std::tie(spec); }
  bool operator==(const Einsum&) const = default;
};
// softmax, log_softmax and their gradients, prod, gather.
struct Axis {
  static constexpr const char* kName = "axis";
  int64_t axis = -1;
  auto tie() const { return std::tie(axis); }
  bool operator==(const Axis&) const = default;
};
// cumsum, cumprod, cumprod_exclusive, cumprod_grad: from the end when reversed.
struct Scan {
  static constexpr const char* kName = "scan";
  int64_t axis = 0;
  bool reverse = false;
  auto tie() const { return std::tie(axis, reverse); }
  bool operator==(const Scan&) const = default;
};
struct ArgMax {  // min: the index of the minimum instead
  static constexpr const char* kName = "argmax";
  int64_t axis = 0;
  bool min = false;
  auto tie() const { return std::tie(axis, min); }
  bool operator==(const ArgMax&) const = default;
};
// layernorm, layernorm_grad, layernorm_param_grad, batchnorm_sums.
struct Eps {
  static constexpr const char* kName = "eps";
  double eps = 1e-5;
  auto tie() const { return std::tie(eps); }
  bool operator==(const Eps&) const = default;
};
// batch_stats: mean and var are x's own batch statistics, so the gradient to x flows through them.
struct BatchNorm {
  static constexpr const char* kName = "batchnorm";
  double eps = 1e-5;
  bool batch_stats = false;
  auto tie() const { return std::tie(eps, batch_stats); }
  bool operator==(const BatchNorm&) const = default;
};
// cross_entropy and its gradient: rows whose target is ignore_index count for nothing.
struct CrossEntropy {
  static constexpr const char* kName = "cross_entropy";
  static constexpr bool kOptional = true;  // none given: no ignored target
  std::optional<int64_t> ignore_index;
  auto tie() const { return std::tie(ignore_index); }
  bool operator==(const CrossEntropy&) const = default;
};
struct Rows {  // embedding_grad: the table's number of rows
  static constexpr const char* kName = "rows";
  int64_t rows = 0;
  auto tie() const { return std::tie(rows); }
  bool operator==(const Rows&) const = default;
};
struct Dropout {
  static constexpr const char* kName = "dropout";
  double p = 0;
  uint64_t seed = 0;
  auto tie() const { return std::tie(p, seed); }
  bool operator==(const Dropout&) const = default;
};
struct Attention {  // scale: the scores' factor
  static constexpr const char* kName = "attention";
  bool causal = false;
  double scale = 1;
  auto tie() const { return std::tie(causal, scale); }
  bool operator==(const Attention&) const = default;
};
struct GatherGrad {  // the gather's axis and its data's shape
  static constexpr const char* kName = "gather_grad";
  int64_t axis = 0;
  Shape shape;
  auto tie() const { return std::tie(axis, shape); }
  bool operator==(const GatherGrad&) const = default;
};
struct Conv3x3 {  // zero padding pad on every side; flipped: w is [C, O, 3, 3], turned
  static constexpr const char* kName = "conv3x3";
  int64_t pad = 1;
  bool flipped = false;
  auto tie() const { return std::tie(pad, flipped); }
  bool operator==(const Conv3x3&) const = default;
};
}  // namespace attr

using Attrs = std::variant<attr::None, attr::Reduce, attr::Target, attr::Permute, attr::Slice, attr::Pad, attr::Stride,
                           attr::Shift, attr::Window, attr::Einsum, attr::Axis, attr::Scan, attr::ArgMax, attr::Eps,
                           attr::BatchNorm, attr::CrossEntropy, attr::Rows, attr::Dropout, attr::Attention,
                           attr::GatherGrad, attr::Conv3x3>;

// The position of T among Attrs' alternatives.
template <class T, size_t I = 0>
constexpr uint8_t attr_index() {
  if constexpr (std::is_same_v<std::variant_alternative_t<I, Attrs>, T>) return uint8_t(I);
  else return attr_index<T, I + 1>();
}
// The name of Attrs' alternative i (attr::X::kName).
const char* attr_name(size_t i);

struct Node;
[[noreturn]] void throw_wrong_attrs(const Node& n, size_t wanted);

struct Node {
  Op op = Op::Input;
  DType dtype = DType::F32;
  Shape shape;
  std::vector<ValueId> in;
  Attrs attrs;
  std::string name;                         // Input / Param
  std::shared_ptr<HostTensor> data;         // Const value, or the storage a Param is bound to

  // The attributes as the op's struct; throws Error naming the op where they are another kind.
  template <class T>
  const T& attr() const {
    if (const T* a = std::get_if<T>(&attrs)) return *a;
    throw_wrong_attrs(*this, attr_index<T>());
  }
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
  uint8_t attrs;   // the index of the op's struct among Attrs' alternatives
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
  // Appends a node that add() checked and filled in before, on inputs of the same dtypes and
  // shapes: the engine's own lowering of recorded tensors to a tape, not for building graphs.
  // Its attributes, dtype and shape are taken as given, only its inputs are checked to be in the
  // graph.
  ValueId add_checked(Op op, std::vector<ValueId> in, Attrs attrs, DType dtype, Shape shape);
  // Keeps the first n nodes and drops the rest (a scratch graph reused).
  void truncate(size_t n) { nodes_.resize(std::min(n, nodes_.size())); }

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
