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

// Offline placement, once every block's lifetime is known: the largest blocks first, each at the
// lowest offset clear of the blocks already placed whose lifetimes overlap (greedy by size, as
// TensorFlow Lite's arena planner does). A block is a value with those that took it over in place
// (one lifetime, from the first's start to the last's end), or a launch's scratch frame.
struct Block {
  size_t size = 0;
  int start = 0, end = 0;
  size_t offset = 0;
};
// Offsets for `blocks` (set in place); returns the arena's size. The placed blocks are kept in
// offset order, so each placement is one pass over them.
size_t place_by_size(std::vector<Block>& blocks) {
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].size != blocks[b].size) return blocks[a].size > blocks[b].size;
    if (blocks[a].start != blocks[b].start) return blocks[a].start < blocks[b].start;
    return a < b;
  });
  std::vector<size_t> placed;  // by offset
  size_t top = 0;
  for (size_t i : order) {
    Block& b = blocks[i];
    size_t off = 0;
    for (size_t j : placed) {
      const Block& p = blocks[j];
      if (p.start > b.end || b.start > p.end) continue;  // not alive at the same time
      if (off + b.size <= p.offset) break;
      off = std::max(off, p.offset + p.size);
    }
    b.offset = off;
    top = std::max(top, off + b.size);
    auto at = std::upper_bound(placed.begin(), placed.end(), off,
                               [&](size_t o, size_t j) { return o < blocks[j].offset; });
    placed.insert(at, i);
  }
  return top;
}

// The most bytes alive at any one launch: no layout can use less.
size_t most_live_bytes(const std::vector<Block>& blocks, size_t launches) {
  std::vector<int64_t> delta(launches + 2, 0);  // index s + 1: launch s (-1: before the first)
  for (const Block& b : blocks) {
    const size_t first = size_t(b.start + 1), last = b.end == kForever ? launches + 1 : size_t(b.end + 1) + 1;
    delta[first] += int64_t(b.size);
    if (last < delta.size()) delta[last] -= int64_t(b.size);
  }
  int64_t live = 0, most = 0;
  for (int64_t d : delta) most = std::max(most, live += d);
  return size_t(most);
}
}  // namespace

bool element_by_element(const Node& n) { return op_info(n.op).kind == OpKind::Elementwise || n.op == Op::Dropout; }

bool can_run_in_place(const Graph& g, const Node& n, size_t k) {
  // embedding_grad's third input, the gradient it adds its rows to, is read where it is written.
  const bool adds_into = n.op == Op::EmbeddingGrad && k == 2;
  if (!element_by_element(n) && !adds_into) return false;
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
        // Another operand reading the same buffer at a different index would be clobbered; for
        // a launch that does not go element by element (embedding_grad), any other operand.
        bool shared = false;
        int readers_of_x = 0;
        for (ValueId y : in.reads[s]) {
          if (in.alias_root[size_t(y)] != x) continue;
          ++readers_of_x;
          if (y != x && g.shape(y) != nd.shape) shared = true;
        }
        if (!element_by_element(nd) && readers_of_x > 1) shared = true;
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

  // The same lifetimes placed offline; kept when the arena is smaller (the in-place choices above
  // depend on lifetimes only, so they hold for any placement).
  std::vector<size_t> block_of(n, SIZE_MAX);
  std::vector<Block> blocks;
  for (size_t v = 0; v < n; ++v) {
    if (!in.in_arena[v] || m.offset[v] == SIZE_MAX) continue;
    size_t root = v;
    while (m.inplace_of[root] != kNoValue) root = size_t(m.inplace_of[root]);
    if (block_of[root] == SIZE_MAX) {
      block_of[root] = blocks.size();
      blocks.push_back({rounded(g.node(ValueId(root))), m.life[root].start, m.life[root].end, 0});
    }
    Block& b = blocks[block_of[root]];
    block_of[v] = block_of[root];
    b.start = std::min(b.start, m.life[v].start);
    b.end = std::max(b.end, m.life[v].end);
  }
  std::vector<size_t> scratch_block(in.order.size(), SIZE_MAX);
  for (size_t s = 0; s < in.order.size(); ++s)
    if (scratch_of(s)) scratch_block[s] = blocks.size(), blocks.push_back({scratch_of(s), int(s), int(s), 0});
  constexpr size_t kMaxOfflineBlocks = 20000;  // quadratic in the blocks
  if (blocks.size() > kMaxOfflineBlocks || m.arena_bytes <= most_live_bytes(blocks, in.order.size())) return m;
  const size_t top = place_by_size(blocks);
  if (top >= m.arena_bytes) return m;
  for (size_t v = 0; v < n; ++v)
    if (block_of[v] != SIZE_MAX) m.offset[v] = blocks[block_of[v]].offset;
  for (size_t s = 0; s < in.order.size(); ++s)
    if (scratch_block[s] != SIZE_MAX) m.scratch_offset[s] = blocks[scratch_block[s]].offset;
  m.arena_bytes = top;
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
