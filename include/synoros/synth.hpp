// Operator synthesis (after Syno, ASPLOS 2025): symbolic sizes, dimension-level primitives built
// bottom-up from the output toward the input, canonical forms, an exact shape distance, search
// (enumeration, MCTS, random, beam), lowering to engine tape ops, and export (formula, PyTorch).
//
// An operator is   y[o] = Σ_r  x[f_1(o,r), ..., f_n(o,r)] · Π_w W_w[iterators of w]
// where o are the output iterators, r the reduction iterators and each f_j is an index
// expression built from the view primitives (Split, Merge, Shift, Stride, Unfold, Expand).
// Shares attach iterators to weights (the only way weights enter); Reduce adds a summed
// iterator. Every buildable operator is exact in shape for every binding, reads every input
// element, is differentiable and multilinear in x and in each weight.
#pragma once

#include <array>
#include <compare>
#include <cstring>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "synoros/core.hpp"
#include "synoros/ir.hpp"
#include "synoros/tensor.hpp"

namespace synoros::synth {

constexpr int kMaxVars = 8;  // per kind (primary, coefficient); Size's order relies on 8

// ---------------------------------------------------------------------------------------------
// 1. Symbolic sizes: monomials over primary variables (non-negative powers) and coefficient
// variables (any power; may sit in denominators).
struct Size {
  std::array<int8_t, kMaxVars> p{};  // primary exponents
  std::array<int8_t, kMaxVars> c{};  // coefficient exponents
  Size operator*(const Size& o) const;
  Size operator/(const Size& o) const;
  bool operator==(const Size&) const = default;
  // A fast total order (the exponent bytes read as two integers); any fixed order serves the
  // canonical rules, which only need one.
  std::strong_ordering operator<=>(const Size& o) const {
    uint64_t a0, a1, b0, b1;
    std::memcpy(&a0, p.data(), 8);
    std::memcpy(&a1, c.data(), 8);
    std::memcpy(&b0, o.p.data(), 8);
    std::memcpy(&b1, o.c.data(), 8);
    if (a0 != b0) return a0 <=> b0;
    return a1 <=> b1;
  }
  bool is_one() const;
  bool pure_coefficient() const;  // no primary variable
  uint64_t hash() const;
};

struct Var {
  std::string name;
  bool coefficient = false;
  // Total |exponent| the generator may spend on it (Syno's allowance): reductions and strides
  // spend their sizes, a weight the primary variables of each iterator it shares (coefficients
  // too with Options::count_weight_coefficients), a merge what its division introduces.
  int cap = 1;
  int64_t value = 0;    // coefficients only (one global value)
};

// A layer spec: input and output shape over sizes, the variables, and one binding of the primary
// variables per layer the operator must serve.
struct Spec {
  std::vector<Var> primary, coefficient;
  std::vector<std::vector<int64_t>> bindings;  // [binding][primary var]
  std::vector<Size> input, output;
  std::vector<std::pair<int, int>> fixed;       // (output dim, input dim) passed straight through

  int find_primary(const std::string& name) const;      // -1 when absent
  int find_coefficient(const std::string& name) const;  // -1 when absent
  // Value under binding b; throws Error if it is not an integer.
  int64_t eval(const Size& s, size_t b) const;
  // Integer >= 1 under every binding, primary exponents >= 0.
  bool legal(const Size& s) const;
  std::string str(const Size& s) const;
  // Parses a monomial such as "C_out/g", "C_in*k^2", "1"; throws Error naming unknown variables.
  Size parse_size(const std::string& text) const;
  Shape shape(const std::vector<Size>& dims, size_t b) const;
  // Checks the spec is usable: dims legal, caps in range, bindings complete; throws Error.
  void validate() const;
};

// Parses a spec written as ';'- or newline-separated clauses:
//   input: N, C_in, H, W
//   output: N, C_out, H, W
//   coef: k=3, g=32          (coefficients; optional ":cap" e.g. k=3:2)
//   bind: N=1, C_in=32, C_out=32, H=28, W=28   (one clause per layer)
//   cap: C_in=1, H=0         (primary usage caps; default 1)
//   fixed: N                 (dims passed through untouched; must be in both shapes)
// Throws Error naming the cause for unknown variables, illegal sizes, missing bindings.
Spec parse_spec(const std::string& text);
// Overrides usage caps: "C_out=4, k=2" (what a spec's cap clause and a coefficient's ":cap" set).
void set_caps(Spec& spec, const std::string& items);
// The conv2d spec of the issue: [N,C_in,H,W] -> [N,C_out,H,W], k=3, g=<g>, s=2, bindings
// C_in=C_out in {32,64}, H=W in {28,14}; N fixed; caps as Syno's vision spec: C_in=2, C_out=4, k=2, g=3, s=2, H=W=0. With same_channels, C_in and C_out are one C.
Spec conv2d_spec(bool same_channels = false, int64_t g = 8);

// ---------------------------------------------------------------------------------------------
// 2. Primitives and the search state.
enum class Kind : uint8_t { Out, Red, Split, Div, Mod, Shift, Stride, Unfold };
// Merge carries Expand: Action::mask 1/2 drops the major/minor half from the data (tile/repeat);
// Weight carries Expand+Share through Action::emask. Each action is one unit of depth.
enum class ActType : uint8_t { Reduce, Weight, Merge, Split, Shift, Stride, Unfold };
const char* act_name(ActType t);

// One frontier dimension as the rules see it (no identity beyond what rules need).
struct DimInfo {
  Size size;
  Size param;          // Div/Mod: block B; Unfold: window K; Stride: factor s
  Kind kind = Kind::Out;
  uint8_t flags = 0;   // 1: shared into a weight (iterators); 2: its merge sibling was dropped;
                       // 4: a strided unshared reduction (may not become a window: pooling);
                       // 8: a remainder of a shift (its quotient dropped);
                       // bits 4-7: the weights an iterator is shared into
  int32_t group = -1;  // Out/Red: iterator id; Div/Mod: merge group
  auto operator<=>(const DimInfo&) const = default;
};

struct Dim {
  int32_t expr = -1;  // node in the expression arena; -1 in abstract states
  DimInfo info;
};

struct Action {
  ActType type = ActType::Reduce;
  int16_t a = -1, b = -1;  // frontier positions
  Size size;               // Reduce size, Merge block, Stride factor
  uint32_t mask = 0, emask = 0;  // Weight: iterators shared into it / dropped from the data;
                                 // Merge: mask 1/2 drops the major/minor half
  bool operator==(const Action&) const = default;
};

struct State {
  uint8_t stage = 0;                // 0 reductions, 1 weights, 2 views
  int depth = 0;                    // primitives so far
  std::vector<Size> reduces;        // reduction iterator sizes, ids n_out + i
  std::vector<uint32_t> weights;    // iterator masks
  uint32_t expanded = 0;            // iterators dropped from the data side
  std::vector<Dim> frontier;        // sorted
  std::array<int8_t, 2 * kMaxVars> usage{};
  int32_t next_group = 0;
  bool abstract = false;
};

struct Options {
  int max_depth = 8;
  int max_reductions = 4;
  int max_weights = 2;
  int min_weights = 1;
  int max_weight_rank = 4;
  int max_vars_in_size = 2;
  int max_exponent = 1;           // |exponent| of each variable in a generated size
  double min_unfold_ratio = 2.0;  // main dim >= ratio * window under every binding
  int64_t max_window = 30;
  bool canonical = true;          // generation-time canonicalization rules
  bool allow_stride = true;
  bool allow_shift = true;
  // Whether sharing an iterator into a weight spends its coefficients' caps too (Syno's
  // count_coefficients_in_weights_as_allowance_usage; off there by default): off, a weight may
  // hold k x k windows or groups of g without using up k or g.
  bool count_weight_coefficients = false;
};

// A finished operator: self-contained expression trees (one per input dim) and weight lists.
struct IxNode {
  Kind kind = Kind::Out;
  int32_t a = -1, b = -1;  // children (Split: major, minor; Unfold: main, window)
  int32_t iter = -1;       // Out/Red
  Size size, param;
};
struct Operator {
  std::vector<IxNode> nodes;
  std::vector<int32_t> x_root;               // per input dim
  std::vector<Size> iter_sizes;              // outputs then reductions
  int n_out = 0;
  std::vector<std::vector<int32_t>> weights; // iterator ids per weight (ascending)
  int depth = 0;
  std::string canonical;                     // canonical serialization (identity)
  uint64_t hash = 0;
  std::vector<Action> path;                  // how it was built
};

class Synthesizer;

// ---------------------------------------------------------------------------------------------
// The synthesizer owns the spec, the options, the hash-consed expression arena and the shape
// distance memo. Not thread-safe.
class Synthesizer {
 public:
  Synthesizer(Spec spec, Options opt = {});
  ~Synthesizer();
  const Spec& spec() const { return spec_; }
  const Options& options() const { return opt_; }
  const std::vector<Size>& candidate_sizes() const { return cands_; }

  State root() const;
  // Legal actions (rules applied; no distance pruning).
  void actions(const State& s, std::vector<Action>& out) const;
  State apply(const State& s, const Action& a);
  // Actions whose result can still be completed within max_depth (shape-distance pruned).
  void pruned_actions(const State& s, std::vector<Action>& out);
  bool complete(const State& s) const;
  // Minimum number of primitives still needed to reach the input shape (exact); returns
  // limit + 1 when it exceeds limit.
  int distance(const State& s, int limit);
  // distance(s, limit) <= limit, decided without computing the exact value (used for pruning).
  bool within(const State& s, int limit);
  State abstract(const State& s) const;
  // Throws Error explaining why when no operator of depth <= max_depth exists for the spec.
  void require_reachable();
  std::string state_key(const State& s) const;
  // A content hash of the state, independent of arena ids (stable across processes).
  uint64_t state_hash(const State& s) const;
  // Operators of a complete state (one per assignment of equal-size frontier dims to input dims).
  std::vector<Operator> finalize(const State& s, const std::vector<Action>& path = {}) const;
  std::string expr_str(int32_t expr) const;
  size_t arena_size() const;
  size_t distance_memo_size() const;

  struct Impl;  // opaque: arena and memo (src/synth/internal.hpp)

 private:
  Spec spec_;
  Options opt_;
  std::vector<Size> cands_;
  std::unique_ptr<Impl> impl_;
  friend struct SynthAccess;
};

// ---------------------------------------------------------------------------------------------
// 3. Enumeration and canonical counts.
struct DepthCount {
  int depth = 0;
  uint64_t sequences = 0;   // action sequences of exactly this length ending in a complete state
  uint64_t states = 0;      // distinct search states at this depth
  uint64_t operators = 0;   // distinct canonical operators first reached at this depth
};
struct EnumResult {
  std::vector<DepthCount> per_depth;
  std::vector<Operator> operators;  // distinct, in discovery order (when kept)
  uint64_t total_states = 0;
  double seconds = 0;
};
// Breadth-first over the state DAG up to opt.max_depth with shape-distance pruning, from the
// root or from `start` (a state reached by `start_path`).
EnumResult enumerate(Synthesizer& syn, bool keep_operators = true, size_t max_operators = SIZE_MAX,
                     const State* start = nullptr, const std::vector<Action>& start_path = {});

// ---------------------------------------------------------------------------------------------
// 4. Search.
using Reward = std::function<double(const Operator&)>;
// A cheap proxy: 1 for operators whose FLOPs (first binding) lie in [lo, hi]·reference, decaying
// outside; used when no training is attached.
Reward flops_proxy_reward(const Synthesizer& syn, double reference_flops, double lo = 0.1,
                          double hi = 1.0);

struct SearchResult {
  std::vector<std::pair<double, Operator>> best;  // best first
  uint64_t iterations = 0;
  uint64_t evaluations = 0;  // distinct operators evaluated
  double seconds = 0;
};

struct MctsOptions {
  uint64_t seed = 1;
  double c_uct = 1.4;
  double virtual_loss = 1.0;
  double widening_c = 2.0, widening_alpha = 0.5;  // revealed children = ceil(c * N^alpha)
  int batch = 4;                                  // leaves selected before evaluation
  size_t keep_best = 10;
  std::string checkpoint;                         // file; empty: none
  uint64_t checkpoint_every = 0;                  // iterations; 0: only at the end
};

class Mcts {
 public:
  Mcts(Synthesizer& syn, Reward reward, MctsOptions opt = {});
  ~Mcts();
  // Runs until `iterations` in total have been done (counting resumed ones).
  SearchResult run(uint64_t iterations);
  void save(const std::string& path) const;
  // Restores a search saved by save(); throws Error on a corrupt or foreign file.
  void load(const std::string& path);
  uint64_t iterations() const;
  size_t nodes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

SearchResult random_search(Synthesizer& syn, const Reward& reward, uint64_t samples, uint64_t seed,
                           size_t keep_best = 10);
SearchResult beam_search(Synthesizer& syn, const Reward& reward, size_t width, uint64_t seed,
                         size_t keep_best = 10);
// One uniformly random complete operator (random descent with distance pruning); false if none.
bool sample(Synthesizer& syn, std::mt19937_64& rng, Operator& out);

// ---------------------------------------------------------------------------------------------
// 5. Lowering to the engine and evaluation.
struct Binding {
  std::vector<int64_t> primary;  // one value per primary variable
};
Binding binding(const Spec& spec, size_t b);

struct Stats {
  double flops = 0;   // of the lowered contraction chain (2 per multiply-add)
  double params = 0;
};
Stats stats(const Spec& spec, const Operator& op, const Binding& bind);

// Weight shapes under a binding (iterator order ascending).
std::vector<Shape> weight_shapes(const Spec& spec, const Operator& op, const Binding& bind);
// Appends the operator to a graph: views on x then a chain of einsums with the weights.
ValueId lower(const Spec& spec, const Operator& op, const Binding& bind, Graph& g, ValueId x,
              const std::vector<ValueId>& weights);
// The same on lazy tensors (trains with the engine's autodiff).
Tensor apply(const Spec& spec, const Operator& op, const Binding& bind, const Tensor& x,
             const std::vector<Tensor>& weights);
// Fan-in scaled initialization: Var(y) ≈ Var(x) for unit-variance x. Seeded.
std::vector<Tensor> init_weights(const Spec& spec, const Operator& op, const Binding& bind,
                                 uint64_t seed);
// Direct float64 evaluation from the index expressions (independent of the lowering).
HostTensor reference_eval(const Spec& spec, const Operator& op, const Binding& bind,
                          const HostTensor& x, const std::vector<HostTensor>& weights);

// Groups of operators (indices into `ops`) that compute the same function up to a re-layout of
// their weights, judged at every binding of the spec by invariants that no permutation of a
// weight's elements changes (weight sizes, the response at all-ones weights, the norms of weight
// gradients along random output directions), evaluated in the engine. Equal functions always
// share a group; different ones almost surely do not. Groups keep the order of `ops`. A group
// of several canonical forms is a canonicalization gap (`synoros synth --mode gaps`).
std::vector<std::vector<size_t>> equal_functions(const Spec& spec, const std::vector<Operator>& ops, uint64_t seed = 1);

// ---------------------------------------------------------------------------------------------
// 6. Export.
std::string formula(const Spec& spec, const Operator& op);
// A standalone PyTorch module file (class name `cls`) with exactly the engine's semantics for the
// binding; weights are nn.Parameters of the shapes weight_shapes() gives.
std::string pytorch_module(const Spec& spec, const Operator& op, const Binding& bind,
                           const std::string& cls = "SynthOp");
std::string describe(const Spec& spec, const Operator& op);  // one line: formula, FLOPs, params

// ---------------------------------------------------------------------------------------------
// 7. Known operator families, to tell a found operator known from new.
struct KnownFamily {
  std::string name;  // "standard kxk", "depthwise kxk", "grouped pointwise", ...
  Operator op;       // built by hand in the spec's variables, with its canonical form
};
// The families a spec of [N, C_in, H, W] -> [N, C_out, H, W] (or one channel count C) can hold:
// pointwise, shifted pointwise (along H or W), grouped and low-rank pointwise (groups or rank
// any coefficient), standard, separable (kx1, 1xk), depthwise (same channels), grouped, low-rank
// and dilated (dilation s, where centred as PyTorch's) kxk convolutions (window k), as far as the
// spec has the coefficients and their sizes are legal. For [N, C_in] -> [N, C_out] (a linear
// layer): dense, grouped (block-diagonal, any coefficient as the group count) and low-rank (rank
// m, C_in/m or C_out/m for every product m of the coefficients up to their caps). Other layouts:
// none.
std::vector<KnownFamily> known_families(const Spec& spec);
// Per operator, the family it belongs to, or "" (a new operator): by canonical form, else by
// computing the same function up to a re-layout of its weights (equal_functions, seeded).
std::vector<std::string> known_family_names(const Spec& spec, const std::vector<Operator>& ops,
                                            const std::vector<KnownFamily>& families, uint64_t seed = 1);

// The canonical serialization of an operator built by hand (IxNode trees + weights).
std::string canonical_form(const Operator& op);
// An action path as text (stable across processes) and back; decode throws Error when corrupt.
// Together with build_from_actions this persists a chosen operator.
std::string encode_actions(const std::vector<Action>& p);
std::vector<Action> decode_actions(const std::string& s);
// Replays an action path from the root; throws Error if a step is illegal or it ends incomplete.
Operator build_from_actions(Synthesizer& syn, const std::vector<Action>& path);

}  // namespace synoros::synth
