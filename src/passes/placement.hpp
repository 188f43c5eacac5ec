// Track and Place as passes over one set of per-node facts. Plan's constructor runs them in
// order: track, fuse_groups, fold_views_into_readers, fuse_conv_data_chains,
// fuse_reduction_prologues, then memory_input for the memory planner.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "passes/fusion.hpp"
#include "passes/memory_plan.hpp"
#include "passes/views.hpp"
#include "synoros/ir.hpp"

namespace synoros::passes {

// What the passes know of every node of the graph, indexed by ValueId.
struct Placement {
  // Track.
  std::vector<bool> needed;         // an output depends on it
  std::vector<bool> folded;         // computable from constants alone: run once at compile time
  std::vector<ValueId> alias_root;  // reshape chains: the value owning the bytes
  std::vector<bool> launched;       // computed by a launch (not a leaf, not folded, not an alias)
  std::vector<bool> observable;     // must stay materialised: inputs, outputs, folded, kept values
  std::vector<int> readers;         // distinct needed readers
  std::vector<ValueId> a_reader;    // one of them
  // Place.
  std::vector<FusionGroup> groups;  // elementwise groups, one launch each
  std::vector<ValueId> producer;    // per group: the launch it runs as the epilogue of, or kNoValue
  std::vector<int> group_of;        // per node: the group whose output it is, or -1
  std::vector<bool> is_producer;    // runs inside its group's launch
  std::vector<bool> fused_away;     // computed inside another node's launch
  std::vector<std::vector<AffineView>> operand_views;  // per einsum or attention: operands read through views
  std::vector<std::vector<ValueId>> chain_of;  // per fold: the convolution data-gradient chain it runs
  std::vector<int> prologue_of;     // per reduction: the group it runs as its prologue, or -1

  // The values the launch of node v reads (an einsum its operands' bases, a chain its start's
  // inputs, a reduction with a prologue the group's externals).
  std::vector<ValueId> reads(const Graph& g, ValueId v) const;
};

// Track: what the outputs need, constant folding, aliases, launches and observable values.
Placement track(const Graph& g, const std::vector<ValueId>& outputs, bool keep_intermediates);
// Elementwise fusion groups and the producers they run as epilogues of (fusion.hpp).
void fuse_groups(const Graph& g, Placement& p, bool enabled);
// Affine view chains whose every reader is an einsum or an attention (directly or through further
// such views) are never materialised: each operand of such a reader records its base and (offset,
// strides). An attention reads rows in place (rows_view): a view it cannot is materialised.
void fold_views_into_readers(const Graph& g, Placement& p);
// A convolution's data gradient fold(fold(einsum(dY, W))) whose einsum and first fold nobody else
// reads runs as one launch of the last fold (match_conv_data_grad, conv_match.hpp).
void fuse_conv_data_chains(const Graph& g, Placement& p);
// A group whose output only a sum or mean reads, and that nobody else observes, runs block by
// block inside the reduction's launch; `takes_prologue` says which reductions can.
void fuse_reduction_prologues(const Graph& g, Placement& p, bool (*takes_prologue)(const Graph&, ValueId));
// The memory planner's input: launches in tape order with their reads, in-place candidates and
// scratch (`frame`, per node, from a sizing lowering).
MemoryPlanInput memory_input(const Graph& g, const Placement& p, const std::vector<size_t>& frame, bool plan);

}  // namespace synoros::passes
