// Track and Place for memory: the liveness of every value over a schedule of launches, and an
// arena offset for each value: best fit in launch order, or, when smaller, every block placed
// offline largest first (see memory_plan.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "synoros/ir.hpp"

namespace synoros::passes {

constexpr int kForever = std::numeric_limits<int>::max();

// Per value: the launch step producing it (-1: before the first launch, e.g. inputs and folded
// constants) and the last step reading it (kForever: observable, never reused).
struct Lifetime {
  int start = -1;
  int end = -1;
};

struct MemoryPlan {
  std::vector<size_t> offset;        // arena offset per value; SIZE_MAX if not in the arena
  std::vector<Lifetime> life;        // per value (arena values only are meaningful)
  std::vector<ValueId> inplace_of;   // value whose block this one took over at its start
  std::vector<size_t> scratch_offset;  // per launch (SIZE_MAX: none)
  size_t arena_bytes = 0;            // the arena's size (the smaller of the two layouts)
  size_t naive_bytes = 0;            // every value (and scratch frame) its own block
};

struct MemoryPlanInput {
  const Graph* g = nullptr;
  std::vector<bool> in_arena;       // value needs an arena block
  std::vector<ValueId> alias_root;  // reshape chains point to the value owning the bytes
  std::vector<ValueId> order;       // the value each launch writes, in schedule order
  std::vector<std::vector<ValueId>> reads;    // per launch: the values it reads
  std::vector<std::vector<ValueId>> inplace;  // per launch: reads it may overwrite, if they die
  std::vector<size_t> scratch;      // per launch: bytes of scratch it needs while it runs
  std::vector<bool> observable;     // never reused: inputs, outputs, folded, kept values
  bool plan = true;                 // false: every value its own block (SYNOROS_NO_PLAN)
};

MemoryPlan plan_memory(const MemoryPlanInput& in);

// Whether `n`'s kernel reads and writes element by element, each element read before it is
// written at the same position (elementwise maps, dropout): another operand over the same bytes
// at the same shape is then safe.
bool element_by_element(const Node& n);

// Whether `n` may write its output over input `k` (same shape, same element size, and the kernel
// reads each element before writing it).
bool can_run_in_place(const Graph& g, const Node& n, size_t k);

std::string describe_memory(const Graph& g, const MemoryPlan& m);

}  // namespace synoros::passes
