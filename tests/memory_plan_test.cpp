// Track and Place: over thousands of random graphs, no two simultaneously live buffers overlap,
// and planned results equal unplanned ones bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "kernels/cpu/packed_weights.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/config.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

struct RandomGraph {
  Graph g;
  std::vector<ValueId> inputs, outputs;
};

RandomGraph make_random_graph(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  RandomGraph r;
  std::vector<ValueId> vals;
  int n_in = 1 + int(pick(3));
  for (int i = 0; i < n_in; ++i) {
    Shape s;
    int rank = 1 + int(pick(3));
    for (int d = 0; d < rank; ++d) s.push_back(1 + int64_t(pick(5)));
    ValueId v = r.g.input(DType::F32, s, "x" + std::to_string(i));
    r.inputs.push_back(v);
    vals.push_back(v);
  }
  int n_ops = 4 + int(pick(28));
  for (int k = 0; k < n_ops; ++k) {
    ValueId a = vals[pick(vals.size())];
    const Shape sa = r.g.shape(a);
    ValueId out = kNoValue;
    switch (sa.empty() ? 0 : pick(12)) {
      case 0: out = r.g.unary(std::array{Op::Tanh, Op::Sigmoid, Op::Relu, Op::Neg, Op::Abs}[pick(5)], a); break;
      case 1: case 2: {  // binary with a same-shaped or broadcastable partner, else itself
        ValueId b = a;
        for (ValueId c : vals)
          if (r.g.shape(c) == sa && pick(2)) b = c;
        out = r.g.binary(std::array{Op::Add, Op::Mul, Op::Sub, Op::Max}[pick(4)], a, b);
        break;
      }
      case 3: out = r.g.sum(a, {int64_t(pick(sa.size()))}, pick(2) == 0); break;
      case 4: {
        std::vector<int64_t> p(sa.size());
        for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(i);
        std::shuffle(p.begin(), p.end(), rng);
        out = r.g.permute(a, p);
        break;
      }
      case 5: out = r.g.reshape(a, {numel(sa)}); break;
      case 6: {
        const int64_t axis = int64_t(pick(sa.size())), before = int64_t(pick(2));
        out = r.g.add(Op::Pad, {a}, attr::Pad{axis, before, int64_t(pick(3))});
        break;
      }
      case 7: {  // contract the last axis with a fresh weight-like input... use another value
        out = r.g.add(Op::Softmax, {a}, attr::Axis{-1});
        break;
      }
      case 8: {
        if (sa.size() == 2) out = r.g.matmul(a, r.g.permute(a, {1, 0}));
        else out = r.g.binary(Op::Add, a, r.g.scalar(0.5));
        break;
      }
      case 9: {  // a batch norm's statistic: the mean of an elementwise value over leading and trailing axes
        ValueId e = r.g.binary(Op::Mul, a, r.g.unary(Op::Tanh, a));
        if (sa.size() >= 3) out = r.g.mean(e, {0, int64_t(sa.size()) - 1}, pick(2) == 0);
        else out = r.g.sum(e, {int64_t(sa.size()) - 1}, true);
        break;
      }
      case 10: {  // broadcast back: x * expand(sum(x)) + expand(sum(x)) (an expand read twice)
        ValueId s = r.g.expand(r.g.sum(a, {int64_t(pick(sa.size()))}, true), sa);
        out = r.g.binary(Op::Add, r.g.binary(Op::Mul, a, s), s);
        break;
      }
      case 11: {  // a slice; from 0 with only size-1 axes before it, an alias of its input's first bytes
        const int64_t axis = int64_t(pick(sa.size())), n = sa[size_t(axis)];
        const int64_t start = pick(2) ? 0 : int64_t(pick(size_t(n)));
        out = r.g.add(Op::Slice, {a}, attr::Slice{axis, start, start + 1 + int64_t(pick(size_t(n - start)))});
        break;
      }
    }
    vals.push_back(out);
  }
  r.outputs.push_back(vals.back());
  for (int i = 0; i < 2; ++i) {
    ValueId o = vals[pick(vals.size())];
    if (r.g.node(o).op != Op::Input) r.outputs.push_back(o);
  }
  return r;
}

void check_no_overlap(const Plan& p) {
  auto bufs = p.buffers();
  for (size_t i = 0; i < bufs.size(); ++i)
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const BufferInfo &a = bufs[i], &b = bufs[j];
      if (a.bytes == 0 || b.bytes == 0) continue;
      bool mem = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      bool time = !(a.end < b.start || b.end < a.start);
      if (!mem || !time) continue;
      bool handoff = (b.inplace_of == a.value && a.end == b.start) ||
                     (a.inplace_of == b.value && b.end == a.start);
      ASSERT_TRUE(handoff) << "%" << a.value << " [" << a.start << "," << a.end << "] and %" << b.value
                           << " [" << b.start << "," << b.end << "] share bytes";
    }
}

std::vector<std::vector<uint8_t>> run_outputs(const RandomGraph& r, bool plan, uint64_t seed,
                                              size_t* arena = nullptr) {
  CompileOptions o;
  o.plan_memory = plan;
  o.fuse = plan;  // the reference is unfused and unplanned
  Plan p(r.g, r.outputs, o);
  if (plan) check_no_overlap(p);
  if (arena) *arena = p.arena_bytes();
  for (size_t i = 0; i < r.inputs.size(); ++i)
    p.set_input(r.inputs[i], testing::random_tensor({DType::F32, r.g.shape(r.inputs[i])}, seed + i));
  p.run();
  p.run();  // a second run must give the same: inputs and outputs survive reuse
  std::vector<std::vector<uint8_t>> out;
  for (ValueId v : r.outputs) {
    HostTensor h = p.read(v);
    auto* b = static_cast<const uint8_t*>(h.buffer->data());
    out.emplace_back(b, b + h.bytes());
  }
  return out;
}

TEST(MemoryPlan, RandomGraphsNeverOverlapLiveBuffersAndMatchUnplanned) {
  testing::StrictKernels strict;
  size_t planned_total = 0, unplanned_total = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    RandomGraph r = make_random_graph(seed);
    size_t a = 0, b = 0;
    auto planned = run_outputs(r, true, seed, &a);
    if (HasFatalFailure()) FAIL() << "graph seed " << seed << "\n" << r.g.to_string();
    auto unplanned = run_outputs(r, false, seed, &b);
    ASSERT_EQ(planned, unplanned) << "graph seed " << seed << "\n" << r.g.to_string();
    ASSERT_LE(a, b) << "graph seed " << seed << "\n" << r.g.to_string();
    planned_total += a;
    unplanned_total += b;
  }
  EXPECT_LT(planned_total, unplanned_total);  // sharing happens in practice
}

TEST(MemoryPlan, ElementwiseChainRunsInPlace) {
  Graph g;
  ValueId x = g.input(DType::F32, {1024}, "x");
  ValueId y = g.unary(Op::Exp, x);
  for (int i = 0; i < 6; ++i) y = g.unary(Op::Tanh, y);
  CompileOptions unfused;
  unfused.fuse = false;
  Plan p(g, {y}, unfused);
  // Input + one working buffer: every tanh writes over the value it consumes.
  EXPECT_EQ(p.arena_bytes(), 2 * 4096u);
  EXPECT_EQ(p.unplanned_bytes(), 8 * 4096u);
  // Fused, the chain is one launch and its intermediates never get a buffer at all.
  Plan f(g, {y});
  EXPECT_EQ(f.launches().size(), 1u);
  EXPECT_EQ(f.unplanned_bytes(), 2 * 4096u);
}

// A slice from 0 along the first axis (or one with only size-1 axes before it) is its input's
// first elements: no launch, no buffer, the bytes of the input's first rows; one from elsewhere,
// or along a later axis, is a copy as before.
TEST(MemoryPlan, APrefixSliceIsItsInputsFirstBytes) {
  Graph g;
  ValueId x = g.input(DType::F32, {6, 4}, "x");
  ValueId y = g.unary(Op::Tanh, x);
  ValueId head = g.add(Op::Slice, {y}, attr::Slice{0, 0, 3});
  ValueId tail = g.add(Op::Slice, {y}, attr::Slice{0, 3, 6});
  ValueId cols = g.add(Op::Slice, {y}, attr::Slice{1, 0, 2});
  ValueId flat = g.add(Op::Slice, {g.reshape(y, {1, 24})}, attr::Slice{1, 0, 5});
  ValueId e = g.unary(Op::Exp, head);
  std::vector<ValueId> outs = {y, head, tail, cols, flat, e};
  Plan p(g, outs);
  check_no_overlap(p);
  for (const LaunchInfo& li : p.launch_info())
    for (ValueId v : li.ops) EXPECT_TRUE(v != head && v != flat) << "a prefix slice was launched: " << li.kernel;
  p.set_input(x, testing::random_tensor({DType::F32, {6, 4}}, 3));
  p.run();
  const HostTensor all = p.read(y), h = p.read(head), t = p.read(tail), c = p.read(cols), f = p.read(flat);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(h.get(i), all.get(i)) << i;
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(t.get(i), all.get(12 + i)) << i;
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.get(i), all.get(i / 2 * 4 + i % 2)) << i;
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(f.get(i), all.get(i)) << i;
  const HostTensor ex = p.read(e);
  CompileOptions ref;
  ref.fuse = ref.plan_memory = false;
  Plan u(g, {e}, ref);
  u.set_input(x, testing::random_tensor({DType::F32, {6, 4}}, 3));
  u.run();
  EXPECT_EQ(0, std::memcmp(ex.buffer->data(), u.read(e).buffer->data(), ex.bytes()));
}

TEST(MemoryPlan, ReadingAReusedIntermediateIsAnError) {
  Graph g;
  ValueId x = g.input(DType::F32, {4}, "x");
  ValueId a = g.unary(Op::Exp, x), b = g.unary(Op::Tanh, a);
  Plan p(g, {b});
  p.set_input(x, HostTensor(DType::F32, {4}));
  p.run();
  EXPECT_THROW(p.read(a), Error);
  EXPECT_NO_THROW(p.read(b));
}

}  // namespace
}  // namespace synoros

namespace synoros {
namespace {
// Place: pinned weights. A small matmul reading a parameter transposed keeps it pre-transposed
// and re-lays it out only when the parameter changes.
TEST(PinnedWeights, FollowEveryChangeOfTheParameter) {
  auto w = std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {32, 16}}, 3));
  Graph g;
  ValueId x = g.input(DType::F32, {8, 16}, "x");
  ValueId y = g.einsum("mk,nk->mn", {x, g.param(w, "w")});
  Plan p(g, {y});
  HostTensor xv = testing::random_tensor({DType::F32, {8, 16}}, 4);
  p.set_input(x, xv);
  p.run();
  HostTensor before = p.read(y);
  w->set(5, 2.5);  // a change made through the API bumps the buffer's version
  p.run();
  HostTensor after = p.read(y);
  Plan fresh(g, {y});
  fresh.set_input(x, xv);
  fresh.run();
  HostTensor expect = fresh.read(y);
  EXPECT_EQ(0, std::memcmp(after.buffer->data(), expect.buffer->data(), after.bytes()));
  EXPECT_NE(0, std::memcmp(after.buffer->data(), before.buffer->data(), after.bytes()));
  // Raw writes must announce themselves.
  static_cast<float*>(w->buffer->data())[7] = -3.0f;
  w->buffer->mark_modified();
  p.run();
  fresh.run();
  EXPECT_EQ(0, std::memcmp(p.read(y).buffer->data(), fresh.read(y).buffer->data(), after.bytes()));
}

// y's value computed by a plan that keeps no packed copy of its weights.
HostTensor without_copies(Graph& g, ValueId x, ValueId y, const HostTensor& xv) {
  config::ScopedOverride off("SYNOROS_NO_WEIGHT_PACKS", "1");
  Plan f(g, {y});
  f.set_input(x, xv);
  f.run();
  return f.read(y);
}
bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes()) == 0;
}
// Runs p while element 3 of w holds 100, written without telling the engine (the version does
// not move), then puts the element back: a launch reading a packed copy does not see the write.
void run_with_unannounced_write(Plan& p, HostTensor& w) {
  float* raw = static_cast<float*>(w.buffer->data());
  const float saved_value = raw[3];
  raw[3] = 100.0f;
  p.run();
  raw[3] = saved_value;
}

// Place: a weight read by a blocked product is kept packed once two calls have seen it unchanged
// (a training step's weights change every call and never are), with the bits of packing per call,
// repacked when the weight or the instruction set changes, and not kept when over the memory limit.
TEST(PackedWeights, AreKeptFromTheSecondCallAndFollowEveryChange) {
  auto w = std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {384, 200}}, 5));
  Graph g;
  ValueId x = g.input(DType::F32, {64, 384}, "x");
  ValueId y = g.einsum("mk,kn->mn", {x, g.param(w, "w")});
  HostTensor xv = testing::random_tensor({DType::F32, {64, 384}}, 6);
  auto fresh = [&] { return without_copies(g, x, y, xv); };
  auto same = same_bytes;
  const size_t weight_bytes = size_t(w->bytes()), copies_before = kernels::packed_copies();
  HostTensor changed;
  {
    Plan p(g, {y});
    p.set_input(x, xv);
    p.run();
    const size_t after_first = live_buffer_bytes();
    EXPECT_TRUE(same(p.read(y), fresh()));
    p.run();  // the same version again: packed now
    const size_t after_second = live_buffer_bytes();
    EXPECT_GE(after_second, after_first + weight_bytes);
    EXPECT_TRUE(same(p.read(y), fresh()));
    p.run();  // read from the packed copy, nothing new
    EXPECT_EQ(live_buffer_bytes(), after_second);
    EXPECT_TRUE(same(p.read(y), fresh()));
    {  // A raw write that does not announce itself is not seen: the plan reads its copy.
      const HostTensor packed_result = p.read(y);
      run_with_unannounced_write(p, *w);
      EXPECT_TRUE(same(p.read(y), packed_result));
    }

    w->set(11, -2.0);  // a change through the API: the copy is stale
    changed = fresh();
    const size_t held = live_buffer_bytes();
    p.run();
    EXPECT_TRUE(same(p.read(y), changed));
    p.run();  // repacked into the same memory
    EXPECT_EQ(live_buffer_bytes(), held);
    EXPECT_TRUE(same(p.read(y), changed));

    const kernels::Isa saved = kernels::active_isa();
    if (saved == kernels::Isa::Avx512) {  // another panel width: repacked for it
      kernels::set_isa(kernels::Isa::Avx2);
      p.run();
      EXPECT_TRUE(same(p.read(y), changed));
      kernels::set_isa(saved);
    }
    p.run();
    EXPECT_TRUE(same(p.read(y), changed));
  }  // the plan and its copy are gone
  EXPECT_EQ(kernels::packed_copies(), copies_before);

  // Over the memory limit a plan packs per call instead.
  Plan q(g, {y});
  q.set_input(x, xv);
  q.run();
  const size_t limit = memory_limit(), before_refusal = live_buffer_bytes();
  set_memory_limit(before_refusal + weight_bytes / 2);
  EXPECT_NO_THROW(q.run());
  EXPECT_NO_THROW(q.run());
  EXPECT_EQ(live_buffer_bytes(), before_refusal);  // no copy
  set_memory_limit(limit);
  EXPECT_TRUE(same(q.read(y), changed));
  // Once the limit allows it, the next version of the weight gets its copy.
  w->set(12, 0.5);
  q.run();
  q.run();
  EXPECT_GE(live_buffer_bytes(), before_refusal + weight_bytes);
  EXPECT_TRUE(same(q.read(y), fresh()));
}

// Plans that read one weight the same way share one packed copy, whatever their row counts (the
// prefill plans of each prompt length, a generator's decoding plans): a plan reads a copy another
// packed from its first call, a change of the weight is repacked once into the same memory, and
// the copy lives as long as a plan that reads it.
TEST(PackedWeights, PlansReadingOneWeightShareOneCopy) {
  auto w = std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {384, 200}}, 25));
  auto build = [&](int64_t rows, Graph& g) {
    ValueId x = g.input(DType::F32, {rows, 384}, "x");
    return std::pair{x, g.einsum("mk,kn->mn", {x, g.param(w, "w")})};
  };
  Graph g1, g2;
  const auto [x1, y1] = build(64, g1);
  const auto [x2, y2] = build(96, g2);
  const HostTensor xv1 = testing::random_tensor({DType::F32, {64, 384}}, 26);
  const HostTensor xv2 = testing::random_tensor({DType::F32, {96, 384}}, 27);
  auto fresh = without_copies;
  auto same = same_bytes;
  const size_t copies_before = kernels::packed_copies(), weight_bytes = size_t(w->bytes());
  const size_t before_plans = live_buffer_bytes();
  {
    auto a = std::make_unique<Plan>(g1, std::vector<ValueId>{y1});
    Plan b(g2, {y2});
    a->set_input(x1, xv1);
    b.set_input(x2, xv2);
    EXPECT_EQ(kernels::packed_copies(), copies_before + 1);  // one copy for both plans' launches
    a->run();
    const size_t without_copy = live_buffer_bytes();
    a->run();  // a's second call packs the copy
    const size_t with_copy = live_buffer_bytes();
    EXPECT_GE(with_copy, without_copy + weight_bytes);
    {  // b reads a's copy from its first call: a raw write the engine was not told of is not seen
      const HostTensor expect = fresh(g2, x2, y2, xv2);
      run_with_unannounced_write(b, *w);
      EXPECT_TRUE(same(b.read(y2), expect));
    }
    b.run();
    EXPECT_EQ(live_buffer_bytes(), with_copy);  // no second copy
    EXPECT_TRUE(same(b.read(y2), fresh(g2, x2, y2, xv2)));
    if (kernels::active_isa() == kernels::Isa::Avx512) {  // a few rows (decoding) read the same panels
      Graph g3;
      const auto [x3, y3] = build(8, g3);
      const HostTensor xv3 = testing::random_tensor({DType::F32, {8, 384}}, 28);
      const HostTensor expect = fresh(g3, x3, y3, xv3);
      Plan d(g3, {y3});
      d.set_input(x3, xv3);
      EXPECT_EQ(kernels::packed_copies(), copies_before + 1);
      const size_t with_d = live_buffer_bytes();
      run_with_unannounced_write(d, *w);
      EXPECT_TRUE(same(d.read(y3), expect));
      d.run();
      EXPECT_EQ(live_buffer_bytes(), with_d);
    }

    w->set(7, 1.25);  // each plan sees the change; the second call to see it repacks the one copy
    a->run();
    b.run();
    EXPECT_TRUE(same(a->read(y1), fresh(g1, x1, y1, xv1)));
    EXPECT_TRUE(same(b.read(y2), fresh(g2, x2, y2, xv2)));
    a->run();
    b.run();
    EXPECT_EQ(live_buffer_bytes(), with_copy);
    EXPECT_TRUE(same(a->read(y1), fresh(g1, x1, y1, xv1)));
    EXPECT_TRUE(same(b.read(y2), fresh(g2, x2, y2, xv2)));

    a.reset();  // b still reads the copy
    EXPECT_EQ(kernels::packed_copies(), copies_before + 1);
    b.run();
    EXPECT_TRUE(same(b.read(y2), fresh(g2, x2, y2, xv2)));
  }
  EXPECT_EQ(kernels::packed_copies(), copies_before);
  EXPECT_LE(live_buffer_bytes(), before_plans);  // the copy went with the last plan
}

// A product of a few rows (a decoding step at batch 2 to 8) keeps its weight packed with AVX-512,
// where its panels are read as one stream, and reads it in place on other instruction sets; the
// bits are those of the plan without copies either way.
TEST(PackedWeights, AFewRowsProductKeepsItsWeightPackedOnlyWithAvx512) {
  auto w = std::make_shared<HostTensor>(testing::random_tensor({DType::F32, {384, 200}}, 15));
  Graph g;
  ValueId x = g.input(DType::F32, {8, 384}, "x");
  ValueId y = g.einsum("mk,kn->mn", {x, g.param(w, "w")});
  const HostTensor xv = testing::random_tensor({DType::F32, {8, 384}}, 16);
  HostTensor expected;
  {
    config::ScopedOverride off("SYNOROS_NO_WEIGHT_PACKS", "1");
    Plan f(g, {y});
    f.set_input(x, xv);
    f.run();
    expected = f.read(y);
  }
  const kernels::Isa saved = kernels::active_isa();
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (int(isa) > int(kernels::best_isa())) continue;
    kernels::set_isa(isa);
    Plan p(g, {y});
    p.set_input(x, xv);
    p.run();
    const size_t after_first = live_buffer_bytes();
    p.run();
    p.run();
    if (isa == kernels::Isa::Avx512)
      EXPECT_GE(live_buffer_bytes(), after_first + size_t(w->bytes()));
    else
      EXPECT_EQ(live_buffer_bytes(), after_first);
    const HostTensor got = p.read(y);
    EXPECT_EQ(std::memcmp(got.buffer->data(), expected.buffer->data(), expected.bytes()), 0) << kernels::isa_name(isa);
  }
  kernels::set_isa(saved);
}

// Buffers of a huge page and more start on one and are advised into transparent huge pages (where
// the kernel has them), so streaming a large weight or cache costs a TLB miss per 2 MiB.
TEST(Buffers, LargeOnesAreAdvisedIntoHugePages) {
  if (config::flag("SYNOROS_NO_HUGE_PAGES")) GTEST_SKIP() << "SYNOROS_NO_HUGE_PAGES=1";
  Buffer small(1000), large(3 * kHugePageBytes + 100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data()) % kHugePageBytes, 0u);
  const unsigned char* bytes = static_cast<const unsigned char*>(large.data());  // zero, as every buffer
  EXPECT_TRUE(std::all_of(bytes, bytes + large.bytes(), [](unsigned char b) { return b == 0; }));
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!thp) GTEST_SKIP() << "this kernel has no transparent huge pages";
  // The mapping that holds the buffer carries the advice ("hg" in its VmFlags).
  std::ifstream smaps("/proc/self/smaps");
  ASSERT_TRUE(smaps) << "cannot read /proc/self/smaps";
  const uintptr_t at = reinterpret_cast<uintptr_t>(large.data());
  std::string line;
  bool inside = false, found = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line: its range
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      found = true;
      EXPECT_NE((line + " ").find(" hg "), std::string::npos) << line;
      break;
    }
  }
  if (!found) GTEST_SKIP() << "/proc/self/smaps shows no VmFlags for the buffer's mapping";
}

// Borrowed memory (a NumPy array, a PyTorch tensor) gets no packed copy: its owner can change it
// without the engine seeing, and the plan then reads the change.
TEST(PackedWeights, BorrowedWeightsAreReadWhereTheyLie) {
  const HostTensor src = testing::random_tensor({DType::F32, {384, 200}}, 7);
  auto owner = std::make_shared<std::vector<float>>(size_t(src.numel()) + 16);
  float* p = owner->data();
  while (reinterpret_cast<uintptr_t>(p) % 64) ++p;
  std::memcpy(p, src.buffer->data(), src.bytes());
  auto w = std::make_shared<HostTensor>();
  w->dtype = DType::F32;
  w->shape = {384, 200};
  w->buffer = std::make_shared<Buffer>(p, src.bytes(), owner);
  Graph g;
  ValueId x = g.input(DType::F32, {64, 384}, "x");
  ValueId y = g.einsum("mk,kn->mn", {x, g.param(w, "w")});
  Plan plan(g, {y});
  plan.set_input(x, testing::random_tensor({DType::F32, {64, 384}}, 8));
  plan.run();
  const size_t after_first = live_buffer_bytes();
  plan.run();
  plan.run();
  EXPECT_EQ(live_buffer_bytes(), after_first);
  const HostTensor before = plan.read(y);
  p[3] = 100.0f;  // the owner writes in place, no version moves
  plan.run();
  EXPECT_NE(0, std::memcmp(plan.read(y).buffer->data(), before.buffer->data(), before.bytes()));
}
}  // namespace
}  // namespace synoros

namespace synoros {
namespace {
// A bias broadcast down short rows runs as whole blocks of rows over a tiled copy of the bias:
// chunks that start mid-row (130 x 200 crosses the 16384-element chunk boundary inside a row),
// several threads and a scalar operand must all give the unfused bits.
TEST(MemoryPlan, RowBroadcastGroupsMatchUnfusedBitForBit) {
  for (int64_t cols : {1, 7, 32, 200, 255}) {
    Graph g;
    ValueId x = g.input(DType::F32, {130, cols}, "x"), b = g.input(DType::F32, {cols}, "b");
    ValueId s = g.input(DType::F32, {}, "s");
    ValueId y = g.unary(Op::Relu, g.binary(Op::Mul, g.binary(Op::Add, x, b), s));
    CompileOptions plain;
    plain.fuse = false;
    HostTensor hx = testing::random_tensor({DType::F32, {130, cols}}, 1), hb = testing::random_tensor({DType::F32, {cols}}, 2),
               hs = testing::random_tensor({DType::F32, {}}, 3);
    for (int threads : {1, 2, 3}) {
      int saved = num_threads();
      set_num_threads(threads);
      Plan fast(g, {y}), ref(g, {y}, plain);
      for (Plan* p : {&fast, &ref}) {
        p->set_input(x, hx);
        p->set_input(b, hb);
        p->set_input(s, hs);
        p->run();
      }
      set_num_threads(saved);
      EXPECT_EQ(fast.launches().size(), 1u) << cols;
      HostTensor a = fast.read(y), e = ref.read(y);
      ASSERT_EQ(0, std::memcmp(a.buffer->data(), e.buffer->data(), a.bytes())) << "cols " << cols << " threads " << threads;
      // And the values are what the formula says.
      for (int64_t i = 0; i < 130 * cols; i += 37) {
        float v = (float(hx.get(i)) + float(hb.get(i % cols))) * float(hs.get(0));
        EXPECT_EQ(a.get(i), v > 0.0f ? v : 0.0f) << "element " << i;
      }
      // The broadcast row is tiled once and kept between runs: a new bias, or one element of it
      // changed in place, must reach the next run.
      HostTensor hb2 = testing::random_tensor({DType::F32, {cols}}, 4);
      for (int change = 0; change < 2; ++change) {
        if (change == 1) hb2.set(cols - 1, hb2.get(cols - 1) + 1.0);
        for (Plan* p : {&fast, &ref}) {
          p->set_input(b, hb2);
          p->run();
        }
        HostTensor a2 = fast.read(y), e2 = ref.read(y);
        ASSERT_EQ(0, std::memcmp(a2.buffer->data(), e2.buffer->data(), a2.bytes())) << "cols " << cols << " change " << change;
        for (int64_t i = cols - 1; i < 130 * cols; i += cols) {
          float v = (float(hx.get(i)) + float(hb2.get(i % cols))) * float(hs.get(0));
          ASSERT_EQ(a2.get(i), v > 0.0f ? v : 0.0f) << "element " << i << " change " << change;
        }
      }
    }
  }
}
}  // namespace
}  // namespace synoros

namespace synoros {
namespace {
// A batch norm's statistics: mean((x - m)^2) over N, H, W of [N, C, H, W], where x - m is also
// read by the normalisation. The square runs inside the reduction's launch (a fused prologue),
// the broadcast mean is read in place, and the bits are the unfused plan's at 1, 2 and 3 threads,
// for rows that cross the reduction's 4096-element segments at odd offsets.
TEST(MemoryPlan, ReductionPrologueMatchesUnfusedBitForBit) {
  for (Shape s : {Shape{64, 16, 28, 28}, Shape{3, 5, 7, 9}, Shape{8, 4, 13}, Shape{2, 5000}}) {
    Graph g;
    ValueId x = g.input(DType::F32, s, "x");
    std::vector<int64_t> axes = {0};
    for (size_t d = 2; d < s.size(); ++d) axes.push_back(int64_t(d));
    if (s.size() == 2) axes = {1};
    ValueId m = g.mean(x, axes, true);
    ValueId c = g.binary(Op::Sub, x, g.expand(m, s));
    ValueId v = g.mean(g.binary(Op::Mul, c, c), axes, true);
    ValueId y = g.binary(Op::Mul, c, g.expand(g.unary(Op::Rsqrt, g.binary(Op::Add, v, g.scalar(1e-5))), s));
    CompileOptions plain;
    plain.fuse = false;
    HostTensor hx = testing::random_tensor({DType::F32, s}, 5);
    for (int threads : {1, 2, 3}) {
      int saved = num_threads();
      set_num_threads(threads);
      Plan fast(g, {v, y}), ref(g, {v, y}, plain);
      for (Plan* p : {&fast, &ref}) {
        p->set_input(x, hx);
        p->run();
      }
      set_num_threads(saved);
      bool prologue = false;
      for (const LaunchInfo& li : fast.launch_info())
        prologue = prologue || (li.ops.back() == v && li.ops.size() > 1);
      EXPECT_TRUE(prologue) << "the square was not fused into the mean";
      for (ValueId o : {v, y}) {
        HostTensor a = fast.read(o), e = ref.read(o);
        ASSERT_EQ(0, std::memcmp(a.buffer->data(), e.buffer->data(), a.bytes())) << "threads " << threads;
      }
    }
    // And the statistic is the variance, within float32 rounding of the float64 one.
    HostTensor hv = [&] {
      Plan p(g, {v});
      p.set_input(x, hx);
      p.run();
      return p.read(v);
    }();
    int64_t K = hv.numel(), total = numel(s), inner = 1;
    for (size_t d = 2; d < s.size(); ++d) inner *= s[d];
    if (s.size() == 2) inner = s[1];
    for (int64_t k = 0; k < K; ++k) {
      std::vector<double> vals;
      for (int64_t i = 0; i < total; ++i)
        if ((s.size() == 2 ? i / inner : i / inner % K) == k) vals.push_back(hx.get(i));
      double mean = 0, var = 0;
      for (double t : vals) mean += t;
      mean /= double(vals.size());
      for (double t : vals) var += (t - mean) * (t - mean);
      var /= double(vals.size());
      EXPECT_NEAR(hv.get(k), var, 1e-4 * var + 1e-6) << "channel " << k;
    }
  }
}
}  // namespace
}  // namespace synoros

namespace synoros {
namespace {
// 2x2 max pooling as reduce_max over scattered axes (the vectorised window path) gives the bits
// of the same maximum over a contiguous row (reduce_row), NaNs and signed zeros included.
TEST(MemoryPlan, PoolingWindowMaxMatchesTheRowMaximum) {
  Shape s{2, 3, 5, 2, 67, 2};
  Graph g;
  ValueId x = g.input(DType::F32, s, "x");
  ValueId windowed = g.add(Op::ReduceMax, {x}, attr::Reduce{{3, 5}});
  ValueId rows = g.add(Op::ReduceMax, {g.reshape(g.permute(x, {0, 1, 2, 4, 3, 5}), {2, 3, 5, 67, 4})}, attr::Reduce{{4}});
  HostTensor hx = testing::random_tensor({DType::F32, s}, 8);
  for (int64_t i = 0; i < hx.numel(); i += 7) hx.set(i, i % 3 == 0 ? std::nan("") : (i % 2 ? 0.0 : -0.0));
  Plan p(g, {windowed, rows});
  p.set_input(x, hx);
  p.run();
  HostTensor a = p.read(windowed), b = p.read(rows);
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(0, std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes()));
  int nans = 0;
  for (int64_t i = 0; i < a.numel(); ++i) nans += std::isnan(a.get(i));
  EXPECT_GT(nans, 0);
}
}  // namespace
}  // namespace synoros

#include "passes/memory_plan.hpp"

namespace synoros {
namespace {
// The planner itself, on random schedules with scratch frames and in-place hand-overs: no two
// blocks alive at the same launch share a byte (scratch included), whichever layout it keeps.
TEST(MemoryPlan, RandomSchedulesNeverOverlapValuesOrScratch) {
  for (uint64_t seed = 0; seed < 400; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
    Graph g;
    const int64_t n = 5 + pick(40);
    passes::MemoryPlanInput in;
    in.g = &g;
    for (int64_t v = 0; v < n; ++v) g.input(DType::F32, {1 + pick(3) * 16, 1 + pick(64)}, "v");
    in.in_arena.assign(size_t(n), true);
    for (int64_t v = 0; v < n; ++v) in.alias_root.push_back(ValueId(v));
    in.observable.assign(size_t(n), false);
    in.observable[0] = true;  // an input: alive before the first launch, never reused
    for (int64_t v = 1; v < n; ++v) {
      in.order.push_back(ValueId(v));
      std::vector<ValueId> reads{ValueId(pick(v))};
      if (pick(2)) reads.push_back(ValueId(pick(v)));
      in.reads.push_back(reads);
      in.inplace.push_back(g.shape(reads[0]) == g.shape(ValueId(v)) ? std::vector<ValueId>{reads[0]}
                                                                      : std::vector<ValueId>{});
      in.scratch.push_back(pick(3) ? 0 : size_t(64 * (1 + pick(300))));
      if (pick(6) == 0) in.observable[size_t(v)] = true;
    }
    passes::MemoryPlan m = passes::plan_memory(in);
    struct Span {
      size_t off, bytes;
      int start, end;
      int64_t value;  // -1: scratch
    };
    std::vector<Span> spans;
    for (int64_t v = 0; v < n; ++v)
      spans.push_back({m.offset[size_t(v)], size_t(numel(g.shape(ValueId(v)))) * 4, m.life[size_t(v)].start,
                       m.life[size_t(v)].end, v});
    for (size_t s = 0; s < in.order.size(); ++s)
      if (in.scratch[s]) spans.push_back({m.scratch_offset[s], in.scratch[s], int(s), int(s), -1});
    size_t top = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      top = std::max(top, spans[i].off + spans[i].bytes);
      for (size_t j = i + 1; j < spans.size(); ++j) {
        const Span &a = spans[i], &b = spans[j];
        const bool mem = a.off < b.off + b.bytes && b.off < a.off + a.bytes;
        const bool time = a.start <= b.end && b.start <= a.end;
        if (!mem || !time) continue;
        const bool handoff = a.value >= 0 && b.value >= 0 &&
                             ((m.inplace_of[size_t(b.value)] == ValueId(a.value) && a.end == b.start) ||
                              (m.inplace_of[size_t(a.value)] == ValueId(b.value) && b.end == a.start));
        ASSERT_TRUE(handoff) << "seed " << seed << ": blocks " << a.value << " and " << b.value << " share bytes";
      }
    }
    ASSERT_LE(top, m.arena_bytes) << "seed " << seed;
  }
}
}  // namespace
}  // namespace synoros
