// The 3x3 convolution op (Winograd's F(4x4, 3x3)) through nn::conv2d: the same bits on every
// instruction set and thread count, every value within float64's bounds (forward and both
// gradients, the input gradient being the flipped form of the op), in fast mode next to
// oneDNN's convolutions, and where conv2d takes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "synoros/synoros.hpp"
#include "test_util.hpp"

using namespace synoros;

namespace {

struct Geo {
  const char* name;
  int64_t N, C, H, W, O, p;
};

std::vector<Geo> geos() {
  return {
      {"resnet_layer1", 3, 16, 28, 28, 16, 1},
      {"seven_by_seven_images_grouped", 5, 64, 7, 7, 64, 1},
      {"bands_of_one_large_image", 1, 8, 70, 66, 8, 1},
      {"odd_sizes_valid", 2, 9, 11, 6, 10, 0},
      {"wide_padding", 2, 8, 5, 3, 12, 2},
      // More than one block of 64 output channels, forward (96) and in the input gradient (80).
      {"wide_channels", 2, 80, 6, 9, 96, 1},
  };
}

// conv2d builds conv3x3 ops for the scope.
struct WinogradOn : synoros::testing::WinogradConvolutions {
  explicit WinogradOn(bool on = true) : WinogradConvolutions(on) {}
};

bool took(CompiledStep& step, const std::string& kernel) {
  for (const LaunchInfo& li : step.plan().launch_info())
    if (li.kernel == kernel) return true;
  return false;
}

struct Result {
  CompiledStep step;
  std::vector<HostTensor> args, outs;
};

// y = conv2d(x, w) and the gradients of sum(y * r) with respect to x and w.
Result run(const Geo& g, bool special = false) {
  const int64_t OH = g.H + 2 * g.p - 2, OW = g.W + 2 * g.p - 2;
  std::vector<HostTensor> args = {
      special ? synoros::testing::special_tensor({g.N, g.C, g.H, g.W}, 31, 7)
              : synoros::testing::random_tensor({DType::F32, {g.N, g.C, g.H, g.W}}, 31),
      synoros::testing::random_tensor({DType::F32, {g.O, g.C, 3, 3}}, 32),
      synoros::testing::random_tensor({DType::F32, {g.N, g.O, OH, OW}}, 33)};
  CompiledStep step = compile(
      [&](const std::vector<Tensor>& a) {
        Tensor x = a[0], w = a[1];
        x.requires_grad();
        w.requires_grad();
        Tensor y = nn::conv2d(x, w, {}, 1, g.p);
        (y * a[2]).sum().backward();
        return std::vector<Tensor>{y, x.grad(), w.grad()};
      },
      {{DType::F32, args[0].shape}, {DType::F32, args[1].shape}, {DType::F32, args[2].shape}});
  std::vector<HostTensor> outs = step(args);
  return {std::move(step), std::move(args), std::move(outs)};
}

// The outputs' values, every NaN as one (a NaN's sign and payload are not part of any rule: the
// scalar build's FMAs pass another operand's NaN than the vector builds').
std::vector<uint32_t> bits(const std::vector<HostTensor>& outs) {
  std::vector<uint32_t> b;
  for (const HostTensor& h : outs)
    for (int64_t i = 0; i < h.numel(); ++i) {
      uint32_t u;
      std::memcpy(&u, static_cast<const float*>(h.buffer->data()) + i, 4);
      b.push_back(std::isnan(h.get(i)) ? 0x7fc00000u : u);
    }
  return b;
}

class Winograd : public ::testing::TestWithParam<Geo> {};

TEST_P(Winograd, ForwardAndGradientsWithinFloat64AndTheUnfusedBits) {
  synoros::testing::StrictKernels canonical;
  WinogradOn on;
  Result r = run(GetParam());
  EXPECT_TRUE(took(r.step, "winograd"));
  synoros::testing::expect_oracle_and_unfused_bits(r.step, r.args, r.outs);
}

TEST_P(Winograd, SameBitsOnEveryInstructionSetAndThreadCount) {
  synoros::testing::StrictKernels canonical;
  WinogradOn on;
  for (bool special : {false, true}) {
    std::vector<uint32_t> ref;
    synoros::testing::for_every_isa_and_thread_count([&](kernels::Isa isa, int threads) {
      std::vector<uint32_t> b = bits(run(GetParam(), special).outs);
      if (ref.empty()) ref = b;
      EXPECT_TRUE(b == ref) << kernels::isa_name(isa) << " threads=" << threads
                            << " special=" << special;
    });
  }
}

TEST_P(Winograd, FastModeKeepsWithinFloat64) {
  synoros::testing::FastKernels fast;
  WinogradOn on;
  Result r = run(GetParam());
  const Plan& p = r.step.plan();
  CompileOptions keep;
  keep.keep_intermediates = true;
  Plan checked(p.graph(), p.outputs(), keep);
  for (size_t i = 0; i < r.args.size(); ++i)
    checked.set_input("arg" + std::to_string(i), r.args[i]);
  checked.run();
  VerifyResult v = verify(checked, true);
  EXPECT_TRUE(v.ok) << v.report;
}

INSTANTIATE_TEST_SUITE_P(Geometries, Winograd, ::testing::ValuesIn(geos()),
                         [](const ::testing::TestParamInfo<Geo>& i) {
                           return std::string(i.param.name);
                         });

// conv2d takes the op only for float32, 3x3, stride 1, dilation 1, one group, padding <= 2 and at
// least 8 channels in and out; its results agree with the contraction's within rounding.
TEST(WinogradConv2d, TakenWhereItAppliesAndAgreesWithTheContraction) {
  synoros::testing::StrictKernels canonical;
  auto kernels_of = [](int64_t C, int64_t O, int64_t k, int64_t s, int64_t p, int64_t d, bool on) {
    WinogradOn w(on);
    HostTensor x = synoros::testing::random_tensor({DType::F32, {2, C, 9, 9}}, 41);
    HostTensor wt = synoros::testing::random_tensor({DType::F32, {O, C, k, k}}, 42);
    CompiledStep step = compile(
        [&](const std::vector<Tensor>& a) {
          return std::vector<Tensor>{nn::conv2d(a[0], a[1], {}, s, p, d)};
        },
        {{DType::F32, x.shape}, {DType::F32, wt.shape}});
    HostTensor y = step({x, wt})[0];
    return std::make_pair(took(step, "winograd"), y);
  };
  EXPECT_TRUE(kernels_of(8, 8, 3, 1, 1, 1, true).first);
  EXPECT_FALSE(kernels_of(8, 8, 3, 1, 1, 1, false).first);
  EXPECT_FALSE(kernels_of(4, 8, 3, 1, 1, 1, true).first);  // few input channels
  EXPECT_FALSE(kernels_of(8, 4, 3, 1, 1, 1, true).first);  // few output channels
  EXPECT_FALSE(kernels_of(8, 8, 3, 2, 1, 1, true).first);  // strided
  EXPECT_FALSE(kernels_of(8, 8, 3, 1, 2, 2, true).first);  // dilated
  EXPECT_FALSE(kernels_of(8, 8, 5, 1, 2, 1, true).first);  // 5x5
  EXPECT_FALSE(kernels_of(8, 8, 3, 1, 3, 1, true).first);  // padding 3
  HostTensor a = kernels_of(16, 12, 3, 1, 1, 1, true).second,
             b = kernels_of(16, 12, 3, 1, 1, 1, false).second;
  ASSERT_EQ(a.shape, b.shape);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.get(i), b.get(i), 1e-4 * (1 + std::fabs(b.get(i)))) << i;
}

// A weight held in a parameter is transformed (G g G^T) once per version: a plan that runs again
// with the weight unchanged (inference) reads the transform it made, with the same bits as a
// fresh plan; a change made through the API is transformed again; a write the engine is not
// told of is not seen (as for packed GEMM weights); a plan that writes the weight every call (a
// training step) transforms it every call; and borrowed memory is transformed every call.
TEST(WinogradConv2d, TransformsAWeightOnlyWhenItsVersionMoves) {
  auto same = [](const HostTensor& a, const HostTensor& b) {
    return a.bytes() == b.bytes() && std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes()) == 0;
  };
  const HostTensor xv = synoros::testing::random_tensor({DType::F32, {2, 12, 9, 9}}, 51);
  auto conv_of = [&](std::shared_ptr<HostTensor> w) {
    auto g = std::make_shared<Graph>();
    ValueId x = g->input(DType::F32, xv.shape, "x");
    ValueId y = g->add(Op::Conv3x3, {x, g->param(w, "w")}, attr::Conv3x3{1, false});
    return std::make_tuple(g, x, y);
  };
  auto fresh = [&](const HostTensor& wv) {  // a new plan over a copy of the weight
    auto copy = std::make_shared<HostTensor>(wv.dtype, wv.shape);
    std::memcpy(copy->buffer->data(), wv.buffer->data(), wv.bytes());
    auto [g, x, y] = conv_of(copy);
    Plan f(*g, {y});
    f.set_input(x, xv);
    f.run();
    return f.read(y);
  };
  auto w = std::make_shared<HostTensor>(synoros::testing::random_tensor({DType::F32, {16, 12, 3, 3}}, 52));
  auto [g, x, y] = conv_of(w);
  Plan p(*g, {y});
  p.set_input(x, xv);
  p.run();
  ASSERT_EQ(p.launch_info().back().kernel, "winograd");
  const HostTensor first = p.read(y);
  EXPECT_TRUE(same(first, fresh(*w)));
  p.run();
  EXPECT_TRUE(same(p.read(y), first));

  float* raw = static_cast<float*>(w->buffer->data());
  const float saved = raw[3];
  raw[3] = 100.0f;  // not announced: the plan keeps its transform
  const HostTensor written = fresh(*w);
  ASSERT_FALSE(same(written, first));  // the write matters to a plan that sees it
  p.run();
  EXPECT_TRUE(same(p.read(y), first));
  raw[3] = saved;

  w->set(3, 100.0);  // the same change through the API: transformed again
  p.run();
  EXPECT_TRUE(same(p.read(y), written));
  w->set(3, double(saved));
  p.run();
  EXPECT_TRUE(same(p.read(y), first));

  // Borrowed memory: its owner writes in place without a version; every call transforms it.
  auto owner = std::make_shared<std::vector<float>>(size_t(w->numel()) + 16);
  float* b = owner->data();
  while (reinterpret_cast<uintptr_t>(b) % 64) ++b;
  std::memcpy(b, w->buffer->data(), w->bytes());
  auto bw = std::make_shared<HostTensor>();
  bw->dtype = DType::F32, bw->shape = w->shape;
  bw->buffer = std::make_shared<Buffer>(b, w->bytes(), owner);
  auto [bg, bx, by] = conv_of(bw);
  Plan q(*bg, {by});
  q.set_input(bx, xv);
  q.run();
  EXPECT_TRUE(same(q.read(by), first));
  b[3] = 100.0f;
  q.run();
  EXPECT_TRUE(same(q.read(by), written));
}

// A training step writes its weights every call: each call's convolutions transform the weights
// the last update left. Three calls of one step give the bytes of three calls that transform
// every call (SYNOROS_NO_WEIGHT_PACKS=1).
TEST(WinogradConv2d, TrainingStepsTransformEachNewWeight) {
  WinogradOn on;
  auto params_after = [] {
    auto m = train::make_classifier("resnet-mini", 10, 4);
    optim::SGD opt(m->parameters(), 0.05, 0.0, 0.0);
    HostTensor y(DType::I64, {8});
    for (int64_t i = 0; i < 8; ++i) y.set(i, double(i % 10));
    const HostTensor x = Tensor::randn({8, 1, 28, 28}, 5).value();
    CompiledStep step = train::compile_classifier_train(*m, opt, 8);
    EXPECT_TRUE(took(step, "winograd"));
    for (int s = 0; s < 3; ++s) step({x, y});
    std::vector<char> bytes;
    for (const Tensor& t : m->parameters()) {
      const HostTensor h = t.value();
      const char* d = static_cast<const char*>(h.buffer->data());
      bytes.insert(bytes.end(), d, d + h.bytes());
    }
    return bytes;
  };
  const std::vector<char> kept = params_after();
  config::ScopedOverride every_call("SYNOROS_NO_WEIGHT_PACKS", "1");
  EXPECT_EQ(kept, params_after());
}

TEST(WinogradConv2d, BadShapesAreErrors) {
  Graph g;
  ValueId x = g.input(DType::F32, {1, 8, 5, 5}, "x");
  auto add = [&](Shape ws, attr::Conv3x3 at) { g.add(Op::Conv3x3, {x, g.input(DType::F32, ws, "w")}, at); };
  synoros::testing::expect_error([&] { add({4, 8, 3, 3}, {3, false}); }, {"padding must be 0, 1 or 2"});
  synoros::testing::expect_error([&] { add({4, 7, 3, 3}, {1, false}); }, {"does not match"});
  synoros::testing::expect_error([&] { add({4, 8, 5, 5}, {1, false}); }, {"[O, C, 3, 3]"});
  synoros::testing::expect_error([&] { add({8, 4, 3, 3}, {1, false}); }, {"does not match"});
  add({8, 4, 3, 3}, {1, true});  // the flipped form reads w as [C, O, 3, 3]
}

}  // namespace
