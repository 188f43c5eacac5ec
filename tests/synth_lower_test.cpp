// Synthesized operators lowered to engine tape ops: forward checked against a direct float64
// evaluation of the index expressions and against the oracle; gradients against central finite
// differences; training through the Tensor API; PyTorch export run by Debian's torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <unistd.h>

#include "synoros/synth.hpp"
#include "test_util.hpp"

namespace synoros::synth {
namespace {

Spec tiny_conv() {
  return parse_spec(
      "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:4, g=2:3, s=2:1;"
      "bind: N=2, C_in=4, C_out=4, H=12, W=12; bind: N=1, C_in=8, C_out=8, H=12, W=14;"
      "cap: C_in=2, C_out=2, H=0, W=0; fixed: N");
}

// A deterministic selection of operators covering every kind of index expression.
std::vector<Operator> selection(Synthesizer& syn) {
  EnumResult r = enumerate(syn);
  std::vector<Operator> out;
  std::set<int> kinds_seen;
  std::set<size_t> weights_seen;
  for (size_t i = 0; i < r.operators.size(); ++i) {
    const Operator& op = r.operators[i];
    bool fresh = !weights_seen.count(op.weights.size());
    for (const IxNode& n : op.nodes) fresh = fresh || !kinds_seen.count(int(n.kind));
    bool dropped = false;  // a merge half expanded away (tile / repeat)
    for (const IxNode& n : op.nodes)
      if (n.kind == Kind::Div || n.kind == Kind::Mod) {
        int other = 0;
        for (const IxNode& m : op.nodes) other += (m.kind != n.kind && (m.kind == Kind::Div || m.kind == Kind::Mod) && m.a == n.a);
        dropped = dropped || other == 0;
      }
    if (fresh || (dropped && out.size() < 16) || (i % 97 == 0 && out.size() < 24)) {
      out.push_back(op);
      weights_seen.insert(op.weights.size());
      for (const IxNode& n : op.nodes) kinds_seen.insert(int(n.kind));
    }
  }
  for (Kind k : {Kind::Split, Kind::Div, Kind::Mod, Kind::Shift, Kind::Stride, Kind::Unfold})
    EXPECT_TRUE(kinds_seen.count(int(k))) << "no operator with index kind " << int(k);
  EXPECT_TRUE(weights_seen.count(2));
  return out;
}

HostTensor f64(const HostTensor& h) { return testing::to_f64(h); }

TEST(SynthLower, ForwardMatchesDirectEvaluationAndOracle) {
  Options o;
  o.max_depth = 5;
  o.max_reductions = 3;
  Synthesizer syn(tiny_conv(), o);
  auto ops = selection(syn);
  ASSERT_GE(ops.size(), 10u);
  for (const Operator& op : ops) {
    SCOPED_TRACE(formula(syn.spec(), op));
    for (size_t b = 0; b < syn.spec().bindings.size(); ++b) {
      Binding bind = binding(syn.spec(), b);
      Graph g;
      Shape xs = syn.spec().shape(syn.spec().input, b);
      ValueId x = g.input(DType::F32, xs, "x");
      std::vector<ValueId> w;
      auto wsh = weight_shapes(syn.spec(), op, bind);
      for (size_t i = 0; i < wsh.size(); ++i) w.push_back(g.input(DType::F32, wsh[i], "w" + std::to_string(i)));
      ValueId y = lower(syn.spec(), op, bind, g, x, w);
      EXPECT_EQ(g.shape(y), syn.spec().shape(syn.spec().output, b));
      std::map<ValueId, HostTensor> feeds;
      feeds[x] = testing::random_tensor({DType::F32, xs}, 11 + b);
      std::vector<HostTensor> wv;
      for (size_t i = 0; i < w.size(); ++i) {
        feeds[w[i]] = testing::random_tensor({DType::F32, wsh[i]}, 23 + i);
        wv.push_back(feeds[w[i]]);
      }
      HostTensor ref = reference_eval(syn.spec(), op, bind, feeds[x], wv);
      HostTensor orc = oracle_eval(g, {y}, feeds)[size_t(y)];
      ASSERT_EQ(ref.numel(), orc.numel());
      for (int64_t i = 0; i < ref.numel(); ++i) ASSERT_NEAR(ref.get(i), orc.get(i), 1e-9 * (1 + std::fabs(ref.get(i))));
      // The fast path (kernels chosen by the engine) against the oracle.
      CompileOptions keep;
      keep.keep_intermediates = true;
      Plan plan(g, {y}, keep);
      for (auto& [id, v] : feeds) plan.set_input(id, v);
      plan.run();
      VerifyResult vr = verify(plan, true);
      EXPECT_TRUE(vr.ok) << vr.report;
    }
  }
}

TEST(SynthLower, GradientsMatchFiniteDifferences) {
  Options o;
  o.max_depth = 5;
  o.max_reductions = 3;
  Synthesizer syn(tiny_conv(), o);
  auto ops = selection(syn);
  Binding bind = binding(syn.spec(), 0);
  for (const Operator& op : ops) {
    SCOPED_TRACE(formula(syn.spec(), op));
    Graph g;
    Shape xs = syn.spec().shape(syn.spec().input, 0);
    ValueId x = g.input(DType::F64, xs, "x");
    std::vector<ValueId> wrt = {x};
    auto wsh = weight_shapes(syn.spec(), op, bind);
    for (size_t i = 0; i < wsh.size(); ++i) wrt.push_back(g.input(DType::F64, wsh[i], "w" + std::to_string(i)));
    ValueId y = lower(syn.spec(), op, bind, g, x, std::vector<ValueId>(wrt.begin() + 1, wrt.end()));
    ValueId c = g.constant(f64(testing::random_tensor({DType::F32, g.shape(y)}, 5)));
    ValueId loss = g.sum(g.binary(Op::Mul, y, c), {});
    std::vector<ValueId> grads = grad(g, loss, wrt);
    std::map<ValueId, HostTensor> feeds;
    for (size_t i = 0; i < wrt.size(); ++i) feeds[wrt[i]] = f64(testing::random_tensor({DType::F32, g.shape(wrt[i])}, 31 + i));
    std::vector<HostTensor> ad = oracle_eval(g, grads, feeds);
    for (size_t v = 0; v < wrt.size(); ++v) {
      const HostTensor& gv = ad[size_t(grads[v])];
      double ss = 0;
      for (int64_t i = 0; i < gv.numel(); ++i) ss += gv.get(i) * gv.get(i);
      double rms = std::sqrt(ss / double(std::max<int64_t>(1, gv.numel())));
      HostTensor base = feeds[wrt[v]];
      int64_t step = std::max<int64_t>(1, base.numel() / 12);
      for (int64_t i = 0; i < base.numel(); i += step) {
        double x0 = base.get(i), h = 0.5;  // the loss is linear in each element: exact
        auto f = [&](double val) {
          auto fd = feeds;
          HostTensor t = testing::to_f64(base);  // a deep copy: HostTensor copies share storage
          t.set(i, val);
          fd[wrt[v]] = t;
          return oracle_eval(g, {loss}, fd)[size_t(loss)].get(0);
        };
        double num = (f(x0 + h) - f(x0 - h)) / (2 * h);
        EXPECT_NEAR(gv.get(i), num, 1e-6 * (std::fabs(num) + rms) + 1e-8) << "operand " << v << " element " << i;
      }
    }
  }
}

TEST(SynthLower, TrainsThroughTheTensorApi) {
  // Fit a synthesized conv-like operator to a fixed random target: the loss must fall.
  Options o;
  o.max_depth = 6;
  o.max_weights = 1;
  o.allow_shift = o.allow_stride = false;
  Synthesizer syn(tiny_conv(), o);
  EnumResult r = enumerate(syn);
  const Operator* conv = nullptr;
  for (const Operator& op : r.operators)
    if (op.weights.size() == 1 && op.weights[0].size() == 4 && op.depth == 6) {
      int unf = 0;
      for (const IxNode& n : op.nodes) unf += n.kind == Kind::Unfold;
      if (unf == 2 && !conv) conv = &op;
    }
  ASSERT_NE(conv, nullptr);
  Binding bind = binding(syn.spec(), 0);
  auto w = init_weights(syn.spec(), *conv, bind, 3);
  // Fan-in scaled initialization keeps the output scale near the input's.
  Tensor x = Tensor::randn(syn.spec().shape(syn.spec().input, 0), 9);
  Tensor y0 = apply(syn.spec(), *conv, bind, x, w);
  double var = 0;
  for (float v : y0.to_vector()) var += double(v) * v;
  var /= double(y0.numel());
  EXPECT_GT(var, 0.2);
  EXPECT_LT(var, 2.0);
  Tensor target = Tensor::randn(y0.shape(), 10);
  for (auto& t : w) t.requires_grad();
  optim::SGD opt(w, 0.05);
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    Tensor loss = mse_loss(apply(syn.spec(), *conv, bind, x, w), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first * 0.98);
}

// A block-diagonal operator (x read at o / B, the output's group) is a batched product: no op
// repeats x along the output, the weights are viewed split, and the values are the float64
// reference's. For the grouped linear layer and the grouped 3x3 convolution.
TEST(SynthLower, GroupedOperatorsAreBatchedProductsNotRepeats) {
  Spec lin = parse_spec("input: N, C_in; output: N, C_out; coef: g=4:3; bind: N=3, C_in=16, C_out=24; fixed: N");
  Spec conv = parse_spec("input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:2, g=2:2; "
                         "bind: N=2, C_in=8, C_out=4, H=5, W=6; fixed: N");
  for (const auto& [spec, name] : {std::pair<Spec, std::string>{lin, "grouped linear (g groups)"},
                                   {conv, "grouped kxk (g groups)"}}) {
    SCOPED_TRACE(name);
    const Operator* op = nullptr;
    std::vector<KnownFamily> fams = known_families(spec);
    for (const KnownFamily& f : fams)
      if (f.name == name) op = &f.op;
    ASSERT_NE(op, nullptr);
    Binding bind = binding(spec, 0);
    Graph g;
    ValueId x = g.input(DType::F32, spec.shape(spec.input, 0), "x");
    std::vector<ValueId> w;
    for (const Shape& s : weight_shapes(spec, *op, bind)) w.push_back(g.input(DType::F32, s, "w"));
    lower(spec, *op, bind, g, x, w);
    int64_t largest = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NE(g.node(ValueId(i)).op, Op::Expand) << g.to_string();
      largest = std::max(largest, numel(g.shape(ValueId(i))));
    }
    // Nothing larger than x or a window of x (9 taps) is made: no copy of x per output channel.
    EXPECT_LE(largest, 9 * numel(spec.shape(spec.input, 0))) << g.to_string();
    HostTensor xv = testing::random_tensor({DType::F32, spec.shape(spec.input, 0)}, 3);
    std::vector<HostTensor> wv;
    std::vector<Tensor> wt;
    for (const Shape& s : weight_shapes(spec, *op, bind))
      wv.push_back(testing::random_tensor({DType::F32, s}, 4 + wv.size())), wt.push_back(Tensor::from(wv.back()));
    HostTensor got = apply(spec, *op, bind, Tensor::from(xv), wt).value();
    HostTensor want = reference_eval(spec, *op, bind, xv, wv);
    ASSERT_EQ(got.shape, want.shape);
    for (int64_t i = 0; i < got.numel(); ++i) EXPECT_NEAR(got.get(i), want.get(i), 1e-4) << i;
  }
}

TEST(SynthLower, BadInputsRaiseErrors) {
  Synthesizer syn(tiny_conv());
  Options o;
  o.max_depth = 3;
  Synthesizer s3(tiny_conv(), o);
  EnumResult r = enumerate(s3);
  ASSERT_FALSE(r.operators.empty());
  const Operator& op = r.operators[0];
  Binding bind = binding(syn.spec(), 0);
  Graph g;
  ValueId x = g.input(DType::F32, {2, 4, 6, 5}, "x");
  EXPECT_THROW(lower(syn.spec(), op, bind, g, x, {}), Error);
  EXPECT_THROW(binding(syn.spec(), 7), Error);
}

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

void write_raw(const std::string& path, const HostTensor& t) {
  std::ofstream f(path, std::ios::binary);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = float(t.get(i));
    f.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
}

TEST(SynthExport, FormulaNamesEveryPart) {
  Options o;
  o.max_depth = 5;
  Synthesizer syn(tiny_conv(), o);
  EnumResult r = enumerate(syn, true, 2000);
  for (size_t i = 0; i < r.operators.size(); i += 37) {
    std::string f = formula(syn.spec(), r.operators[i]);
    EXPECT_EQ(f.rfind("y[n,c_out,h,w] = ", 0), 0u) << f;
    EXPECT_NE(f.find("x["), std::string::npos);
    for (size_t w = 0; w < r.operators[i].weights.size(); ++w)
      EXPECT_NE(f.find("W" + std::to_string(w + 1) + "["), std::string::npos) << f;
  }
}

// Each operator exported as a PyTorch module (binding i % bindings), run by /usr/bin/python3 in
// float64 on the same input and weights, equals the engine's float32 output within `tol` of the
// largest output magnitude.
void expect_exports_match(const Spec& spec, const std::vector<Operator>& ops, const std::string& tag,
                          double tol = 1e-5) {
  std::string dir = ::testing::TempDir() + "synth_export_" + tag + "_" + std::to_string(::getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  // One Python run checks every operator: module source, weights and input written here.
  std::ofstream runner(dir + "/run.py");
  runner << "import importlib.util, sys, numpy as np, torch\n"
            "torch.set_grad_enabled(False)\n"
            "d = sys.argv[1]\n"
            "for i in range(int(sys.argv[2])):\n"
            "    spec = importlib.util.spec_from_file_location('m%d' % i, '%s/op%d.py' % (d, i))\n"
            "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "    mod = m.SynthOp().double()\n"
            "    meta = open('%s/op%d.shapes' % (d, i)).read().split('\\n')\n"
            "    shapes = [tuple(int(v) for v in line.split()) for line in meta if line.strip()]\n"
            "    x = torch.from_numpy(np.fromfile('%s/x%d.bin' % (d, i), dtype=np.float32).astype(np.float64).reshape(shapes[0]))\n"
            "    for j, p in enumerate(mod.parameters()):\n"
            "        p.copy_(torch.from_numpy(np.fromfile('%s/w%d_%d.bin' % (d, i, j), dtype=np.float32).astype(np.float64).reshape(p.shape)))\n"
            "    y = mod(x).contiguous()\n"
            "    y.numpy().astype(np.float32).tofile('%s/y%d.bin' % (d, i))\n";
  runner.close();
  std::vector<HostTensor> engine_out;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Operator& op = ops[i];
    size_t b = i % spec.bindings.size();
    Binding bind = binding(spec, b);
    std::ofstream(dir + "/op" + std::to_string(i) + ".py") << pytorch_module(spec, op, bind);
    Shape xs = spec.shape(spec.input, b);
    HostTensor xv = testing::random_tensor({DType::F32, xs}, 100 + i);
    write_raw(dir + "/x" + std::to_string(i) + ".bin", xv);
    std::ofstream meta(dir + "/op" + std::to_string(i) + ".shapes");
    for (int64_t v : xs) meta << v << " ";
    meta << "\n";
    auto wsh = weight_shapes(spec, op, bind);
    std::vector<Tensor> wt;
    for (size_t j = 0; j < wsh.size(); ++j) {
      HostTensor wv = testing::random_tensor({DType::F32, wsh[j]}, 200 + 10 * i + j);
      write_raw(dir + "/w" + std::to_string(i) + "_" + std::to_string(j) + ".bin", wv);
      wt.push_back(Tensor::from(wv));
    }
    engine_out.push_back(apply(spec, op, bind, Tensor::from(xv), wt).value());
  }
  std::string cmd = "/usr/bin/python3 " + dir + "/run.py " + dir + " " + std::to_string(ops.size()) + " 2>" + dir + "/err.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "python failed; see " << dir << "/err.txt";
  for (size_t i = 0; i < ops.size(); ++i) {
    SCOPED_TRACE(formula(spec, ops[i]));
    std::ifstream f(dir + "/y" + std::to_string(i) + ".bin", std::ios::binary);
    const HostTensor& e = engine_out[i];
    double scale = 0;
    for (int64_t k = 0; k < e.numel(); ++k) scale = std::max(scale, std::fabs(e.get(k)));
    for (int64_t k = 0; k < e.numel(); ++k) {
      float v = 0;
      ASSERT_TRUE(f.read(reinterpret_cast<char*>(&v), sizeof v)) << "short output " << i;
      ASSERT_NEAR(double(v), e.get(k), tol * (1 + scale)) << "op " << i << " element " << k;
    }
  }
  if (std::system(("rm -rf " + dir).c_str()) != 0) ADD_FAILURE() << "cleanup failed";
}

TEST(SynthExport, PyTorchModuleMatchesTheEngine) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  Options o;
  o.max_depth = 5;
  o.max_reductions = 3;
  Synthesizer syn(tiny_conv(), o);
  expect_exports_match(syn.spec(), selection(syn), "conv");
}

// Linear layers [N, C_in] -> [N, C_out] (the GPT's projections): every 7th operator to depth 6
// of at most 2,048 products per output, and the known families.
TEST(SynthExport, LinearOperatorsExportToo) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  Spec spec = parse_spec("input: N, C_in; output: N, C_out; coef: g=4:3, h=2:2; bind: N=3, C_in=16, C_out=48; "
                         "bind: N=5, C_in=64, C_out=16; cap: C_in=4, C_out=4; fixed: N");
  Options o;
  o.max_depth = 6;
  Synthesizer syn(spec, o);
  EnumResult r = enumerate(syn, true);
  std::vector<Operator> ops;
  // Operators whose outputs sum at most 2,048 products at both bindings (some sum C_in²·C_out·g
  // of them, where float32 rounding alone exceeds any fixed tolerance).
  auto small = [&](const Operator& op) {
    for (size_t b = 0; b < spec.bindings.size(); ++b) {
      Shape y = spec.shape(spec.output, b);
      if (stats(spec, op, binding(spec, b)).flops > 2.0 * 2048 * double(y[0] * y[1])) return false;
    }
    return true;
  };
  for (size_t i = 0, k = 0; i < r.operators.size(); ++i)
    if (small(r.operators[i]) && k++ % 7 == 0) ops.push_back(r.operators[i]);
  for (const KnownFamily& f : known_families(spec)) ops.push_back(f.op);
  ASSERT_GT(ops.size(), 100u);
  expect_exports_match(spec, ops, "linear", 1e-4);
}

}  // namespace
}  // namespace synoros::synth
