#include "passes/memory_plan.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <sstream>

namespace synoros::passes {

namespace {
constexpr size_t kAlign = 64;
size_t rounded(const Node& n) {
  size_t b = size_t(numel(n.shape)) * dtype_size(n.dtype);
  return std::max<size_t>(kAlign, (b + kAlign - 1) / kAlign * kAlign);
}

// Best fit over an address-ordered free list; the arena grows at its tail only when no free
// block fits. Frees coalesce with their neighbours.
class IntervalAllocator {
 public:
  size_t alloc(size_t size) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size && (best == free_.end() || it->second < best->second)) best = it;
    if (best != free_.end()) {
      size_t off = best->first, left = best->second - size;
      free_.erase(best);
      if (left) free_[off + size] = left;
      return off;
    }
    // Extend the arena, absorbing a free block that ends at the tail.
    size_t off = top_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == top_) {
        off = last->first;
        free_.erase(last);
      }
    }
    top_ = std::max(top_, off + size);
    return off;
  }
  void release(size_t off, size_t size) {
    auto it = free_.emplace(off, size).first;
    auto next = std::next(it);
    if (next != free_.end() && off + size == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  size_t peak() const { return top_; }

 private:
  std::map<size_t, size_t> free_;
  size_t top_ = 0;
};
}  // namespace

bool can_run_in_place(const Graph& g, const Node& n, size_t k) {
  OpKind kind = op_info(n.op).kind;
  if (kind != OpKind::Elementwise && n.op != Op::Dropout) return false;
  const Node& x = g.node(n.in[k]);
  return x.shape == n.shape && dtype_size(x.dtype) == dtype_size(n.dtype);
}

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  const Graph& g = *in.g;
  size_t n = g.size();
  MemoryPlan m;
  m.offset.assign(n, SIZE_MAX);
  m.life.assign(n, {});
  m.inplace_of.assign(n, kNoValue);
  std::vector<int> step(n, -1);
  for (size_t s = 0; s < in.order.size(); ++s) step[size_t(in.order[s])] = int(s);
  for (size_t v = 0; v < n; ++v) {
    if (!in.in_arena[v]) continue;
    m.life[v] = {step[v], in.observable[v] ? kForever : step[v]};
    m.naive_bytes += rounded(g.node(ValueId(v)));
  }
  for (size_t s = 0; s < in.order.size(); ++s)
    for (ValueId x : in.reads[s]) {
      ValueId r = in.alias_root[size_t(x)];
      if (r != kNoValue && in.in_arena[size_t(r)] && m.life[size_t(r)].end != kForever)
        m.life[size_t(r)].end = std::max(m.life[size_t(r)].end, int(s));
    }
  auto scratch_of = [&](size_t s) {
    size_t b = s < in.scratch.size() ? in.scratch[s] : 0;
    return (b + kAlign - 1) / kAlign * kAlign;
  };
  m.scratch_offset.assign(in.order.size(), SIZE_MAX);
  for (size_t s = 0; s < in.order.size(); ++s) m.naive_bytes += scratch_of(s);
  if (!in.plan) {
    size_t off = 0;
    for (size_t v = 0; v < n; ++v)
      if (in.in_arena[v]) m.offset[v] = off, off += rounded(g.node(ValueId(v)));
    for (size_t s = 0; s < in.order.size(); ++s)
      if (scratch_of(s)) m.scratch_offset[s] = off, off += scratch_of(s);
    m.arena_bytes = off;
    return m;
  }
  IntervalAllocator alloc;
  // Values alive before the first launch (inputs, folded constants).
  for (size_t v = 0; v < n; ++v)
    if (in.in_arena[v] && m.life[v].start < 0) m.offset[v] = alloc.alloc(rounded(g.node(ValueId(v))));
  std::vector<std::vector<ValueId>> dies_at(in.order.size());
  for (size_t v = 0; v < n; ++v)
    if (in.in_arena[v] && m.life[v].end != kForever && m.life[v].end >= 0)
      dies_at[size_t(m.life[v].end)].push_back(ValueId(v));
  for (size_t s = 0; s < in.order.size(); ++s) {
    ValueId v = in.order[s];
    const Node& nd = g.node(v);
    bool took = false;
    if (in.in_arena[size_t(v)]) {
      // In place: a read whose last reader is this launch, with the same size and layout.
      for (ValueId x : in.inplace[s]) {
        if (took) break;
        if (in.alias_root[size_t(x)] != x || !in.in_arena[size_t(x)]) continue;
        if (m.life[size_t(x)].end != int(s) || rounded(g.node(x)) != rounded(nd)) continue;
        // Another operand reading the same buffer at a different index would be clobbered.
        bool shared = false;
        for (ValueId y : in.reads[s])
          if (y != x && in.alias_root[size_t(y)] == x && g.shape(y) != nd.shape) shared = true;
        if (shared) continue;
        m.offset[size_t(v)] = m.offset[size_t(x)];
        m.inplace_of[size_t(v)] = x;
        took = true;
      }
      if (!took) m.offset[size_t(v)] = alloc.alloc(rounded(nd));
    }
    // The launch's scratch lives exactly as long as the launch.
    if (scratch_of(s)) m.scratch_offset[s] = alloc.alloc(scratch_of(s));
    for (ValueId d : dies_at[s]) {
      bool handed_on = in.in_arena[size_t(v)] && m.inplace_of[size_t(v)] == d;
      if (!handed_on) alloc.release(m.offset[size_t(d)], rounded(g.node(d)));
    }
    if (scratch_of(s)) alloc.release(m.scratch_offset[s], scratch_of(s));
  }
  m.arena_bytes = alloc.peak();
  return m;
}

std::string describe_memory(const Graph& g, const MemoryPlan& m) {
  std::ostringstream o;
  o << "memory: peak " << m.arena_bytes << " bytes, unplanned " << m.naive_bytes << " bytes\n";
  for (size_t v = 0; v < m.offset.size(); ++v) {
    if (m.offset[v] == SIZE_MAX) continue;
    const Node& nd = g.node(ValueId(v));
    o << "  %" << v << " " << op_name(nd.op) << " " << dtype_name(nd.dtype) << shape_str(nd.shape)
      << " @" << m.offset[v] << " live [" << m.life[v].start << ", "
      << (m.life[v].end == kForever ? std::string("end") : std::to_string(m.life[v].end)) << "]";
    if (m.inplace_of[v] != kNoValue) o << " in place of %" << m.inplace_of[v];
    o << "\n";
  }
  return o.str();
}

}  // namespace synoros::passes
