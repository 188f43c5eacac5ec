#include <atomic>
// Determinism is law: the tiny MLP trained for 500 steps gives identical parameter bytes across
// reruns, across thread counts, and across the scalar and AVX2 kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/tiny_mlp.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// The bytes of tensors' values, or of a plan's outputs, one after another.
std::vector<uint8_t> value_bytes(const std::vector<HostTensor>& values) {
  std::vector<uint8_t> bytes;
  for (const HostTensor& v : values) {
    auto* b = static_cast<const uint8_t*>(v.buffer->data());
    bytes.insert(bytes.end(), b, b + v.bytes());
  }
  return bytes;
}
template <class Ts>
std::vector<uint8_t> tensor_bytes(const Ts& tensors) {
  std::vector<HostTensor> v;
  for (const Tensor& t : tensors) v.push_back(t.value());
  return value_bytes(v);
}
std::vector<uint8_t> output_bytes(Plan& p, const std::vector<ValueId>& outs) {
  std::vector<HostTensor> v;
  for (ValueId o : outs) v.push_back(p.read(o));
  return value_bytes(v);
}

std::vector<uint8_t> train_bytes(int steps) {
  nn::TinyTask task(42);
  nn::TinyMLP m(7);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, 0.05);
  std::memcpy(step.input_ptr(0), task.x.buffer->data(), task.x.bytes());
  std::memcpy(step.input_ptr(1), task.target.buffer->data(), task.target.bytes());
  for (int i = 0; i < steps; ++i) step.run();
  return tensor_bytes(m.params());
}

TEST(Determinism, TinyMlpTrainingIsBitIdenticalAcrossRunsAndThreads) {
  int saved = num_threads();
  set_num_threads(1);
  auto a = train_bytes(500);
  auto b = train_bytes(500);
  set_num_threads(2);
  auto c = train_bytes(500);
  set_num_threads(saved);
  ASSERT_EQ(a.size(), size_t((32 * 16 + 32 + 8 * 32 + 8) * 4));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  // Training did move the parameters.
  EXPECT_NE(a, train_bytes(0));
}

TEST(Determinism, TinyMlpLossFalls) {
  nn::TinyTask task(42);
  nn::TinyMLP m(7);
  CompiledStep step = nn::compile_tiny_mlp_sgd(m, 0.05);
  double first = step({task.x, task.target})[0].get(0), last = first;
  for (int i = 0; i < 300; ++i) last = step({task.x, task.target})[0].get(0);
  EXPECT_LT(last, 0.5 * first);
}

// Strict mode selects only canonical-order kernels, so the bits match across instruction sets.
TEST(Determinism, EveryIsaGivesTheSameBitsInStrictMode) {
  if (kernels::best_isa() == kernels::Isa::Scalar) GTEST_SKIP() << "this CPU has no AVX2+FMA";
  testing::StrictKernels strict;
  kernels::Isa saved = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  auto ref = train_bytes(50);
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (int(isa) > int(kernels::best_isa())) continue;
    kernels::set_isa(isa);
    EXPECT_EQ(train_bytes(50), ref) << kernels::isa_name(isa);
  }
  kernels::set_isa(saved);
}

// Fusion and memory planning change which launches run, never the bits, in strict mode: a
// LeNet training step (convolutions, pooling, views folded into contractions) gives the same
// bytes with SYNOROS_NO_FUSION=1 and SYNOROS_NO_PLAN=1. (Outside strict mode an unfused view can
// change a GEMM operand's layout and so the provider chosen; see the determinism contract.)
TEST(Determinism, FusionAndPlanningKeepTheBitsInStrictMode) {
  testing::StrictKernels strict;
  auto step_bytes = [] {
    auto m = train::make_classifier("lenet", 10, 3);
    optim::SGD opt(m->parameters(), 0.05, 0.9, 5e-4);
    CompiledStep step = train::compile_classifier_train(*m, opt, 16);
    HostTensor y(DType::I64, {16});
    for (int64_t i = 0; i < 16; ++i) y.set(i, double(i % 10));
    HostTensor x = Tensor::randn({16, 1, 28, 28}, 5).value();
    for (int i = 0; i < 2; ++i) step({x, y});
    return tensor_bytes(m->parameters());
  };
  std::vector<uint8_t> ref = step_bytes();
  {
    config::ScopedOverride off("SYNOROS_NO_FUSION", "1");
    EXPECT_EQ(step_bytes(), ref) << "without fusion";
  }
  {
    config::ScopedOverride off("SYNOROS_NO_PLAN", "1");
    EXPECT_EQ(step_bytes(), ref) << "without memory planning";
  }
}

TEST(Determinism, LargeParallelKernelsIgnoreThreadCount) {
  // Shapes big enough that GEMM, reductions and maps split into many chunks.
  auto run = [] {
    Graph g;
    ValueId a = g.input(DType::F32, {130, 257}, "a"), b = g.input(DType::F32, {257, 190}, "b");
    ValueId y = g.unary(Op::Tanh, g.matmul(a, b));
    ValueId s = g.sum(y, {0});
    ValueId m = g.mean(g.binary(Op::Mul, y, y), {});
    Plan p(g, {s, m});
    p.set_input(a, testing::random_tensor({DType::F32, {130, 257}}, 1));
    p.set_input(b, testing::random_tensor({DType::F32, {257, 190}}, 2));
    p.run();
    HostTensor hs = p.read(s), hm = p.read(m);
    std::vector<uint8_t> out(hs.bytes() + hm.bytes());
    std::memcpy(out.data(), hs.buffer->data(), hs.bytes());
    std::memcpy(out.data() + hs.bytes(), hm.buffer->data(), hm.bytes());
    return out;
  };
  int saved = num_threads();
  set_num_threads(1);
  auto one = run();
  set_num_threads(2);
  auto two = run();
  set_num_threads(3);
  auto three = run();
  set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

}  // namespace
}  // namespace synoros

namespace synoros {
namespace {
TEST(Determinism, VectorMathGivesTheSameBitsOnEveryIsa) {
  auto run = [] {
    Graph g;
    ValueId x = g.input(DType::F32, {20000}, "x");
    std::vector<ValueId> outs;
    for (Op op : {Op::Exp, Op::Sigmoid, Op::Tanh, Op::Gelu, Op::Log, Op::Sqrt}) outs.push_back(g.unary(op, x));
    Plan p(g, outs);
    p.set_input(x, testing::random_tensor({DType::F32, {20000}, -100, 100}, 5));
    p.run();
    return output_bytes(p, outs);
  };
  kernels::Isa saved = kernels::active_isa();
  kernels::set_isa(kernels::Isa::Scalar);
  auto ref = run();
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (int(isa) > int(kernels::best_isa())) continue;
    kernels::set_isa(isa);
    EXPECT_EQ(run(), ref) << kernels::isa_name(isa);
  }
  kernels::set_isa(saved);
}

// The row composites (softmax, log-softmax, their gradients, layernorm with and without weight
// and bias, and its gradients, cross-entropy and its gradient) sum in the canonical order on every
// instruction set and at 1, 2 and 3 threads: rows of 13 (a tail only), 771 (GPT-2's width and a
// tail) and 5000 (two segments), ordinary values and rows with NaN, infinities and signed zeros;
// cross-entropy's 17 rows are three tasks, one of them ignored.
TEST(Determinism, RowCompositesGiveTheSameBitsOnEveryIsa) {
  auto run = [](int64_t n, bool special, int threads) {
    ThreadPool pool(threads);
    CompileOptions o;
    o.pool = &pool;
    Graph g;
    const Shape s{6, n};
    ValueId x = g.input(DType::F32, s, "x"), go = g.input(DType::F32, s, "g");
    ValueId w = g.input(DType::F32, {n}, "w"), b = g.input(DType::F32, {n}, "b");
    const attr::Axis last{-1};
    const attr::Eps eps{1e-5};
    ValueId sm = g.add(Op::Softmax, {x}, last), lsm = g.add(Op::LogSoftmax, {x}, last);
    std::vector<ValueId> outs{sm,
                              lsm,
                              g.add(Op::SoftmaxGrad, {sm, go}, last),
                              g.add(Op::LogSoftmaxGrad, {lsm, go}, last),
                              g.add(Op::LayerNorm, {x}, eps),
                              g.add(Op::LayerNorm, {x, w, b}, eps),
                              g.add(Op::LayerNormGrad, {x, go}, eps),
                              g.add(Op::LayerNormGrad, {x, go, w}, eps),
                              g.add(Op::LayerNormBackward, {x, go, w}, eps)};
    const Shape xs{17, n};
    ValueId xe = g.input(DType::F32, xs, "xe"), t = g.input(DType::I64, {17}, "t"), gs = g.input(DType::F32, {}, "gs");
    const attr::CrossEntropy ce{int64_t(1)};
    outs.push_back(g.add(Op::CrossEntropy, {xe, t}, ce));
    outs.push_back(g.add(Op::CrossEntropyGrad, {xe, t, gs}, ce));
    Plan p(g, outs, o);
    p.set_input(x, special ? testing::special_tensor(s, 7, 97) : testing::random_tensor({DType::F32, s, -4, 4}, 7));
    p.set_input(go, testing::random_tensor({DType::F32, s}, 8));
    p.set_input(w, testing::random_tensor({DType::F32, {n}}, 9));
    p.set_input(b, testing::random_tensor({DType::F32, {n}}, 10));
    p.set_input(xe, special ? testing::special_tensor(xs, 11, 97) : testing::random_tensor({DType::F32, xs, -8, 8}, 11));
    HostTensor targets = testing::random_tensor({DType::I64, {17}, 0, double(n)}, 12);
    targets.set(4, 1.0);  // row 4 is ignored (ignore_index 1)
    p.set_input(t, targets);
    p.set_input(gs, testing::random_tensor({DType::F32, {}}, 13));
    p.run();
    return output_bytes(p, outs);
  };
  for (int64_t n : {13, 771, 5000}) {
    for (bool special : {false, true}) {
      std::vector<uint8_t> ref;
      {
        testing::IsaScope scalar(kernels::Isa::Scalar);
        ref = run(n, special, 1);
      }
      for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
        if (int(isa) > int(kernels::best_isa())) continue;
        testing::IsaScope scope(isa);
        for (int threads : {1, 2, 3})
          EXPECT_EQ(run(n, special, threads), ref)
              << kernels::isa_name(isa) << " threads=" << threads << " n=" << n << " special=" << special;
      }
    }
  }
}

// layernorm_backward's first rows are layernorm_grad's dx bit for bit, and its weight and bias rows
// do not depend on the thread count: 70 rows are three chunks, the last one short.
TEST(Determinism, LayerNormBackwardIsLayerNormGradAndThreadCountFree) {
  const attr::Eps eps{1e-5};
  for (int64_t n : {13, 771}) {
    for (bool special : {false, true}) {
      const Shape s{70, n};
      Graph g;
      ValueId x = g.input(DType::F32, s, "x"), go = g.input(DType::F32, s, "g"), w = g.input(DType::F32, {n}, "w");
      ValueId all = g.add(Op::LayerNormBackward, {x, go, w}, eps), dx = g.add(Op::LayerNormGrad, {x, go, w}, eps);
      ASSERT_EQ(g.shape(all), (Shape{72, n}));
      std::vector<uint8_t> first;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        CompileOptions o;
        o.pool = &pool;
        Plan p(g, {all, dx}, o);
        p.set_input(x, special ? testing::special_tensor(s, 7, 97) : testing::random_tensor({DType::F32, s, -4, 4}, 7));
        p.set_input(go, testing::random_tensor({DType::F32, s}, 8));
        p.set_input(w, testing::random_tensor({DType::F32, {n}}, 9));
        p.run();
        const HostTensor a = p.read(all), d = p.read(dx);
        EXPECT_EQ(0, std::memcmp(a.buffer->data(), d.buffer->data(), d.bytes())) << "n=" << n << " special=" << special;
        std::vector<uint8_t> bytes = output_bytes(p, {all});
        if (first.empty()) first = bytes;
        EXPECT_EQ(bytes, first) << threads << " threads, n=" << n << " special=" << special;
      }
    }
  }
}

// Fused attention and its gradient give the same bits on every instruction set and at 1, 2 and 3
// threads: causal and not, several query and key blocks with short last ones, ordinary inputs and
// inputs with NaN, infinities and signed zeros.
TEST(Determinism, AttentionGivesTheSameBitsOnEveryIsaAndThreadCount) {
  auto run = [](bool causal, bool special) {
    Graph g;
    const int64_t Tq = causal ? 130 : 70, Tk = 130;
    const Shape qs{2, 3, Tq, 24}, ks{2, 3, Tk, 24};
    ValueId q = g.input(DType::F32, qs, "q"), k = g.input(DType::F32, ks, "k"), v = g.input(DType::F32, ks, "v");
    ValueId go = g.input(DType::F32, qs, "g");
    const attr::Attention at{causal, 0.2};
    ValueId o = g.add(Op::Attention, {q, k, v}, at);
    std::vector<ValueId> outs{o, g.add(Op::AttentionGrad, {q, k, v, o, go}, at)};
    Plan p(g, outs);
    p.set_input(q, special ? testing::special_tensor(qs, 7, 997) : testing::random_tensor({DType::F32, qs, -3, 3}, 7));
    p.set_input(k, testing::random_tensor({DType::F32, ks, -3, 3}, 8));
    p.set_input(v, testing::random_tensor({DType::F32, ks}, 9));
    p.set_input(go, testing::random_tensor({DType::F32, qs}, 10));
    p.run();
    return output_bytes(p, outs);
  };
  const int saved = num_threads();
  for (bool causal : {false, true}) {
    for (bool special : {false, true}) {
      set_num_threads(1);
      std::vector<uint8_t> ref;
      {
        testing::IsaScope scalar(kernels::Isa::Scalar);
        ref = run(causal, special);
      }
      for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
        if (int(isa) > int(kernels::best_isa())) continue;
        testing::IsaScope scope(isa);
        for (int threads : {1, 2, 3}) {
          set_num_threads(threads);
          EXPECT_EQ(run(causal, special), ref)
              << kernels::isa_name(isa) << " threads=" << threads << " causal=" << causal << " special=" << special;
        }
      }
    }
  }
  set_num_threads(saved);
}

// With at least four batch items per thread, the forward runs by batch items, each task reusing
// its own part of the transposed keys for several items; with fewer, by query blocks. Every pool
// size and instruction set gives the bits of the scalar build by query blocks: 18 batch items
// take the first way at 1 to 4 threads and the second at 5; causal and not, 130 queries (a short
// last block), without the mask 300 keys (a second split, whose first block's p V goes straight
// to its accumulator), special values in q, k and v.
TEST(Determinism, AttentionForwardByBatchItemsGivesTheBitsOfTheBlockTasks) {
  const Shape qs{6, 3, 130, 24};
  auto run = [&](bool causal, bool special, ThreadPool* pool) {
    const Shape ks{6, 3, causal ? 130 : 300, 24};
    Graph g;
    ValueId q = g.input(DType::F32, qs, "q"), k = g.input(DType::F32, ks, "k"), v = g.input(DType::F32, ks, "v");
    ValueId o = g.add(Op::Attention, {q, k, v}, attr::Attention{causal, 0.2});
    CompileOptions opt;
    opt.pool = pool;
    Plan p(g, {o}, opt);
    p.set_input(q, special ? testing::special_tensor(qs, 7, 997) : testing::random_tensor({DType::F32, qs, -3, 3}, 7));
    p.set_input(k, special ? testing::special_tensor(ks, 8, 991) : testing::random_tensor({DType::F32, ks, -3, 3}, 8));
    p.set_input(v, special ? testing::special_tensor(ks, 9, 983) : testing::random_tensor({DType::F32, ks}, 9));
    p.run();
    return output_bytes(p, {o});
  };
  for (bool causal : {false, true})
    for (bool special : {false, true}) {
      std::vector<uint8_t> ref;
      {
        testing::IsaScope scalar(kernels::Isa::Scalar);
        ThreadPool five(5);
        ref = run(causal, special, &five);
      }
      for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
        if (int(isa) > int(kernels::best_isa())) continue;
        testing::IsaScope scope(isa);
        for (int threads : {1, 2, 3, 4, 5}) {
          ThreadPool pool(threads);
          EXPECT_EQ(run(causal, special, &pool), ref)
              << kernels::isa_name(isa) << ", " << threads << " threads, causal=" << causal << " special=" << special;
        }
      }
    }
}

// The gradient stores its dS blocks in the plan's scratch when a batch item's fit the limit, and
// runs its key and query phases over rounds of as many items as fit; otherwise it computes them
// again. Every way gives the same bits: non-causal with more keys than queries and with fewer,
// causal, causal at an offset, a single block, float64; six batch items; short last blocks.
TEST(Determinism, AttentionGradStoredScoresGiveTheRecomputedBits) {
  struct Case {
    bool causal;
    int64_t Tq, Tk, offset;  // offset < 0: none
    DType dt = DType::F32;
  };
  const size_t saved = kernels::attention_store_limit;
  for (const Case& c : {Case{false, 70, 200, -1}, Case{true, 130, 130, -1}, Case{true, 100, 200, 37},
                        Case{true, 30, 30, -1}, Case{false, 200, 70, -1}, Case{true, 130, 130, -1, DType::F64}}) {
    const Shape qs{6, c.Tq, 24}, ks{6, c.Tk, 24};
    auto run = [&](size_t limit) {
      kernels::attention_store_limit = limit;
      Graph g;
      ValueId q = g.input(c.dt, qs, "q"), k = g.input(c.dt, ks, "k"), v = g.input(c.dt, ks, "v");
      std::vector<ValueId> in{q, k, v};
      if (c.offset >= 0) in.push_back(g.input(DType::I64, {1}, "offset"));
      const attr::Attention at{c.causal, 0.2};
      ValueId o = g.add(Op::Attention, in, at);
      std::vector<ValueId> gin{q, k, v, o, g.input(c.dt, qs, "g")};
      if (c.offset >= 0) gin.push_back(in[3]);
      ValueId grad = g.add(Op::AttentionGrad, gin, at);
      Plan p(g, {grad});
      p.set_input(q, c.dt == DType::F32 ? testing::special_tensor(qs, 7, 97) : testing::random_tensor({c.dt, qs, -3, 3}, 7));
      p.set_input(k, testing::random_tensor({c.dt, ks, -3, 3}, 8));
      p.set_input(v, testing::random_tensor({c.dt, ks}, 9));
      p.set_input(gin[4], testing::random_tensor({c.dt, qs}, 10));
      if (c.offset >= 0) {
        HostTensor off(DType::I64, {1});
        off.set(0, double(c.offset));
        p.set_input(in[3], off);
      }
      p.run();
      return std::make_pair(output_bytes(p, {grad}), p.scratch_bytes());
    };
    const size_t item = size_t((c.Tq + 63) / 64 * ((c.Tk + 63) / 64)) * 64 * 64 * dtype_size(c.dt);
    const std::vector<uint8_t> recomputed = run(0).first;
    for (size_t limit : {item, 5 * item / 2, 4 * item, 6 * item, saved}) {  // rounds of 1, 2, 4 (then 2) and 6
      const auto [stored, scratch] = run(limit);
      EXPECT_EQ(stored, recomputed) << "causal=" << c.causal << " Tq=" << c.Tq << " limit=" << limit;
      // The gradient's scratch: the rows' statistics and the stored blocks (the forward's own
      // scratch, its keys transposed, is live at another time).
      const size_t stats = size_t(2 * qs[0] * c.Tq) * dtype_size(c.dt);
      EXPECT_GE(scratch, stats + std::min(limit, 6 * item) / item * item) << "the blocks are stored";
    }
  }
  kernels::attention_store_limit = saved;
}

// Keys past 256 are cut into splits whose online softmaxes are folded in ascending order. With at
// most four queries the splits run as tasks of their own and a second pass folds them; otherwise
// one task walks them. Both give the same bits: a decoding step at every position (one query, or
// three, over a longer cache whose unused rows hold other values, or NaN) equals those rows of the
// full causal forward, and one non-causal query equals the first row of 65, on every instruction set
// and at 1, 2 and 3 threads, with NaN, infinities and signed zeros among the queries.
TEST(Determinism, AttentionSplitTasksGiveTheBitsOfTheFullForward) {
  const int64_t B = 3, T = 600, cache = 700, D = 24;
  const HostTensor q = testing::special_tensor({B, T, D}, 17, 97);
  const HostTensor k = testing::random_tensor({DType::F32, {B, cache, D}, -3, 3}, 18);
  const HostTensor v = testing::random_tensor({DType::F32, {B, cache, D}}, 19);
  // Rows [r0, r0 + n) of batch item b's slab in x (rows of D).
  auto rows = [&](const HostTensor& x, int64_t slab, int64_t r0, int64_t n) {
    HostTensor out(DType::F32, {B, n, D});
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(out.data<float>() + b * n * D, x.data<float>() + (b * slab + r0) * D, size_t(n * D) * sizeof(float));
    return out;
  };
  // attention(q, k, v [, offset]) over the given operands, its output's bytes.
  auto attend = [&](bool causal, const HostTensor& qq, const HostTensor& kk, const HostTensor& vv, int64_t offset) {
    Graph g;
    ValueId qi = g.input(DType::F32, qq.shape, "q"), ki = g.input(DType::F32, kk.shape, "k"),
            vi = g.input(DType::F32, vv.shape, "v");
    std::vector<ValueId> in{qi, ki, vi};
    if (offset >= 0) in.push_back(g.input(DType::I64, {1}, "offset"));
    const attr::Attention at{causal, 0.3};
    ValueId o = g.add(Op::Attention, in, at);
    Plan p(g, {o});
    p.set_input(qi, qq);
    p.set_input(ki, kk);
    p.set_input(vi, vv);
    if (offset >= 0) {
      HostTensor off(DType::I64, {1});
      off.set(0, double(offset));
      p.set_input(in[3], off);
    }
    p.run();
    return p.read(o);
  };
  const int saved = num_threads();
  set_num_threads(1);
  HostTensor full, first_of_65;
  {
    testing::IsaScope scalar(kernels::Isa::Scalar);
    full = attend(true, q, rows(k, cache, 0, T), rows(v, cache, 0, T), -1);
    first_of_65 = rows(attend(false, rows(q, T, 0, 65), k, v, -1), 65, 0, 1);
  }
  testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int threads) {
    for (int t : {threads, 3}) {
      set_num_threads(t);
      for (int64_t pos : {0, 63, 255, 256, 300, 511, 512, 597}) {
        for (int64_t n : {1, 3}) {
          HostTensor step = attend(true, rows(q, T, pos, n), k, v, pos);
          EXPECT_EQ(value_bytes({step}), value_bytes({rows(full, T, pos, n)}))
              << kernels::isa_name(isa) << " threads=" << t << " position " << pos << " queries " << n;
        }
      }
      // Keys and values after the last query's position are never read: NaN there changes nothing,
      // with the splits as tasks (a long cache) and walked by one task (a cache of one split).
      for (int64_t pos : {0, 200, 255, 300})
        for (int64_t n : {1, 3}) {
          HostTensor kn = k, vn = v;
          kn.buffer = std::make_shared<Buffer>(k.bytes());
          vn.buffer = std::make_shared<Buffer>(v.bytes());
          for (int64_t i = 0; i < B * cache * D; ++i) {
            const bool after = i / D % cache >= pos + n;
            kn.set(i, after ? std::nan("") : k.get(i));
            vn.set(i, after ? std::nan("") : v.get(i));
          }
          const int64_t used = pos == 200 ? 250 : cache;  // 250 keys: one split
          HostTensor step = attend(true, rows(q, T, pos, n), rows(kn, cache, 0, used), rows(vn, cache, 0, used), pos);
          EXPECT_EQ(value_bytes({step}), value_bytes({rows(full, T, pos, n)}))
              << kernels::isa_name(isa) << " threads=" << t << " NaN after position " << pos + n - 1 << " of " << used;
        }
      EXPECT_EQ(value_bytes({attend(false, rows(q, T, 0, 1), k, v, -1)}), value_bytes({first_of_65}))
          << kernels::isa_name(isa) << " threads=" << t;
    }
  });
  set_num_threads(saved);
}

// The gradient reads the log-sum-exp its forward kept when the forward ran earlier in the plan,
// and computes it in the forward's order otherwise (its forward in another plan, o an input): the
// same bits either way. Causal and not, one query block or several, more than one split of keys,
// a few queries at an offset (the forward's split tasks), special values, float64.
TEST(Determinism, AttentionGradGivesTheSameBitsWithTheForwardsLogSumExp) {
  struct Case {
    bool causal;
    int64_t Tq, Tk, offset;  // offset < 0: none
    DType dt = DType::F32;
    bool special = false;
  };
  for (const Case& c : {Case{false, 70, 600, -1}, Case{true, 300, 300, -1}, Case{true, 3, 700, 520},
                        Case{true, 130, 130, -1, DType::F32, true}, Case{false, 70, 600, -1, DType::F32, true},
                        Case{true, 300, 300, -1, DType::F32, true}, Case{false, 40, 300, -1, DType::F64}}) {
    const Shape qs{2, c.Tq, 24}, ks{2, c.Tk, 24};
    const HostTensor q = c.special ? testing::special_tensor(qs, 21, 97)
                                   : testing::random_tensor({c.dt, qs, -3, 3}, 21);
    const HostTensor k = testing::random_tensor({c.dt, ks, -3, 3}, 22), v = testing::random_tensor({c.dt, ks}, 23);
    const HostTensor go = testing::random_tensor({c.dt, qs}, 24);
    HostTensor off(DType::I64, {1});
    off.set(0, double(std::max<int64_t>(c.offset, 0)));
    const attr::Attention at{c.causal, 0.3};
    // The forward and its gradient in one plan; then the gradient alone, o an input.
    std::vector<uint8_t> o_bytes, together, alone;
    std::string kernel_together, kernel_alone;
    for (bool with_forward : {true, false}) {
      Graph g;
      ValueId qi = g.input(c.dt, qs, "q"), ki = g.input(c.dt, ks, "k"), vi = g.input(c.dt, ks, "v");
      ValueId gi = g.input(c.dt, qs, "g");
      std::vector<ValueId> in{qi, ki, vi};
      if (c.offset >= 0) in.push_back(g.input(DType::I64, {1}, "offset"));
      ValueId o = with_forward ? g.add(Op::Attention, in, at) : g.input(c.dt, qs, "o");
      std::vector<ValueId> gin{qi, ki, vi, o, gi};
      if (c.offset >= 0) gin.push_back(in[3]);
      ValueId grad = g.add(Op::AttentionGrad, gin, at);
      Plan p(g, with_forward ? std::vector<ValueId>{o, grad} : std::vector<ValueId>{grad});
      p.set_input(qi, q);
      p.set_input(ki, k);
      p.set_input(vi, v);
      p.set_input(gi, go);
      if (c.offset >= 0) p.set_input(in[3], off);
      if (!with_forward) {
        HostTensor ov(c.dt, qs);
        std::memcpy(ov.buffer->data(), o_bytes.data(), o_bytes.size());
        p.set_input(o, ov);
      }
      p.run();
      p.run();  // a second run reads the lse the forward wrote in it
      for (const LaunchInfo& li : p.launch_info())
        if (li.kernel.rfind("attention-grad", 0) == 0) (with_forward ? kernel_together : kernel_alone) = li.kernel;
      if (with_forward) {
        o_bytes = output_bytes(p, {o});
        together = output_bytes(p, {grad});
      } else {
        alone = output_bytes(p, {grad});
      }
    }
    EXPECT_EQ(kernel_together, "attention-grad+lse") << "Tq=" << c.Tq << " Tk=" << c.Tk;
    EXPECT_EQ(kernel_alone, "attention-grad") << "Tq=" << c.Tq << " Tk=" << c.Tk;
    EXPECT_EQ(together, alone) << "causal=" << c.causal << " Tq=" << c.Tq << " Tk=" << c.Tk << " offset=" << c.offset
                               << " special=" << c.special << " f64=" << (c.dt == DType::F64);
  }
}
}  // namespace
}  // namespace synoros

namespace {
// Back-to-back tiny launches: every chunk runs exactly once even when a worker wakes late for a
// job that already finished (a stale claim must never reach the next job).
std::atomic<int64_t> g_chunk_sum{0}, g_chunk_count{0};
void count_chunk(const void*, int64_t c) {
  g_chunk_sum += c;
  ++g_chunk_count;
}
TEST(ThreadPoolStress, EveryChunkRunsExactlyOnce) {
  for (int threads : {2, 3}) {
    synoros::ThreadPool pool(threads);
    g_chunk_sum = 0, g_chunk_count = 0;
    int64_t want_sum = 0, want_count = 0;
    for (int64_t i = 0; i < 200000; ++i) {
      int64_t n = 2 + i % 5;
      pool.run(n, count_chunk, nullptr);
      want_sum += n * (n - 1) / 2;
      want_count += n;
    }
    EXPECT_EQ(g_chunk_count.load(), want_count) << threads << " threads";
    EXPECT_EQ(g_chunk_sum.load(), want_sum) << threads << " threads";
  }
}

// Jobs launched from several threads at once (plans run by several threads, compiled steps from
// several Python threads) take turns on one pool, each job's chunks running exactly once; a chunk
// that launches on the pool it runs in does those chunks itself instead of waiting for the pool.
struct CountedJob {
  std::atomic<int64_t> sum{0}, count{0};
};
void counted_chunk(const void* p, int64_t c) {
  auto& j = *static_cast<CountedJob*>(const_cast<void*>(p));
  j.sum += c;
  ++j.count;
}
struct NestedJob {
  synoros::ThreadPool* pool;
  std::atomic<int64_t> inner{0};
};
void nested_chunk(const void* p, int64_t) {
  auto& n = *static_cast<NestedJob*>(const_cast<void*>(p));
  CountedJob j;
  n.pool->run(5, counted_chunk, &j);
  n.inner += j.count;
}
TEST(ThreadPoolStress, JobsFromSeveralThreadsTakeTurns) {
  synoros::ThreadPool pool(3);
  std::vector<int64_t> wrong(3, 0);
  auto caller = [&](int k) {
    for (int64_t i = 0; i < 20000; ++i) {
      CountedJob j;
      const int64_t n = 2 + (i + k) % 7;
      pool.run(n, counted_chunk, &j);
      wrong[size_t(k)] += j.count.load() != n || j.sum.load() != n * (n - 1) / 2;
    }
  };
  std::vector<std::thread> callers;
  for (int k = 0; k < 3; ++k) callers.emplace_back(caller, k);
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(wrong, std::vector<int64_t>(3, 0));
  NestedJob nested{&pool};
  pool.run(4, nested_chunk, &nested);
  EXPECT_EQ(nested.inner.load(), 4 * 5);
}
}  // namespace
