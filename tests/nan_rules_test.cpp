// The special-value rules of include/synoros/ops.def (NaN, infinities, signed zeros, denormals)
// against PyTorch: tests/torch_special_values.py prints PyTorch's results on special inputs, and
// every record runs here through plans at every instruction set, fused and unfused, in the
// layouts that select each kernel form (reductions: rows, columns, pooling tiles, scattered
// windows; max's gradient: its tile and general forms), and through the float64 oracle.
//
// Comparison: NaN matches NaN (payload and sign are not part of any rule); infinities and zeros
// match bit for bit, zeros' signs included, except where a rule leaves the sign open (a zero
// maximum of zeros of both signs, layernorm's and matmul's zeros). Ops computed by polynomial or
// library approximations (exp, log, sigmoid, tanh, gelu and its gradient, pow, the softmax family,
// layernorm) match finite results to a relative 1e-4 (accuracy is not what these rules are about,
// and gelu's 1 + erf cancels for negative x in PyTorch's float32 as in ours), results below the
// smallest normal float to within it with the same sign; every other op matches bit for bit. The
// float64 oracle's results, rounded to float, are held to the approximate rule. The instruction
// sets and the fused and unfused plans must agree with each other bit for bit.
//
// Also: gelu(x) is a zero or negative number with the sign bit set for every float x in [-10, 0),
// at every instruction set (an erf approximation that overshoots -1 makes the far tail positive).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/line_fn.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"
#include "test_util.hpp"

namespace synoros {
namespace {

using kernels::Isa;

// ---- PyTorch's records

struct Record {
  std::string kind, op;
  std::vector<int64_t> ints;                  // N, R, (R, target) or (M, K, N)
  std::vector<std::vector<uint64_t>> arrays;  // float bits, in the script's order
  std::string line;                           // for failure messages (truncated)
};

float as_float(uint64_t bits) {
  return std::bit_cast<float>(uint32_t(bits));
}
std::vector<float> as_floats(const std::vector<uint64_t>& bits) {
  std::vector<float> v;
  for (uint64_t b : bits) v.push_back(as_float(b));
  return v;
}

// How many integer fields follow the kind (and op), and the arrays' lengths from them.
bool layout_of(const std::string& kind, int& n_ints, bool& has_op) {
  has_op = kind == "unary" || kind == "binary" || kind == "reduce" || kind == "softmax" || kind == "binarygrad";
  if (kind == "xent")
    n_ints = 2;
  else if (kind == "matmul")
    n_ints = 3;
  else if (kind == "unary" || kind == "binary" || kind == "where" || kind == "reduce" ||
           kind == "maxgrad" || kind == "softmax" || kind == "layernorm" || kind == "dropout" ||
           kind == "cast" || kind == "binarygrad")
    n_ints = 1;
  else
    return false;
  return true;
}
std::vector<int64_t> array_sizes(const std::string& kind, const std::vector<int64_t>& n) {
  if (kind == "unary" || kind == "softmax" || kind == "layernorm" || kind == "cast")
    return {n[0], n[0]};
  if (kind == "binary" || kind == "dropout") return {n[0], n[0], n[0]};
  if (kind == "where" || kind == "binarygrad") return {n[0], n[0], n[0], n[0]};
  if (kind == "reduce") return {n[0], 1};
  if (kind == "maxgrad") return {1, n[0], n[0]};
  if (kind == "xent") return {n[0], 1};
  return {n[0] * n[1], n[1] * n[2], n[0] * n[2]};  // matmul
}

struct Records {
  bool ok = false;
  std::string why;  // when not ok: the reason to skip or fail
  bool skip = false;
  std::vector<Record> all;
};

// Runs the script once per process and parses its output.
const Records& torch_records() {
  static Records r = [] {
    Records out;
    namespace fs = std::filesystem;
    fs::path script = fs::path(__FILE__).parent_path() / "torch_special_values.py";
    if (!fs::exists("/usr/bin/python3")) {
      out.skip = true, out.why = "/usr/bin/python3 is not available";
      return out;
    }
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      out.skip = true, out.why = "/usr/bin/python3 cannot import torch";
      return out;
    }
    if (!fs::exists(script)) {
      out.skip = true,
      out.why = "the generator " + script.string() + " is not beside the test's source";
      return out;
    }
    testing::TempDir dir("nan_rules");
    std::string cmd = "/usr/bin/python3 '" + script.string() + "' > '" + dir.file("out.txt") +
                      "' 2> '" + dir.file("err.txt") + "'";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream err(dir.file("err.txt"));
      out.why = "the generator failed: " + std::string(std::istreambuf_iterator<char>(err), {});
      return out;
    }
    std::ifstream f(dir.file("out.txt"));
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream in(line);
      Record rec;
      rec.line = line.substr(0, 120);
      int n_ints = 0;
      bool has_op = false;
      in >> rec.kind;
      if (!layout_of(rec.kind, n_ints, has_op)) {
        out.why = "unknown record: " + rec.line;
        return out;
      }
      if (has_op) in >> rec.op;
      for (int k = 0; k < n_ints; ++k) {
        int64_t v = -1;
        in >> v;
        rec.ints.push_back(v);
      }
      for (int64_t size : array_sizes(rec.kind, rec.ints)) {
        std::vector<uint64_t> a;
        for (int64_t k = 0; k < size; ++k) {
          std::string t;
          in >> t;
          a.push_back(std::stoull(t, nullptr, 16));
        }
        rec.arrays.push_back(std::move(a));
      }
      std::string extra;
      if (!in || (in >> extra)) {
        out.why = "malformed record: " + rec.line;
        return out;
      }
      out.all.push_back(std::move(rec));
    }
    out.ok = !out.all.empty();
    if (!out.ok) out.why = "the generator printed no records";
    return out;
  }();
  return r;
}

// Skips the test when PyTorch is missing, fails it when the script misbehaves.
#define REQUIRE_TORCH_RECORDS()                  \
  const Records& records = torch_records();      \
  if (records.skip) GTEST_SKIP() << records.why; \
  ASSERT_TRUE(records.ok) << records.why

// ---- comparison

enum class Match {
  Exact,          // bit for bit (NaN: any NaN)
  ExactAnyZero,   // bit for bit, but a zero may come with either sign
  Approx,         // infinities bit for bit, finite values to 1e-4 with their sign
  ApproxAnyZero,  // as Approx, a zero of either sign
};

bool matches(float want, float got, Match m) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  bool any_zero = m == Match::ExactAnyZero || m == Match::ApproxAnyZero;
  if (any_zero && want == 0 && got == 0) return true;
  if (std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(got)) return true;
  if (m == Match::Exact || m == Match::ExactAnyZero) return false;
  if (std::isinf(want) || std::isinf(got)) return false;
  if (std::signbit(want) != std::signbit(got)) return false;
  // Below the smallest normal float: within it (a zero included, with its sign); above: 1e-4.
  const double tiny = double(std::numeric_limits<float>::min());
  double tol = std::fabs(double(want)) < tiny ? tiny : 1e-4 * std::fabs(double(want));
  return std::fabs(double(got) - double(want)) < tol;
}

std::string show(float v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g (0x%08x)", double(v), std::bit_cast<uint32_t>(v));
  return b;
}

// Both NaN, or the same bits.
bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

Match unary_match(const std::string& op) {
  static const char* approx[] = {"exp", "log", "gelu", "gelu_tanh", "sigmoid", "tanh"};
  for (const char* a : approx)
    if (op == a) return Match::Approx;
  return Match::Exact;
}
Match binary_match(const std::string& op) {
  return op == "pow" || op == "gelu_grad" || op == "gelu_tanh_grad" ? Match::Approx : Match::Exact;
}

int maps_of_arity(int arity) {
  int n = 0;
  for (size_t i = 0; i < kOpCount; ++i) n += op_info(Op(i)).has(kMap) && op_info(Op(i)).arity == arity;
  return n;
}

Op op_named(const std::string& name) {
  if (name == "amax") return Op::ReduceMax;  // PyTorch's name
  for (size_t i = 0; i < kOpCount; ++i)
    if (name == op_name(Op(i))) return Op(i);
  throw Error("nan_rules_test: no op named " + name);
}

// ---- running graphs

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (int(i) <= int(kernels::best_isa())) v.push_back(i);
  return v;
}

HostTensor f32_tensor(const Shape& s, const std::vector<float>& values) {
  HostTensor t(DType::F32, s);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = values[size_t(i)];
  return t;
}

using Feeds = std::map<ValueId, HostTensor>;

// One evaluation of `out`: the engine at an instruction set, fused or not, or the oracle
// (rounded to float).
struct Run {
  std::string name;
  std::vector<float> y;
  bool oracle = false;
};

// Runs `out` at every instruction set, with fusion on and off, and in the oracle. Every engine
// run must give the first one's bits (fusion folds operations into registers, never changes
// them); the caller checks each run against PyTorch.
std::vector<Run> run_everywhere(const Graph& g, ValueId out, const Feeds& feeds,
                                const std::string& what) {
  std::vector<Run> runs;
  for (bool fuse : {true, false}) {
    for (Isa isa : isas()) {
      testing::IsaScope at(isa);
      CompileOptions o;
      o.fuse = fuse;
      Plan plan(g, {out}, o);
      for (auto& [v, t] : feeds) plan.set_input(v, t);
      plan.run();
      HostTensor r = plan.read(out);
      Run run{std::string(kernels::isa_name(isa)) + (fuse ? " fused" : " unfused"), {}};
      for (int64_t i = 0; i < r.numel(); ++i) run.y.push_back(float(r.get(i)));
      for (size_t i = 0; i < run.y.size() && !runs.empty(); ++i)
        if (!same_bits(runs[0].y[i], run.y[i])) {
          ADD_FAILURE() << what << ": " << run.name << " gives " << show(run.y[i]) << " at " << i
                        << ", " << runs[0].name << " " << show(runs[0].y[i]);
          break;
        }
      runs.push_back(std::move(run));
    }
  }
  HostTensor ref = oracle_eval(g, {out}, feeds)[size_t(out)];
  Run o{"oracle", {}, true};
  for (int64_t i = 0; i < ref.numel(); ++i) o.y.push_back(float(ref.get(i)));
  runs.push_back(std::move(o));
  return runs;
}

// Checks every run's element i against want(i) under match(i); reports the first few misses.
template <class Want, class Rule>
void expect_runs(const std::vector<Run>& runs, Want want, Rule rule, const std::string& what) {
  for (const Run& r : runs) {
    int misses = 0;
    for (size_t i = 0; i < r.y.size(); ++i) {
      Match m = rule(i);
      // The oracle computes in float64: only its special values follow the float32 bits.
      if (r.oracle && m == Match::Exact) m = Match::Approx;
      if (r.oracle && m == Match::ExactAnyZero) m = Match::ApproxAnyZero;
      if (!matches(want(i), r.y[i], m) && ++misses <= 3)
        ADD_FAILURE() << what << " [" << r.name << "] element " << i << ": PyTorch "
                      << show(want(i)) << ", got " << show(r.y[i]);
    }
  }
}

std::vector<float> tiled(const std::vector<float>& v, size_t n) {
  std::vector<float> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = v[i % v.size()];
  return t;
}

// ---- elementwise ops

TEST(NanRules, UnaryOpsFollowPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "unary") continue;
    ++seen;
    SCOPED_TRACE(r.op);
    Op op = op_named(r.op);
    std::vector<float> x = as_floats(r.arrays[0]), want = as_floats(r.arrays[1]);
    // Long enough for whole vectors, the masked edge and several fused blocks.
    size_t n = x.size() * 29;
    Graph g;
    ValueId in = g.input(DType::F32, {int64_t(n)}, "x");
    Feeds feeds{{in, f32_tensor({int64_t(n)}, tiled(x, n))}};
    auto want_at = [&](size_t i) { return want[i % want.size()]; };
    auto rule = [&](size_t) { return unary_match(r.op); };
    expect_runs(run_everywhere(g, g.unary(op, in), feeds, r.op), want_at, rule, r.op);
    // Fused: the op reading its operand through a multiply by one folded into it (a staged line;
    // x * 1 is x for every x) and, for relu, the relu itself folded into an add of -0 (x + -0 is
    // x for every x, -0 included).
    Graph g2;
    ValueId in2 = g2.input(DType::F32, {int64_t(n)}, "x");
    ValueId staged = op == Op::Relu ? g2.binary(Op::Add, g2.unary(Op::Relu, in2), g2.scalar(-0.0))
                                    : g2.unary(op, g2.binary(Op::Mul, in2, g2.scalar(1.0)));
    Feeds feeds2{{in2, feeds.begin()->second}};
    expect_runs(run_everywhere(g2, staged, feeds2, r.op + " staged"), want_at, rule,
                r.op + " staged");
  }
  EXPECT_EQ(seen, maps_of_arity(1)) << "every unary map has a PyTorch record";
}

TEST(NanRules, BinaryOpsFollowPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "binary") continue;
    ++seen;
    SCOPED_TRACE(r.op);
    Op op = op_named(r.op);
    std::vector<float> a = as_floats(r.arrays[0]), b = as_floats(r.arrays[1]),
                       want = as_floats(r.arrays[2]);
    // The records hold all pairs of k values, a's value the row, b's the column.
    size_t k = size_t(std::lround(std::sqrt(double(a.size()))));
    ASSERT_EQ(k * k, a.size());
    std::vector<float> vals(b.begin(), b.begin() + int64_t(k));
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(same_bits(a[i], vals[i / k]) && same_bits(b[i], vals[i % k]))
          << "pairs out of order at " << i;
    }
    auto rule = [&](size_t) { return binary_match(r.op); };
    // Both operands contiguous, three copies of the pairs.
    {
      size_t n = a.size() * 3;
      Graph g;
      ValueId x = g.input(DType::F32, {int64_t(n)}, "a"),
              y = g.input(DType::F32, {int64_t(n)}, "b");
      Feeds feeds{{x, f32_tensor({int64_t(n)}, tiled(a, n))},
                  {y, f32_tensor({int64_t(n)}, tiled(b, n))}};
      expect_runs(
          run_everywhere(g, g.binary(op, x, y), feeds, r.op),
          [&](size_t i) { return want[i % want.size()]; }, rule, r.op);
    }
    // Broadcast: a [k, 1] against b [1, k] (a broadcast first operand along each line), and the
    // operands' roles swapped (a broadcast second operand).
    for (bool swap : {false, true}) {
      Graph g;
      Shape col{int64_t(k), 1}, row{1, int64_t(k)};
      ValueId x = g.input(DType::F32, swap ? row : col, "a"),
              y = g.input(DType::F32, swap ? col : row, "b");
      Feeds feeds{{x, f32_tensor(swap ? row : col, vals)}, {y, f32_tensor(swap ? col : row, vals)}};
      auto want_at = [&](size_t i) { return swap ? want[(i % k) * k + i / k] : want[i]; };
      std::string what = r.op + (swap ? " broadcast b" : " broadcast a");
      expect_runs(run_everywhere(g, g.binary(op, x, y), feeds, what), want_at, rule, what);
    }
  }
  EXPECT_EQ(seen, maps_of_arity(2)) << "every binary map has a PyTorch record";
}

TEST(NanRules, WhereFollowsPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "where") continue;
    ++seen;
    std::vector<float> want = as_floats(r.arrays[3]);
    size_t n = want.size() * 2;
    Graph g;
    Feeds feeds;
    std::vector<ValueId> in;
    for (int k = 0; k < 3; ++k) {
      in.push_back(g.input(DType::F32, {int64_t(n)}, "in" + std::to_string(k)));
      feeds[in.back()] = f32_tensor({int64_t(n)}, tiled(as_floats(r.arrays[size_t(k)]), n));
    }
    expect_runs(
        run_everywhere(g, g.add(Op::Where, in), feeds, "where"),
        [&](size_t i) { return want[i % want.size()]; }, [](size_t) { return Match::Exact; },
        "where");
  }
  EXPECT_EQ(seen, 1);
}

// ---- reductions and max's gradient

// A row of r values laid out so that a reduction over `axes` of `shape` reduces each window to
// the row's result, with each window's elements in the row's order.
struct Layout {
  std::string name;
  Shape shape;
  std::vector<int64_t> axes;
  std::vector<float> x;  // filled from the row
};

// x[i0, w, i1, k] = row[i0 * b + i1] over shape [a, w, b] or [a, w, b, kept]; [1, r]; [r, w].
std::vector<Layout> layouts(const std::vector<float>& row) {
  int64_t r = int64_t(row.size());
  std::vector<Layout> out;
  out.push_back({"row", {3, r}, {1}, tiled(row, size_t(3 * r))});
  for (int64_t w : {5, 19, 35, 600}) {  // column sums: short, vector tiles and tails, streamed rows
    Layout l{"columns " + std::to_string(w), {r, w}, {0}, {}};
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < w; ++j) l.x.push_back(row[size_t(k)]);
    out.push_back(std::move(l));
  }
  int64_t b = r % 2 == 0 ? 2 : 1, a = r / b;
  for (int64_t kept :
       {int64_t(0), int64_t(3)}) {  // [a, 9, b] (tiles, pooling) and [a, 9, b, 3] (scattered)
    Layout l{
        kept ? "scattered" : "tiles", kept ? Shape{a, 9, b, kept} : Shape{a, 9, b}, {0, 2}, {}};
    for (int64_t i0 = 0; i0 < a; ++i0)
      for (int64_t w = 0; w < 9; ++w)
        for (int64_t i1 = 0; i1 < b; ++i1)
          for (int64_t k = 0; k < std::max<int64_t>(kept, 1); ++k)
            l.x.push_back(row[size_t(i0 * b + i1)]);
    out.push_back(std::move(l));
  }
  return out;
}
// The row index of element i of a layout's input.
int64_t row_index(const Layout& l, int64_t i) {
  const Shape& s = l.shape;
  if (l.name == "row") return i % s[1];
  if (s.size() == 2) return i / s[1];
  int64_t kept = s.size() == 4 ? s[3] : 1;
  int64_t i1 = i / kept % s[2], i0 = i / (kept * s[2] * s[1]);
  return i0 * s[2] + i1;
}

bool zeros_of_both_signs(const std::vector<float>& row) {
  bool pos = false, neg = false;
  for (float v : row)
    if (v == 0) (std::signbit(v) ? neg : pos) = true;
  return pos && neg;
}

TEST(NanRules, ReductionsFollowPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "reduce") continue;
    ++seen;
    Op op = op_named(r.op);
    std::vector<float> row = as_floats(r.arrays[0]);
    float want = as_float(r.arrays[1][0]);
    // A zero maximum of zeros of both signs may be either zero (PyTorch's depends on where the
    // zeros sit); a mean may round its division differently from PyTorch's.
    Match m = op == Op::ReduceMax && zeros_of_both_signs(row) ? Match::ExactAnyZero
              : op == Op::Mean                                ? Match::Approx
                                                              : Match::Exact;
    for (const Layout& l : layouts(row)) {
      for (bool prologue : {false, true}) {  // a fused elementwise producer: x * 1
        std::string what = r.line.substr(0, 60) + " " + l.name + (prologue ? " after x * 1" : "");
        Graph g;
        ValueId x = g.input(DType::F32, l.shape, "x");
        ValueId src = prologue ? g.binary(Op::Mul, x, g.scalar(1.0)) : x;
        ValueId y = g.add(op, {src}, attr::Reduce{l.axes});
        Feeds feeds{{x, f32_tensor(l.shape, l.x)}};
        expect_runs(
            run_everywhere(g, y, feeds, what), [&](size_t) { return want; },
            [&](size_t) { return m; }, what);
      }
    }
  }
  EXPECT_GT(seen, 30);
}

TEST(NanRules, MaxGradientFollowsPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "maxgrad") continue;
    ++seen;
    float gv = as_float(r.arrays[0][0]);
    std::vector<float> row = as_floats(r.arrays[1]), want = as_floats(r.arrays[2]);
    for (const Layout& l : layouts(row)) {
      std::string what = r.line.substr(0, 60) + " " + l.name;
      Graph g;
      ValueId x = g.input(DType::F32, l.shape, "x");
      const attr::Reduce at{l.axes};
      ValueId y = g.add(Op::ReduceMax, {x}, at);
      ValueId go = g.input(DType::F32, g.shape(y), "g");
      ValueId dx = g.add(Op::ReduceMaxGrad, {x, y, go}, at);
      Feeds feeds{{x, f32_tensor(l.shape, l.x)},
                  {go, f32_tensor(g.shape(y), std::vector<float>(size_t(numel(g.shape(y))), gv))}};
      expect_runs(
          run_everywhere(g, dx, feeds, what),
          [&](size_t i) { return want[size_t(row_index(l, int64_t(i)))]; },
          [](size_t) { return Match::Exact; }, what);
    }
  }
  EXPECT_GT(seen, 40);
}

// maximum and minimum's gradients: ties split it, a NaN operand gives both all of it.
TEST(NanRules, MaxMinGradientsFollowPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "binarygrad") continue;
    ++seen;
    SCOPED_TRACE(r.op);
    std::vector<float> a = as_floats(r.arrays[0]), b = as_floats(r.arrays[1]), da = as_floats(r.arrays[2]),
                       db = as_floats(r.arrays[3]);
    int64_t n = int64_t(a.size());
    Graph g;
    ValueId x = g.input(DType::F32, {n}, "a"), y = g.input(DType::F32, {n}, "b");
    ValueId loss = g.sum(g.binary(op_named(r.op), x, y), {});
    std::vector<ValueId> d = grad(g, loss, {x, y});
    Feeds feeds{{x, f32_tensor({n}, a)}, {y, f32_tensor({n}, b)}};
    for (int k = 0; k < 2; ++k) {
      const std::vector<float>& want = k == 0 ? da : db;
      std::string what = r.op + (k == 0 ? " d/da" : " d/db");
      expect_runs(
          run_everywhere(g, d[size_t(k)], feeds, what), [&](size_t i) { return want[i]; },
          [](size_t) { return Match::Exact; }, what);
    }
  }
  EXPECT_EQ(seen, 2);
}

// ---- composites

TEST(NanRules, SoftmaxFamilyFollowsPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    if (r.kind != "softmax" && r.kind != "xent" && r.kind != "layernorm") continue;
    ++seen;
    std::vector<float> row = as_floats(r.arrays[0]), want = as_floats(r.arrays.back());
    int64_t n = int64_t(row.size());
    std::string what = r.line.substr(0, 80);
    if (r.kind == "xent") {
      for (int64_t copies : {1, 3}) {
        Graph g;
        ValueId x = g.input(DType::F32, {copies, n}, "logits");
        ValueId t = g.input(DType::I64, {copies}, "target");
        HostTensor tt(DType::I64, {copies});
        for (int64_t i = 0; i < copies; ++i) tt.set(i, double(r.ints[1]));
        Feeds feeds{{x, f32_tensor({copies, n}, tiled(row, size_t(copies * n)))}, {t, tt}};
        expect_runs(
            run_everywhere(g, g.add(Op::CrossEntropy, {x, t}), feeds, what),
            [&](size_t) { return want[0]; }, [](size_t) { return Match::Approx; }, what);
      }
      continue;
    }
    // Along the last axis (contiguous lines) and along the first (strided lines, 3 of them).
    for (bool strided : {false, true}) {
      if (r.kind == "layernorm" && strided) continue;  // layernorm normalises the last axis only
      Shape s = strided ? Shape{n, 3} : Shape{2, n};
      auto row_at = [&](int64_t i) {
        return strided ? i / 3 : i % n;
      };  // element i's place in the row
      std::vector<float> xv;
      for (int64_t i = 0; i < numel(s); ++i) xv.push_back(row[size_t(row_at(i))]);
      Graph g;
      ValueId x = g.input(DType::F32, s, "x");
      ValueId y;
      if (r.kind == "layernorm") {
        y = g.add(Op::LayerNorm, {x}, attr::Eps{1e-5});
      } else {
        y = g.add(op_named(r.op), {x}, attr::Axis{strided ? 0 : 1});
      }
      Feeds feeds{{x, f32_tensor(s, xv)}};
      // Layernorm's zeros come out of (x - mean) * r, whose sign PyTorch's moments do not share.
      Match m = r.kind == "layernorm" ? Match::ApproxAnyZero : Match::Approx;
      expect_runs(
          run_everywhere(g, y, feeds, what),
          [&](size_t i) { return want[size_t(row_at(int64_t(i)))]; }, [&](size_t) { return m; },
          what);
    }
  }
  EXPECT_GT(seen, 40);
}

TEST(NanRules, MatmulDropoutAndCastFollowPyTorch) {
  REQUIRE_TORCH_RECORDS();
  int seen = 0;
  for (const Record& r : records.all) {
    std::string what = r.line.substr(0, 80);
    if (r.kind == "matmul") {
      ++seen;
      int64_t M = r.ints[0], K = r.ints[1], N = r.ints[2];
      Graph g;
      ValueId a = g.input(DType::F32, {M, K}, "a"), b = g.input(DType::F32, {K, N}, "b");
      Feeds feeds{{a, f32_tensor({M, K}, as_floats(r.arrays[0]))},
                  {b, f32_tensor({K, N}, as_floats(r.arrays[1]))}};
      std::vector<float> want = as_floats(r.arrays[2]);
      // A zero sum of products may be either zero (the order of the additions decides).
      expect_runs(
          run_everywhere(g, g.matmul(a, b), feeds, what), [&](size_t i) { return want[i]; },
          [](size_t) { return Match::ExactAnyZero; }, what);
    } else if (r.kind == "dropout") {
      ++seen;
      std::vector<float> x = as_floats(r.arrays[0]), kept = as_floats(r.arrays[1]),
                         dropped = as_floats(r.arrays[2]);
      size_t n = x.size() * 40;
      Graph g;
      ValueId in = g.input(DType::F32, {int64_t(n)}, "x");
      const attr::Dropout at{0.5, 7};
      ValueId y = g.add(Op::Dropout, {in}, at);
      // The mask: where the same dropout keeps a tensor of ones.
      std::vector<bool> keep;
      {
        Plan plan(g, {y});
        plan.set_input(in, f32_tensor({int64_t(n)}, std::vector<float>(n, 1.0f)));
        plan.run();
        HostTensor ones = plan.read(y);
        for (size_t i = 0; i < n; ++i) keep.push_back(ones.get(int64_t(i)) != 0);
      }
      std::vector<int> kept_count(x.size()), dropped_count(x.size());
      for (size_t i = 0; i < n; ++i) ++(keep[i] ? kept_count : dropped_count)[i % x.size()];
      for (size_t v = 0; v < x.size(); ++v)
        ASSERT_TRUE(kept_count[v] > 0 && dropped_count[v] > 0) << v;
      Feeds feeds{{in, f32_tensor({int64_t(n)}, tiled(x, n))}};
      expect_runs(
          run_everywhere(g, y, feeds, what),
          [&](size_t i) { return (keep[i] ? kept : dropped)[i % x.size()]; },
          [](size_t) { return Match::Exact; }, what);
    } else if (r.kind == "cast") {
      ++seen;
      std::vector<float> x = as_floats(r.arrays[0]);
      for (Isa isa : isas()) {
        testing::IsaScope at(isa);
        Graph g;
        ValueId in = g.input(DType::F32, {int64_t(x.size())}, "x");
        ValueId wide = g.cast(in, DType::F64), back = g.cast(wide, DType::F32);
        Plan plan(g, {wide, back});
        plan.set_input(in, f32_tensor({int64_t(x.size())}, x));
        plan.run();
        HostTensor w = plan.read(wide), b = plan.read(back);
        for (size_t i = 0; i < x.size(); ++i) {
          double want = std::bit_cast<double>(r.arrays[1][i]), got = w.data<double>()[i];
          EXPECT_TRUE((std::isnan(want) && std::isnan(got)) ||
                      std::bit_cast<uint64_t>(want) == std::bit_cast<uint64_t>(got))
              << "cast " << show(x[i]) << " to f64: " << got;
          EXPECT_TRUE(same_bits(x[i], b.data<float>()[i])) << "cast back " << show(x[i]);
        }
      }
    }
  }
  EXPECT_EQ(seen, 4);
}

// ---- gelu's negative tail

// Every float in [-10, 0) through each instruction set's gelu line: the result is <= 0 with the
// sign bit set (a zero is -0), and no smaller than x (gelu(x) = x (1 + erf) / 2, 1 + erf <= 2).
// The scalar line calls fmaf and runs into denormal arithmetic near 0 (about 40 ns a float): it
// takes every float of [-10, -2], where 1 + erf(x / sqrt 2) comes within rounding of 0, and
// every 61st of (-2, 0), where 1 + erf > 0.04; SYNOROS_EXHAUSTIVE=1 makes it take every float
// too. (vector_math_test compares the vector lines with the scalar definition bit for bit.)
bool gelu_tail_ok(float x, float y) {
  return (y <= 0.0f) & std::signbit(y) & (y >= x);
}

TEST(NanRules, GeluIsNonPositiveOnEveryNegativeFloatDownToMinusTen) {
  const uint32_t first = 0x80000001u, last = 0xC1200000u;  // -denorm_min .. -10
  const uint32_t minus_two = 0xC0000000u;
  ASSERT_EQ(std::bit_cast<float>(last), -10.0f);
  ASSERT_EQ(std::bit_cast<float>(minus_two), -2.0f);
  bool exhaustive = config::flag("SYNOROS_EXHAUSTIVE");
  for (Isa isa : isas()) {
    kernels::LineFn line = isa == Isa::Avx512 ? kernels::avx512::pick_line(Op::Gelu, DType::F32)
                           : isa == Isa::Avx2 ? kernels::avx2::pick_line(Op::Gelu, DType::F32)
                                              : kernels::scalar::pick_line(Op::Gelu, DType::F32);
    ASSERT_NE(line, nullptr);
    uint64_t near_zero_step = isa == Isa::Scalar && !exhaustive ? 61 : 1;
    const int64_t n = 1 << 16;
    std::vector<float> x(n), y(n);
    const void* in[1] = {x.data()};
    const int64_t s[1] = {1};
    int64_t bad = 0;
    for (uint64_t u = first; u <= last;) {
      int64_t m = 0;
      for (; m < n && u <= last; ++m) {
        x[size_t(m)] = std::bit_cast<float>(uint32_t(u));
        u += u < minus_two ? near_zero_step : 1;
      }
      line(y.data(), in, s, m);
      int64_t miss = 0;  // counted without branches first (the common case), reported after
      for (int64_t i = 0; i < m; ++i) miss += !gelu_tail_ok(x[size_t(i)], y[size_t(i)]);
      for (int64_t i = 0; i < m && miss > 0; ++i)
        if (!gelu_tail_ok(x[size_t(i)], y[size_t(i)]) && ++bad <= 5)
          ADD_FAILURE() << kernels::isa_name(isa) << ": gelu(" << show(x[size_t(i)])
                        << ") = " << show(y[size_t(i)]);
    }
    EXPECT_EQ(bad, 0) << kernels::isa_name(isa);
  }
}

// The same property through a plan at every instruction set, on the tail the rational erf had
// overshot (x / sqrt 2 in [-4, -3.67]), fused after a multiply by one and alone.
TEST(NanRules, GeluTailKeepsItsSignThroughPlans) {
  std::vector<float> xs;
  for (float v = -5.7f; v <= -5.2f; v = std::nextafter(v, 0.0f)) xs.push_back(v);
  xs.push_back(-5.643f);
  int64_t n = int64_t(xs.size());
  for (Isa isa : isas()) {
    testing::IsaScope at(isa);
    for (bool staged : {false, true}) {
      Graph g;
      ValueId x = g.input(DType::F32, {n}, "x");
      ValueId y = g.unary(Op::Gelu, staged ? g.binary(Op::Mul, x, g.scalar(1.0)) : x);
      Plan plan(g, {y});
      plan.set_input(x, f32_tensor({n}, xs));
      plan.run();
      HostTensor out = plan.read(y);
      int bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        float v = out.data<float>()[i];
        if (!(v <= 0.0f && std::signbit(v)) && ++bad <= 3)
          ADD_FAILURE() << kernels::isa_name(isa) << (staged ? " staged" : "") << ": gelu("
                        << show(xs[size_t(i)]) << ") = " << show(v);
      }
    }
  }
}

}  // namespace
}  // namespace synoros
