// Recompile's generated kernels: every elementwise op rendered to C++, compiled at run time and
// run in place of the interpreter's line kernels gives the interpreter's bits (special values,
// broadcasts, strided reads, ragged tails, every instruction set); the kernel cache compiles once,
// rebuilds a corrupt entry and falls back to the interpreter when no compiler runs; selection
// keeps the interpreter when it is faster; training gives the same bytes with generation on and
// off. Selection times come from an injected timer, never from the clock.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "kernels/jit/compiler.hpp"
#include "kernels/jit/nvrtc.hpp"
#include "kernels/jit/render.hpp"
#include "kernels/jit/render_forms.hpp"
#include "kernels/jit/sha256.hpp"
#include "ir/scalar_ops.hpp"
#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/config.hpp"
#include "synoros/gpt.hpp"
#include "synoros/optim.hpp"
#include "synoros/train.hpp"
#include "synoros/profile.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

// The suite's defaults, set before any test reads the environment (a variable already set wins):
// generated kernels off except where a test switches them on (each costs a compiler run, and the
// rest of the suite checks the interpreter they must match), compiled into the build tree.
const bool kSuiteDefaults = [] {
  ::setenv("SYNOROS_NO_JIT", "1", 0);
  ::setenv("SYNOROS_JIT_CACHE", SYNOROS_BINARY_DIR "/jit-test", 0);
  return true;
}();

// Generated kernels on, a private kernel cache and tuning cache, and a selection timer that
// reports the generated candidate (the second) faster unless told otherwise.
struct JitScope {
  testing::TempDir dir{"jit"};
  config::ScopedOverride on{"SYNOROS_NO_JIT", "0"};
  config::ScopedOverride cache{"SYNOROS_JIT_CACHE", dir.file("kernels").c_str()};
  config::ScopedOverride tuning{"SYNOROS_TUNING_CACHE", dir.file("tuning.txt").c_str()};
  explicit JitScope(bool generated_faster = true) {
    kernels::reload_tuning_cache();
    kernels::set_selection_timer([generated_faster](size_t n) {
      std::vector<double> t(n, 1000.0);
      t[generated_faster ? 1 : 0] = 500.0;
      return t;
    });
  }
  ~JitScope() {
    kernels::set_selection_timer({});
    kernels::reload_tuning_cache();
  }
};

HostTensor special_tensor(const Shape& s, uint64_t seed) { return testing::special_tensor(s, seed, 7); }

// Builds y = f(graph) as a fused group, runs it with the interpreter, recompiles (every group a
// candidate), runs again and compares both with an unfused plan. Returns the report.
RecompileReport check_group(const Graph& g, ValueId y, const std::vector<std::pair<ValueId, HostTensor>>& feeds,
                            const std::string& what) {
  CompileOptions plain, manual;
  plain.fuse = false;
  manual.recompile = false;
  Plan plan(g, {y}, manual), ref(g, {y}, plain);
  for (Plan* p : {&plan, &ref}) {
    for (const auto& [v, h] : feeds) p->set_input(v, h);
    p->run();
  }
  HostTensor before = plan.read(y), expect = ref.read(y);
  testing::expect_same_bits(before, expect, what + " (interpreter)");
  RecompileReport r = plan.recompile();
  plan.run();
  testing::expect_same_bits(plan.read(y), expect, what + " (generated)");
  return r;
}

TEST(Sha256, KnownDigests) {
  EXPECT_EQ(kernels::jit::sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(kernels::jit::sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(kernels::jit::sha256_hex(std::string(1000, 'a')).substr(0, 16), "41edece42d63e8d9");
}

class JitOps : public ::testing::TestWithParam<kernels::Isa> {};

TEST_P(JitOps, EveryMapGivesTheInterpretersBits) {
  kernels::Isa isa = GetParam();
  if (int(isa) > int(kernels::best_isa())) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(isa);
  testing::IsaScope at_isa(isa);
  JitScope jit;
  struct Row {
    Op op;
    int arity;
  };
  std::vector<Row> rows;
#define SYNOROS_MAP(Enum, ident, arity, vjp, flops, vec, staged, api, props) rows.push_back({Op::Enum, arity});
#include "synoros/ops.def"
  ASSERT_GT(rows.size(), 20u);
  int generated = 0;
  for (const Row& row : rows) {
    for (int64_t cols : {1, 7, 8, 9, 33, 300}) {
      std::string what = std::string(kernels::isa_name(isa)) + " " + op_name(row.op) + " cols=" + std::to_string(cols);
      Graph g;
      const int64_t R = 5;
      ValueId x = g.input(DType::F32, {R, cols}, "x");
      ValueId b = g.input(DType::F32, {1, cols}, "b");   // a row broadcast down the rows
      ValueId c = g.input(DType::F32, {R, cols}, "c");
      ValueId s = g.input(DType::F32, {}, "s");           // a scalar fed at run time
      // A producer in the group, so the op under test reads a member and externals.
      ValueId t = g.binary(Op::Mul, x, g.scalar(1.25));
      ValueId y;
      // A row broadcast at odd widths (one column would be a gathered expand: no loop kernel).
      ValueId other = cols % 2 && cols > 1 ? g.expand(b, {R, cols}) : c;
      if (row.arity == 1) y = g.unary(row.op, t);
      else if (row.arity == 2) y = g.binary(row.op, t, other);
      else y = g.add(row.op, {g.binary(Op::CmpLt, t, s), t, other});
      y = g.binary(Op::Add, y, s);
      // s is no NaN: where both operands of an op are NaNs of opposite signs, which one comes out
      // follows the operand order the compiler picked for that op's code (IEEE leaves it open), and
      // a generated kernel whose probe shows it is refused (Jit.OppositeNaNsAreRefusedNotWrong).
      HostTensor hs(DType::F32, {});
      hs.set(0, -9.0);
      RecompileReport r = check_group(g, y, {{x, special_tensor({R, cols}, 1)}, {b, special_tensor({1, cols}, 2)},
                                              {c, special_tensor({R, cols}, 3)}, {s, hs}},
                                      what);
      for (const RecompileEntry& e : r.entries) {
        EXPECT_EQ(e.outcome, "generated") << what << ": " << e.kernel;
        generated += e.outcome == "generated";
      }
    }
  }
  EXPECT_GE(generated, int(rows.size()) * 6);  // every op's group, at every width
}

INSTANTIATE_TEST_SUITE_P(Isa, JitOps,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         [](const auto& p) { return std::string(kernels::isa_name(p.param)); });

// Row kernels (loop_ir.hpp's row form) for softmax, log-softmax, their gradients, layer norm with
// and without weight and bias, and its gradient with and without weight give the hand-written row
// kernels' bits on every instruction set, and so does layer norm's backward (dx and the weight's and
// bias's column sums): rows of 7 (a tail only), 779 (16-lane steps, an 8-lane
// step and a tail) and 5000 (two segments of the canonical sum); 37 rows are groups of four, a
// remainder and two chunks of the launch; ordinary values, and special values (NaN, infinities,
// signed zeros) in every input.
class JitRows : public ::testing::TestWithParam<kernels::Isa> {
 protected:
  void SetUp() override {
    if (int(GetParam()) > int(kernels::best_isa())) GTEST_SKIP() << "this CPU lacks " << kernels::isa_name(GetParam());
    at_isa_.emplace(GetParam());
    jit_.emplace();
  }
  std::optional<testing::IsaScope> at_isa_;
  std::optional<JitScope> jit_;
};

TEST_P(JitRows, RowKernelsGiveTheInterpretersBits) {
  const kernels::Isa isa = GetParam();
  for (int64_t n : {7, 779, 5000}) {
    for (bool special : {false, true}) {
      const std::string what = std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n) +
                               (special ? " special" : "");
      const Shape s{n == 5000 ? 9 : 37, n};
      Graph g;
      ValueId x = g.input(DType::F32, s, "x"), go = g.input(DType::F32, s, "g");
      ValueId w = g.input(DType::F32, {n}, "w"), b = g.input(DType::F32, {n}, "b");
      const attr::Eps eps{1e-5};
      const attr::Axis last{-1};
      std::vector<ValueId> outs{g.add(Op::Softmax, {x}, last), g.add(Op::LogSoftmax, {x}, last),
                                g.add(Op::SoftmaxGrad, {x, go}, last), g.add(Op::LogSoftmaxGrad, {x, go}, last),
                                g.add(Op::LayerNorm, {x}, eps),
                                g.add(Op::LayerNorm, {x, w, b}, eps), g.add(Op::LayerNormGrad, {x, go}, eps),
                                g.add(Op::LayerNormGrad, {x, go, w}, eps), g.add(Op::LayerNormBackward, {x, go, w}, eps)};
      CompileOptions manual;
      manual.recompile = false;
      Plan plan(g, outs, manual), ref(g, outs, manual);
      for (Plan* p : {&plan, &ref}) {
        p->set_input(x, special ? testing::special_tensor(s, 7, 97) : testing::random_tensor({DType::F32, s, -4, 4}, 7));
        p->set_input(go, special ? testing::special_tensor(s, 8, 89) : testing::random_tensor({DType::F32, s}, 8));
        p->set_input(w, special ? testing::special_tensor({n}, 9, 83) : testing::random_tensor({DType::F32, {n}}, 9));
        p->set_input(b, special ? testing::special_tensor({n}, 10, 79) : testing::random_tensor({DType::F32, {n}}, 10));
        p->run();
      }
      RecompileReport r = plan.recompile();
      ASSERT_EQ(r.entries.size(), outs.size()) << what;
      for (const RecompileEntry& e : r.entries) EXPECT_EQ(e.outcome, "generated") << what << ": " << e.kernel;
      plan.run();
      for (size_t i = 0; i < outs.size(); ++i)
        testing::expect_same_bits(plan.read(outs[i]), ref.read(outs[i]), what + " output " + std::to_string(i));
    }
  }
}

// Cross-entropy's row kernels give the hand-written kernels' bits on every instruction set: the
// loss per row (read at its target through a gather), with the row's maximum and sum beside it
// where the gradient is in the plan; the gradient from those (one pass), and the gradient alone
// (its target's element patched after the store). 37 rows (groups of four, chunks of eight) of 7,
// 779 and 5000 classes, with and without ignored targets, ordinary and special logits (NaN,
// infinities, signed zeros). The gradient from its forward's statistics has the bits of the
// gradient alone.
TEST_P(JitRows, CrossEntropyRowKernelsGiveTheInterpretersBits) {
  const kernels::Isa isa = GetParam();
  for (int64_t n : {7, 779, 5000}) {
    for (bool special : {false, true}) {
      for (int64_t ignore : {int64_t(0), int64_t(2), int64_t(-100)}) {  // 0: no ignored target
        const std::string what = std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n) +
                                 (special ? " special" : "") + (ignore ? " ignoring " + std::to_string(ignore) : "");
        const Shape s{37, n};
        Graph g;
        ValueId x = g.input(DType::F32, s, "x"), t = g.input(DType::I64, {37}, "t"), gs = g.input(DType::F32, {}, "g");
        const attr::CrossEntropy ce{ignore ? std::optional<int64_t>(ignore) : std::nullopt};
        const ValueId loss = g.add(Op::CrossEntropy, {x, t}, ce), grad = g.add(Op::CrossEntropyGrad, {x, t, gs}, ce);
        auto make_targets = [n, ignore](bool moved) {  // a fresh tensor each time (copies share their buffer)
          HostTensor h = testing::random_tensor({DType::I64, {37}, 0, double(n)}, 12);
          h.set(0, double(n - 1));
          if (ignore) h.set(5, double(ignore)), h.set(36, double(ignore));
          if (moved) h.set(7, double(n / 2));
          return h;
        };
        std::vector<HostTensor> grads;  // the reference gradient of each plan
        for (bool alone : {false, true}) {
          const std::string case_ = what + (alone ? " (gradient alone)" : " (loss and gradient)");
          const std::vector<ValueId> outs = alone ? std::vector<ValueId>{grad} : std::vector<ValueId>{loss, grad};
          CompileOptions manual;
          manual.recompile = false;
          Plan plan(g, outs, manual), ref(g, outs, manual), automatic(g, outs);
          for (Plan* p : {&plan, &ref, &automatic}) {
            p->set_input(x, special ? testing::special_tensor(s, 11, 97) : testing::random_tensor({DType::F32, s, -8, 8}, 11));
            p->set_input(t, make_targets(false));
            p->set_input(gs, testing::random_tensor({DType::F32, {}}, 13));
            p->run();
          }
          // Recompile as users get it, inside the second run: that run's outputs are intact.
          automatic.run();
          for (size_t i = 0; i < outs.size(); ++i)
            testing::expect_same_bits(automatic.read(outs[i]), ref.read(outs[i]), case_ + " recompiled in its run, output " + std::to_string(i));
          RecompileReport r = plan.recompile();
          ASSERT_EQ(r.entries.size(), outs.size()) << case_;
          for (const RecompileEntry& e : r.entries) EXPECT_EQ(e.outcome, "generated") << case_ << ": " << e.kernel;
          // The paired gradient reads m and s (it has no maximum step); the lone one takes them itself.
          const std::string grad_kernel = r.entries.back().kernel;
          EXPECT_EQ(grad_kernel.find("=max") == std::string::npos, !alone) << case_ << ": " << grad_kernel;
          plan.run();
          for (size_t i = 0; i < outs.size(); ++i)
            testing::expect_same_bits(plan.read(outs[i]), ref.read(outs[i]), case_ + " output " + std::to_string(i));
          grads.push_back(ref.read(grad));
          // New targets and a new upstream scalar reach the generated kernels' per-row inputs.
          for (Plan* p : {&plan, &ref}) {
            p->set_input(t, make_targets(true));
            p->set_input(gs, testing::random_tensor({DType::F32, {}}, 14));
            p->run();
          }
          for (size_t i = 0; i < outs.size(); ++i)
            testing::expect_same_bits(plan.read(outs[i]), ref.read(outs[i]), case_ + " new targets, output " + std::to_string(i));
        }
        testing::expect_same_bits(grads[0], grads[1], what + ": the gradient from the loss's statistics");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, JitRows,
                         ::testing::Values(kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512),
                         [](const auto& p) { return std::string(kernels::isa_name(p.param)); });

// A row kernel reads only what is defined before it: the output row after a step stored it, a
// step's scalar after that step, and a scalar step nothing but scalars and constants.
TEST(Jit, RowKernelsReadOnlyWhatIsDefined) {
  using kernels::jit::LoopInput;
  using kernels::jit::LoopKernel;
  using kernels::jit::RowStep;
  using Src = LoopInput::Src;
  using Kind = RowStep::Kind;
  auto kernel = [](std::vector<LoopInput> in, std::vector<RowStep> steps) {
    LoopKernel k;
    k.row_n = 16;
    k.inputs = std::move(in);
    k.steps = std::move(steps);
    return k;
  };
  const LoopInput x{1, Src::Memory, 16}, out{0, Src::Out}, s0{0, Src::Step, 0, 0};
  const kernels::jit::LoopStmt exp_x{Op::Exp, 1, {-1, 0, 0}}, exp_1{Op::Exp, 1, {-2, 0, 0}};
  // y = exp(x), then y / sum(y) where the sum also stored y: valid.
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, out, s0}, {{Kind::Sum, true, {exp_x}, 0},
                                                               {Kind::Store, false, {{Op::Div, 2, {-2, -3, 0}}}, 0}})));
  // The output row read before any step stored it.
  EXPECT_THROW(kernels::jit::validate(kernel({x, out}, {{Kind::Sum, false, {exp_1}, 0}, {Kind::Store, false, {}, -2}})),
               Error);
  // A step's scalar read by that step itself.
  EXPECT_THROW(kernels::jit::validate(kernel({x, s0}, {{Kind::Sum, false, {exp_1}, 0}, {Kind::Store, false, {}, -1}})),
               Error);
  // A scalar step reading the row.
  EXPECT_THROW(kernels::jit::validate(kernel({x}, {{Kind::Scalar, false, {exp_x}, 0}, {Kind::Store, false, {}, -1}})),
               Error);
  // No store at the end; two stores.
  EXPECT_THROW(kernels::jit::validate(kernel({x}, {{Kind::Sum, false, {exp_x}, 0}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x}, {{Kind::Store, false, {}, -1}, {Kind::Store, false, {}, -1}})), Error);
  // A memory input after another kind (the caller passes memory inputs first).
  EXPECT_THROW(kernels::jit::validate(kernel({{0, Src::Const, 0, -1, 2.0f}, x},
                                             {{Kind::Store, false, {{Op::Mul, 2, {-1, -2, 0}}}, 0}})),
               Error);
  // Per-row inputs, gathers, patches and results: a row's target t (a per-row value), its
  // element x[t] gathered, a result per row, and a store patched at t.
  const LoopInput t{0, Src::Memory, 1}, xt{0, Src::Gather, 0, -1, 0, 0, 1}, out_t{0, Src::Gather, 0, -1, 0, -1, 1};
  const RowStep result{Kind::Result, false, {}, -3};
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, t, xt}, {{Kind::Max, false, {}, -1}, result})));
  EXPECT_NO_THROW(kernels::jit::validate(
      kernel({x, t, xt}, {{Kind::Store, false, {exp_x}, 0}, {Kind::Patch, false, {}, -3, 1}})));
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, t, out_t}, {{Kind::Sum, true, {exp_x}, 0}, {Kind::Scalar, false, {}, -3},
                                                                {Kind::Store, false, {}, -1}})));
  // The output row gathered by a patch (it would see earlier patches).
  EXPECT_THROW(kernels::jit::validate(
                   kernel({x, t, out_t}, {{Kind::Store, false, {exp_x}, 0}, {Kind::Patch, false, {}, -3, 1}})),
               Error);
  // A gather of the output row before it is stored; a gather at a position that is no per-row value.
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, out_t}, {result})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, {0, Src::Gather, 0, -1, 0, 0, 0}}, {result})), Error);
  // A scalar step may read a per-row value, not a row.
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, t}, {{Kind::Scalar, false, {}, -2}, {Kind::Store, false, {}, -1}})));
  // A patch without a store before it, a patch without a position, a step after a result, a
  // result after a store, and a sum that stores in a kernel whose output is its results.
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, xt}, {{Kind::Patch, false, {}, -3, 1}, result})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t}, {{Kind::Store, false, {}, -1}, {Kind::Patch, false, {}, -2}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, xt}, {result, {Kind::Max, false, {}, -1}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, xt}, {{Kind::Store, false, {}, -1}, result})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, xt}, {{Kind::Sum, true, {exp_x}, 0}, result})), Error);
  // A gather from a per-row value, a patch at a row's elements, a patch reading the output row,
  // and a gather of the output row by a step that writes the row.
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, {0, Src::Gather, 0, -1, 0, 1, 1}}, {result})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t}, {{Kind::Store, false, {}, -1}, {Kind::Patch, false, {}, -2, 0}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, out}, {{Kind::Sum, true, {exp_x}, 0}, {Kind::Store, false, {}, -1},
                                                           {Kind::Patch, false, {}, -3, 1}})),
               Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, t, out_t}, {{Kind::Sum, true, {exp_x}, 0}, {Kind::Store, false, {}, -3}})),
               Error);
  // Column sums come last, after a store (reading the stored row) or results; never alone, and
  // never before the output.
  const RowStep column{Kind::Column, false, {}, -2};
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, out}, {{Kind::Store, false, {exp_x}, 0}, column, column})));
  EXPECT_NO_THROW(kernels::jit::validate(kernel({x, t, xt}, {result, {Kind::Column, false, {}, -1}})));
  EXPECT_THROW(kernels::jit::validate(kernel({x, out}, {column, {Kind::Store, false, {exp_x}, 0}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x}, {{Kind::Column, false, {}, -1}})), Error);
  EXPECT_THROW(kernels::jit::validate(kernel({x, out}, {{Kind::Column, false, {}, -2}, {Kind::Store, false, {}, -1}})), Error);
  // A run kernel with row steps.
  LoopKernel run;
  run.inputs = {{1}};
  run.body = {exp_x};
  EXPECT_NO_THROW(kernels::jit::validate(run));
  run.nan_guard = {0};
  EXPECT_THROW(kernels::jit::validate(run), Error);
}

// A reduction's fused prologue (a batch norm's variance: mean((x - m) tanh(x - m)) over N, H, W)
// is a Recompile candidate by the launch it runs in (the reduction's, or the epilogue's whose
// producer the reduction is); generated, the launch gives the unfused plan's bits, for rows
// shorter than, across and longer than the reduction's segments.
TEST(Jit, ReductionProloguesAreGenerated) {
  JitScope jit;
  for (Shape s : {Shape{3, 5, 7, 9}, Shape{64, 8, 7, 7}, Shape{2, 3, 70, 70}}) {
    Graph g;
    ValueId x = g.input(DType::F32, s, "x");
    std::vector<int64_t> axes = {0};
    for (size_t d = 2; d < s.size(); ++d) axes.push_back(int64_t(d));
    ValueId m = g.mean(x, axes, true);
    ValueId c = g.binary(Op::Sub, x, g.expand(m, s));
    ValueId v = g.mean(g.binary(Op::Mul, c, g.unary(Op::Tanh, c)), axes, true);
    // The variance alone, and as the producer of 1 / sqrt(var + eps) (the launch is the epilogue's).
    ValueId r = g.unary(Op::Rsqrt, g.binary(Op::Add, v, g.scalar(1e-5)));
    for (ValueId y : {v, r}) {
      CompileOptions plain, manual;
      plain.fuse = false;
      manual.recompile = false;
      Plan plan(g, {y}, manual), ref(g, {y}, plain);
      for (Plan* p : {&plan, &ref}) {
        p->set_input(x, testing::random_tensor({DType::F32, s}, 5));
        p->run();
      }
      RecompileReport rep = plan.recompile();
      int prologues = 0;
      for (const RecompileEntry& e : rep.entries) {
        if (e.kernel.find("tanh") == std::string::npos) continue;
        ++prologues;
        EXPECT_EQ(e.node, y);
        EXPECT_EQ(e.outcome, "generated") << e.kernel;
      }
      EXPECT_EQ(prologues, 1) << rep.table();
      plan.run();
      testing::expect_same_bits(plan.read(y), ref.read(y), "a reduction with a generated prologue");
      bool labelled = false;
      for (const LaunchInfo& li : plan.launch_info())
        labelled = labelled || (li.ops.back() == y && li.kernel.find("generated") != std::string::npos);
      EXPECT_TRUE(labelled) << "the reduction's launch does not say it runs generated code";
    }
  }
}

// Row kernels lowered as an epilogue's producer (a loss scaled by a factor, a softmax feeding a
// product) are Recompile candidates by the epilogue's launch, as is the epilogue's own group; the
// scaled loss's gradient reads the loss's statistics, as the loss launches first. Bits as unfused.
TEST(Jit, RowKernelsInsideAnEpiloguesLaunchAreGenerated) {
  JitScope jit;
  const Shape s{37, 779};
  Graph g;
  ValueId x = g.input(DType::F32, s, "x"), t = g.input(DType::I64, {37}, "t"), k = g.input(DType::F32, {}, "k");
  const attr::CrossEntropy ce{};
  ValueId loss = g.binary(Op::Mul, g.add(Op::CrossEntropy, {x, t}, ce), k);
  ValueId grad = g.add(Op::CrossEntropyGrad, {x, t, k}, ce);
  ValueId probs = g.binary(Op::Mul, g.add(Op::Softmax, {x}, attr::Axis{-1}), g.expand(k, s));
  const std::vector<ValueId> outs{loss, grad, probs};
  CompileOptions plain, manual;
  plain.fuse = false;
  manual.recompile = false;
  Plan plan(g, outs, manual), ref(g, outs, plain);
  for (Plan* p : {&plan, &ref}) {
    p->set_input(x, testing::random_tensor({DType::F32, s, -8, 8}, 3));
    p->set_input(t, testing::random_tensor({DType::I64, {37}, 0, 779}, 4));
    p->set_input(k, testing::random_tensor({DType::F32, {}}, 5));
    p->run();
  }
  RecompileReport r = plan.recompile();
  auto entry = [&](const std::string& part) {
    for (const RecompileEntry& e : r.entries)
      if (e.kernel.find(part) != std::string::npos) return e;
    return RecompileEntry{kNoValue, "", "missing", 0, 0, 0, false};
  };
  const RecompileEntry fwd = entry("=result"), soft = entry("=max: -> x0 ; s1=sum+store"), back = entry("=patch");
  EXPECT_EQ(fwd.node, loss) << r.table();
  EXPECT_EQ(soft.node, probs) << r.table();
  for (const RecompileEntry& e : {fwd, soft, back}) EXPECT_EQ(e.outcome, "generated") << e.kernel;
  EXPECT_EQ(back.kernel.find("=max"), std::string::npos) << "the gradient did not read the loss's statistics";
  for (ValueId o : {loss, probs}) {
    bool labelled = false;
    for (const LaunchInfo& li : plan.launch_info())
      labelled = labelled || (li.ops.back() == o && li.kernel.find("generated") != std::string::npos);
    EXPECT_TRUE(labelled) << "%" << o << "'s launch does not say it runs generated code";
  }
  plan.run();
  for (ValueId o : outs) testing::expect_same_bits(plan.read(o), ref.read(o), "output %" + std::to_string(o));
}

// A chain of transcendentals over long runs.
TEST(Jit, LongChainsGiveTheInterpretersBits) {
  JitScope jit;
  for (int64_t n : {3, 64, 257}) {
    Graph g;
    ValueId x = g.input(DType::F32, {n, 6}, "x"), y = g.input(DType::F32, {n, 6}, "y");
    ValueId t = g.binary(Op::Add, g.unary(Op::Tanh, x), y);
    t = g.unary(Op::GeluTanh, g.binary(Op::Mul, g.unary(Op::Sigmoid, t), g.unary(Op::Exp, x)));
    RecompileReport r = check_group(g, t, {{x, special_tensor({n, 6}, 5)}, {y, special_tensor({n, 6}, 6)}},
                                    "n=" + std::to_string(n));
    EXPECT_EQ(r.generated(), 1) << n;
  }
}

// Where the two operands of an add are NaNs of opposite signs, the interpreter's line kernel and
// a generated loop may return either (IEEE leaves it open). A kernel installed on data without
// such pairs and checked again on data with them is refused and uninstalled: the plan's bits are
// the interpreter's again, and its launch no longer says "generated".
TEST(Jit, ARecompileThatRefusesUninstalls) {
  JitScope jit;
  Graph g;
  ValueId x = g.input(DType::F32, {64}, "x"), s = g.input(DType::F32, {}, "s");
  ValueId y = g.binary(Op::Add, g.unary(Op::Neg, g.binary(Op::Mul, x, g.scalar(1.25))), s);
  CompileOptions manual, plain;
  manual.recompile = false;
  plain.fuse = false;
  Plan plan(g, {y}, manual), ref(g, {y}, plain);
  HostTensor hs(DType::F32, {});
  hs.set(0, -9.0);
  for (Plan* p : {&plan, &ref}) p->set_input(x, special_tensor({64}, 5)), p->set_input(s, hs), p->run();
  ASSERT_EQ(plan.recompile().generated(), 1);
  auto labelled = [&] {
    for (const LaunchInfo& li : plan.launch_info())
      if (li.kernel.find("generated") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(labelled());
  hs.set(0, std::numeric_limits<double>::quiet_NaN());
  for (Plan* p : {&plan, &ref}) p->set_input(s, hs), p->run();
  RecompileReport r = plan.recompile();
  ASSERT_EQ(r.entries.size(), 1u);
  const std::string& outcome = r.entries[0].outcome;
  EXPECT_TRUE(outcome == "generated" || outcome.rfind("rejected: ", 0) == 0) << outcome;
  EXPECT_EQ(labelled(), outcome == "generated");
  plan.run();
  testing::expect_same_bits(plan.read(y), ref.read(y), "after the second recompile");
}

// Strided inputs (the renderer's gather lanes), at every length around the vector width.
TEST(Jit, StridedInputsReadOnlyTheirElements) {
  JitScope jit;
  kernels::jit::LoopKernel k;
  k.inputs = {{3}, {1}};
  k.body = {{Op::Sub, 2, {-1, -2, 0}}, {Op::Tanh, 1, {0, 0, 0}}};
  kernels::Isa isa = kernels::active_isa();
  kernels::jit::Compiled c = kernels::jit::compile(kernels::jit::render_cpp(k, isa, "synoros_run"), "synoros_run", isa);
  ASSERT_TRUE(c.symbol) << c.error;
  for (int64_t n : {1, 7, 8, 9, 17, 40}) {
    std::vector<float> a(static_cast<size_t>(3 * (n - 1) + 1)), b(static_cast<size_t>(n)), out(static_cast<size_t>(n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.25f - 2;
    for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f - float(i) * 0.125f;
    const char* ext[2] = {reinterpret_cast<const char*>(a.data()), reinterpret_cast<const char*>(b.data())};
    reinterpret_cast<kernels::jit::RunFn>(c.symbol)(ext, reinterpret_cast<char*>(out.data()), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[size_t(i)], fn::Tanh::f(a[size_t(3 * i)] - b[size_t(i)])) << n << " " << i;
  }
}

TEST(Jit, AWarmCacheCompilesNothingAndACorruptEntryIsRebuilt) {
  JitScope jit;
  kernels::jit::LoopKernel k;
  k.inputs = {{1}, {0}};
  k.body = {{Op::Mul, 2, {-1, -2, 0}}, {Op::Exp, 1, {0, 0, 0}}};
  kernels::Isa isa = kernels::active_isa();
  std::string src = kernels::jit::render_cpp(k, isa, "synoros_run");
  auto call = [](const kernels::jit::Compiled& c) {
    float x[11], s = 0.5f, out[11];
    for (int i = 0; i < 11; ++i) x[i] = float(i) - 5;
    const char* ext[2] = {reinterpret_cast<const char*>(x), reinterpret_cast<const char*>(&s)};
    reinterpret_cast<kernels::jit::RunFn>(c.symbol)(ext, reinterpret_cast<char*>(out), 11);
    for (int i = 0; i < 11; ++i) EXPECT_EQ(out[i], fn::Exp::f(x[i] * s)) << i;
  };
  int64_t runs = kernels::jit::compiler_runs();
  kernels::jit::Compiled a = kernels::jit::compile(src, "synoros_run", isa);
  ASSERT_TRUE(a.symbol) << a.error;
  EXPECT_FALSE(a.cached);
  EXPECT_EQ(kernels::jit::compiler_runs(), runs + 1);
  call(a);
  // A new process finds it on disk: no compiler run.
  kernels::jit::forget_loaded_kernels();
  kernels::jit::Compiled b = kernels::jit::compile(src, "synoros_run", isa);
  ASSERT_TRUE(b.symbol) << b.error;
  EXPECT_TRUE(b.cached);
  EXPECT_EQ(b.key, a.key);
  EXPECT_EQ(kernels::jit::compiler_runs(), runs + 1);
  // A truncated shared object (written whole as a new file: the loaded one stays mapped) is
  // detected by its checksum, rebuilt, and works again.
  int truncated = 0;
  for (const auto& f : std::filesystem::directory_iterator(kernels::jit::cache_dir())) {
    if (f.path().extension() != ".so") continue;
    std::filesystem::path cut = f.path().string() + ".cut";
    std::filesystem::copy_file(f.path(), cut);
    std::filesystem::resize_file(cut, 100);
    std::filesystem::rename(cut, f.path());
    ++truncated;
  }
  ASSERT_EQ(truncated, 1);
  kernels::jit::forget_loaded_kernels();
  kernels::jit::Compiled c = kernels::jit::compile(src, "synoros_run", isa);
  ASSERT_TRUE(c.symbol) << c.error;
  EXPECT_FALSE(c.cached);
  EXPECT_EQ(kernels::jit::compiler_runs(), runs + 2);
  call(c);
  // The prelude's headers were precompiled once (GCC's .gch beside them). A damaged one fails
  // the compile that reads it, which is run again without it, and it is dropped.
  std::string version;
  if (FILE* p = ::popen("c++ --version 2>/dev/null", "r")) {
    char line[256];
    if (std::fgets(line, sizeof line, p)) version = line;
    ::pclose(p);
  }
  if (version.find("clang") != std::string::npos) GTEST_SKIP() << "the compiler is clang: no GCC precompiled header";
  std::vector<std::filesystem::path> pch;
  for (const auto& f : std::filesystem::recursive_directory_iterator(kernels::jit::cache_dir()))
    if (f.path().extension() == ".gch") pch.push_back(f.path());
  ASSERT_EQ(pch.size(), 1u);
  std::filesystem::resize_file(pch[0], std::filesystem::file_size(pch[0]) / 2);
  k.body[1].op = Op::Tanh;
  kernels::jit::Compiled d = kernels::jit::compile(kernels::jit::render_cpp(k, isa, "synoros_run"), "synoros_run", isa);
  ASSERT_TRUE(d.symbol) << d.error;
  EXPECT_EQ(kernels::jit::compiler_runs(), runs + 4);
  EXPECT_FALSE(std::filesystem::exists(pch[0]));
}

TEST(Jit, ACompilerFailureFallsBackToTheInterpreter) {
  JitScope jit;
  Graph g;
  ValueId x = g.input(DType::F32, {100}, "x");
  ValueId y = g.unary(Op::Sigmoid, g.binary(Op::Mul, x, g.scalar(2.0)));
  for (const char* cxx : {"/nonexistent/c++", "false"}) {
    config::ScopedOverride broken("SYNOROS_JIT_CXX", cxx);
    RecompileReport r = check_group(g, y, {{x, special_tensor({100}, 7)}}, cxx);
    ASSERT_EQ(r.entries.size(), 1u) << cxx;
    EXPECT_EQ(r.entries[0].outcome.rfind("failed: ", 0), 0u) << r.entries[0].outcome;
  }
  // Rendering something that is not a map is an Error, not a crash.
  kernels::jit::LoopKernel bad;
  bad.body = {{Op::Sum, 1, {-1, 0, 0}}};
  bad.inputs = {{1}};
  testing::expect_error([&] { kernels::jit::render_cpp(bad, kernels::Isa::Scalar, "f"); }, {"not an elementwise map"});
}

TEST(Jit, OffMeansOff) {
  JitScope jit;
  config::ScopedOverride off("SYNOROS_NO_JIT", "1");
  Graph g;
  ValueId x = g.input(DType::F32, {100}, "x");
  ValueId y = g.unary(Op::Tanh, g.binary(Op::Mul, x, g.scalar(2.0)));
  int64_t runs = kernels::jit::compiler_runs();
  EXPECT_TRUE(check_group(g, y, {{x, special_tensor({100}, 8)}}, "off").entries.empty());
  EXPECT_EQ(kernels::jit::compiler_runs(), runs);
}

TEST(Jit, SelectionKeepsTheFasterKernelAndCachesTheChoice) {
  Graph g;
  ValueId x = g.input(DType::F32, {4096}, "x");
  ValueId y = g.unary(Op::Gelu, g.binary(Op::Add, x, g.scalar(0.5)));
  {
    JitScope slower(false);
    RecompileReport r = check_group(g, y, {{x, special_tensor({4096}, 9)}}, "interpreter faster");
    ASSERT_EQ(r.entries.size(), 1u);
    EXPECT_EQ(r.entries[0].outcome, "interpreter");
    EXPECT_FALSE(r.entries[0].cached);
    EXPECT_EQ(r.entries[0].interpreter_ns, 500.0);
    // The second time the tuning cache answers: nothing compiled, nothing timed.
    int64_t runs = kernels::jit::compiler_runs();
    r = check_group(g, y, {{x, special_tensor({4096}, 9)}}, "cached");
    ASSERT_EQ(r.entries.size(), 1u);
    EXPECT_TRUE(r.entries[0].cached);
    EXPECT_EQ(r.entries[0].outcome, "interpreter");
    EXPECT_EQ(kernels::jit::compiler_runs(), runs);
  }
  {
    JitScope faster(true);
    CompileOptions manual;
    manual.recompile = false;
    Plan plan(g, {y}, manual);
    plan.set_input(x, special_tensor({4096}, 9));
    plan.run();
    // Launch times: a group below the thresholds is no candidate.
    RecompileOptions cold;
    cold.launch_ns = std::vector<double>(plan.launches().size(), 10.0);
    EXPECT_TRUE(plan.recompile(cold).entries.empty());
    RecompileReport r = plan.recompile();
    EXPECT_EQ(r.generated(), 1);
    EXPECT_NE(r.table().find("generated"), std::string::npos);
    bool labelled = false;
    for (const LaunchInfo& li : plan.launch_info()) labelled |= li.kernel.find("generated") != std::string::npos;
    EXPECT_TRUE(labelled);
    testing::expect_error(
        [&] {
          RecompileOptions o;
          o.launch_ns = {1.0, 2.0, 3.0};
          plan.recompile(o);
        },
        {"3 launch times"});
    // The generated choice is the launch's certificate: both candidates, the generated one's
    // bits checked, both timed (by the test's timer).
    size_t launch = plan.launches().size() - 1;
    const std::vector<SelectionCertificate>& sel = plan.launch_info()[launch].selections;
    ASSERT_EQ(sel.size(), 1u);
    EXPECT_EQ(sel[0].source, "measured");
    ASSERT_EQ(sel[0].candidates.size(), 2u);
    EXPECT_EQ(sel[0].chosen, 1);
    EXPECT_EQ(sel[0].candidates[1].name, "generated");
    EXPECT_TRUE(sel[0].candidates[1].checked && sel[0].candidates[1].passed);
    EXPECT_EQ(sel[0].candidates[0].ns, 1000.0);
    EXPECT_EQ(sel[0].candidates[1].ns, 500.0);
    EXPECT_GT(sel[0].bytes, 0.0);
  }
}

// The roofline model decides before compiling: a memory-bound group whose launch already runs
// near its limit is left to the interpreter; one far from it is compiled and timed.
TEST(Jit, TheRooflineModelSkipsGroupsAlreadyNearTheMachinesLimit) {
  JitScope jit;
  Graph g;
  ValueId x = g.input(DType::F32, {1 << 16}, "x");
  ValueId y = g.unary(Op::Sigmoid, g.binary(Op::Mul, x, g.scalar(3.0)));
  CompileOptions manual;
  manual.recompile = false;
  Plan plan(g, {y}, manual);
  plan.set_input(x, special_tensor({1 << 16}, 10));
  plan.run();
  ASSERT_EQ(plan.launches().size(), 1u);
  LaunchWork w = launch_work(plan, 0);
  EXPECT_EQ(w.bytes, 2.0 * 4 * (1 << 16) + 4);  // reads x and the scalar, writes y
  RecompileOptions o;
  o.min_ns = o.min_share = 0;      // any launch time is a candidate's (the limit depends on the threads)
  o.peak = {1000.0, 1.0, "test"};  // 1 GB/s: memory-bound, 524292 ns per thread at the limit
  double limit = roofline_ns(w.flops, w.bytes, o.peak, num_threads());
  EXPECT_EQ(limit, w.bytes / num_threads());
  o.launch_ns = {1.2 * limit};
  int64_t runs = kernels::jit::compiler_runs();
  RecompileReport near = plan.recompile(o);
  ASSERT_EQ(near.entries.size(), 1u);
  EXPECT_EQ(near.entries[0].outcome.rfind("skipped: ", 0), 0u) << near.entries[0].outcome;
  EXPECT_EQ(kernels::jit::compiler_runs(), runs);
  EXPECT_TRUE(plan.launch_info()[0].selections.empty());
  o.launch_ns = {1.3 * limit};
  RecompileReport far = plan.recompile(o);
  ASSERT_EQ(far.entries.size(), 1u);
  EXPECT_EQ(far.entries[0].outcome, "generated");
  // Near the limit again: the generated kernel installed above is taken out.
  o.launch_ns = {1.2 * limit};
  EXPECT_EQ(plan.recompile(o).entries[0].outcome.rfind("skipped: ", 0), 0u);
  EXPECT_EQ(plan.launch_info()[0].kernel.find("generated"), std::string::npos) << plan.launch_info()[0].kernel;
  // Without a peak, no model: every group over the thresholds is a candidate.
  o.peak = {};
  o.launch_ns = {1.0 * limit};
  EXPECT_EQ(plan.recompile(o).entries[0].outcome, "generated");
}

std::vector<float> train_lm(bool jit, int steps) {
  nn::GptConfig c{40, 8, 16, 2, 2};
  nn::Gpt model(c, 3);
  optim::AdamW opt(model.parameters(), 1e-2);
  CompiledStep step = train::compile_lm_train(model, opt, 2, 8);
  HostTensor x = testing::random_tensor({DType::I64, {2, 8}, 0, 40.0}, 11);
  HostTensor y = testing::random_tensor({DType::I64, {2, 8}, 0, 40.0}, 12);
  for (int i = 0; i < steps; ++i) {
    opt.tick();
    step({x, y});
    if (i == 0 && jit) {
      EXPECT_GT(step.plan().recompile().generated(), 0);
    }
  }
  std::vector<float> out;
  for (auto& [n, p] : model.named_parameters()) {
    std::vector<float> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(Jit, TrainingGivesTheSameBytesWithAndWithoutGeneratedKernels) {
  std::vector<float> off;
  {
    config::ScopedOverride no("SYNOROS_NO_JIT", "1");
    off = train_lm(false, 4);
  }
  JitScope jit;
  std::vector<float> on = train_lm(true, 4);
  ASSERT_EQ(on.size(), off.size());
  EXPECT_EQ(std::memcmp(on.data(), off.data(), on.size() * sizeof(float)), 0);
  EXPECT_NE(on, train_lm(true, 0));  // training moved the parameters
}

// The CUDA renderer: every loop kernel of the GPT training step (its fused groups, its layer
// norms' row kernels, their gradients with the weight's and bias's column sums (a second entry),
// and cross-entropy's) compiles with NVRTC to PTX and an sm_90 cubin (no GPU needed; running them
// is the CUDA backend's part).
TEST(JitCuda, EveryGroupOfTheGptStepCompilesWithNvrtc) {
  std::string why;
  if (!kernels::jit::nvrtc_available(&why)) GTEST_SKIP() << why;
  nn::GptConfig c{40, 8, 16, 2, 2};
  nn::Gpt model(c, 3);
  optim::AdamW opt(model.parameters(), 1e-2);
  CompiledStep step = train::compile_lm_train(model, opt, 2, 8);
  std::vector<const kernels::jit::LoopKernel*> kernels = step.plan().loop_kernels();
  ASSERT_GE(kernels.size(), 5u);
  std::set<std::string> seen;
  int rows = 0, xent = 0, columns = 0;  // the row kernels; cross-entropy's (results per row, a patched row); with sums
  for (const kernels::jit::LoopKernel* k : kernels) {
    rows += k->row_n > 0;
    using Kind = kernels::jit::RowStep::Kind;
    xent += k->row_n > 0 && (k->steps.back().kind == Kind::Result || k->steps.back().kind == Kind::Patch);
    columns += k->columns() > 0;
    if (!seen.insert(k->text()).second) continue;
    kernels::jit::CudaBinary b = kernels::jit::nvrtc_compile(kernels::jit::render_cuda(*k, "synoros_run"), "sm_90");
    EXPECT_TRUE(b.ok) << k->text() << "\n" << b.log;
    EXPECT_NE(b.ptx.find(".entry synoros_run("), std::string::npos) << k->text();
    EXPECT_EQ(b.ptx.find(".entry synoros_run_columns(") != std::string::npos, k->columns() > 0) << k->text();
  }
  EXPECT_GE(rows, 2 * c.layers + 1);
  EXPECT_EQ(xent, 2);
  EXPECT_EQ(columns, 2 * c.layers + 1);  // every layer norm's backward
}

// The CUDA form of a kernel with column sums (each row's scalars kept, then one pass per column),
// run on the CPU through its scalar build, gives the CPU kernel's rows and sums: a layer norm's
// backward over 37 rows of 779 and of 7, ordinary and special values (NaN, infinities, signed
// zeros; a NaN sum may differ in its bits alone).
TEST(Jit, TheSplitFormOfColumnSumsGivesTheCpuKernelsBits) {
  JitScope jit;
  for (int64_t n : {7, 779})
  for (bool special : {false, true}) {
    const int64_t rows = 37;
    Graph g;
    ValueId x = g.input(DType::F32, {rows, n}, "x"), go = g.input(DType::F32, {rows, n}, "g"),
            w = g.input(DType::F32, {n}, "w");
    Plan plan(g, {g.add(Op::LayerNormBackward, {x, go, w}, attr::Eps{1e-5})});
    std::vector<const kernels::jit::LoopKernel*> ks = plan.loop_kernels();
    ASSERT_EQ(ks.size(), 1u);
    const kernels::jit::LoopKernel& k = *ks[0];
    ASSERT_EQ(k.columns(), 2);
    HostTensor xs = special ? testing::special_tensor({rows, n}, 21, 97) : testing::random_tensor({DType::F32, {rows, n}, -3, 3}, 21);
    HostTensor gs = special ? testing::special_tensor({rows, n}, 22, 89) : testing::random_tensor({DType::F32, {rows, n}}, 22);
    HostTensor ws = special ? testing::special_tensor({n}, 23, 83) : testing::random_tensor({DType::F32, {n}}, 23);
    std::vector<std::vector<float>> out(2, std::vector<float>(size_t(rows * n))), sums(2, std::vector<float>(size_t(2 * n), -1.0f));
    for (int split = 0; split < 2; ++split) {
      const std::string sym = "synoros_run";
      kernels::jit::Compiled c = kernels::jit::compile(
          kernels::jit::render_rows_cpp(k, kernels::Isa::Scalar, sym, split == 1), sym, kernels::Isa::Scalar);
      ASSERT_NE(c.symbol, nullptr) << c.error;
      std::vector<const char*> ext(k.inputs.size() + 2, nullptr);
      ext[0] = reinterpret_cast<const char*>(xs.data<float>());
      ext[1] = reinterpret_cast<const char*>(gs.data<float>());
      ext[2] = reinterpret_cast<const char*>(ws.data<float>());
      ext[k.inputs.size()] = reinterpret_cast<const char*>(sums[size_t(split)].data());
      ext[k.inputs.size() + 1] = reinterpret_cast<const char*>(sums[size_t(split)].data() + n);
      reinterpret_cast<kernels::jit::RunFn>(c.symbol)(ext.data(), reinterpret_cast<char*>(out[size_t(split)].data()), rows);
    }
    const std::string what = "n=" + std::to_string(n) + (special ? " special" : "");
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0) << what;
    for (size_t i = 0; i < sums[0].size(); ++i) {
      if (std::isnan(sums[0][i]) && std::isnan(sums[1][i])) continue;
      ASSERT_EQ(std::memcmp(&sums[0][i], &sums[1][i], sizeof(float)), 0) << what << " sum " << i;
    }
    EXPECT_NE(sums[0][0], -1.0f) << what;  // the sums were written
  }
}

// The softmax family's row kernels (a maximum, a scalar log, a stored sum) compile with NVRTC too.
TEST(JitCuda, SoftmaxRowKernelsCompileWithNvrtc) {
  std::string why;
  if (!kernels::jit::nvrtc_available(&why)) GTEST_SKIP() << why;
  Graph g;
  ValueId x = g.input(DType::F32, {4, 37}, "x"), go = g.input(DType::F32, {4, 37}, "g");
  const attr::Axis last{-1};
  std::vector<ValueId> outs{g.add(Op::Softmax, {x}, last), g.add(Op::LogSoftmax, {x}, last),
                            g.add(Op::SoftmaxGrad, {x, go}, last), g.add(Op::LogSoftmaxGrad, {x, go}, last)};
  Plan plan(g, outs);
  std::vector<const kernels::jit::LoopKernel*> kernels = plan.loop_kernels();
  ASSERT_EQ(kernels.size(), outs.size());
  for (const kernels::jit::LoopKernel* k : kernels) {
    EXPECT_GT(k->row_n, 0) << k->text();
    kernels::jit::CudaBinary b = kernels::jit::nvrtc_compile(kernels::jit::render_cuda(*k, "synoros_run"), "sm_90");
    EXPECT_TRUE(b.ok) << k->text() << "\n" << b.log;
  }
}

}  // namespace
}  // namespace synoros
