// Helpers shared by the tests: seeded random tensors, error expectations, temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/conv_direct.hpp"
#include "kernels/kernel_api.hpp"
#include "synoros/synoros.hpp"
#include "synoros/nn.hpp"

namespace synoros::testing {

// Runs the rest of a test's scope at instruction set `isa` and restores the active one when the
// scope ends, a failed ASSERT's early return included. Callers skip ISAs the CPU lacks first:
//   if (int(isa) > int(kernels::best_isa())) GTEST_SKIP() << ...;
struct IsaScope {
  explicit IsaScope(kernels::Isa isa) : saved(kernels::active_isa()) { kernels::set_isa(isa); }
  ~IsaScope() { kernels::set_isa(saved); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
  kernels::Isa saved;
};

struct InputSpec {
  DType dtype = DType::F32;
  Shape shape;
  double lo = -1.0, hi = 1.0;  // uniform range; ints: [lo, hi)
  double avoid = 0.0;          // keep |x| >= avoid (away from kinks of relu, abs, max)
};

inline HostTensor random_tensor(const InputSpec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(s.lo, s.hi);
  HostTensor h(s.dtype, s.shape);
  for (int64_t i = 0; i < h.numel(); ++i) {
    double v = u(rng);
    if (!is_float(s.dtype)) v = std::floor(v);
    if (s.avoid > 0 && std::fabs(v) < s.avoid) v = v < 0 ? -s.avoid - 0.1 : s.avoid + 0.1;
    h.set(i, v);
  }
  return h;
}

// Canonical-order kernels only (the default mode), for the scope of a test. Tests that compare
// bits between two differently built plans need it: fusion can change a GEMM's operand layout,
// and in fast mode a different layout may select a different (non-canonical) kernel.
struct StrictKernels {
  bool saved = kernels::strict_kernels();
  StrictKernels() { kernels::set_strict_kernels(true); }
  ~StrictKernels() { kernels::set_strict_kernels(saved); }
};

// Fast mode for the scope of a test: the vendor GEMMs and oneDNN's convolutions take part in
// selection (tests of those kernels need it).
struct FastKernels {
  bool saved = kernels::fast_kernels();
  FastKernels() { kernels::set_fast_kernels(true); }
  ~FastKernels() { kernels::set_fast_kernels(saved); }
};

// The engine's direct convolution kernels on or off for a scope, restoring what it found.
struct ConvDirectKernels {
  bool saved = kernels::conv_direct_enabled();
  explicit ConvDirectKernels(bool on) { kernels::set_conv_direct(on); }
  ~ConvDirectKernels() { kernels::set_conv_direct(saved); }
  ConvDirectKernels(const ConvDirectKernels&) = delete;
  ConvDirectKernels& operator=(const ConvDirectKernels&) = delete;
};

// nn::conv2d's Winograd op on or off for a scope, restoring what it found (tests of the
// contraction's convolution kernels switch it off).
struct WinogradConvolutions {
  bool saved = nn::winograd_convolutions();
  explicit WinogradConvolutions(bool on) { nn::set_winograd_convolutions(on); }
  ~WinogradConvolutions() { nn::set_winograd_convolutions(saved); }
  WinogradConvolutions(const WinogradConvolutions&) = delete;
  WinogradConvolutions& operator=(const WinogradConvolutions&) = delete;
};

// Calls f(isa, threads) under every instruction set this CPU has and 1 and 2 threads, then
// restores both.
template <class F>
void for_every_isa_and_thread_count(F f) {
  kernels::Isa saved = kernels::active_isa();
  int threads = num_threads();
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (int(isa) > int(kernels::best_isa())) continue;
    kernels::set_isa(isa);
    for (int t : {1, 2}) {
      set_num_threads(t);
      f(isa, t);
    }
  }
  kernels::set_isa(saved);
  set_num_threads(threads);
}

// The same shape and the same bytes.
inline void expect_same_bits(const HostTensor& a, const HostTensor& b, const std::string& what) {
  ASSERT_EQ(a.shape, b.shape) << what;
  ASSERT_EQ(a.bytes(), b.bytes()) << what;
  EXPECT_EQ(std::memcmp(a.buffer->data(), b.buffer->data(), a.bytes()), 0) << what;
}

inline HostTensor to_f64(const HostTensor& h) {
  HostTensor w(DType::F64, h.shape);
  for (int64_t i = 0; i < h.numel(); ++i) w.set(i, h.get(i));
  return w;
}

// A compiled step's plan run again unfused and unplanned with every intermediate kept, on the
// step's inputs (named "arg0", "arg1", ...): every value must pass the float64 oracle, and the
// step's outputs `outs` must equal the unfused run's bit for bit.
inline void expect_oracle_and_unfused_bits(CompiledStep& step, const std::vector<HostTensor>& args,
                                           const std::vector<HostTensor>& outs) {
  const Plan& p = step.plan();
  CompileOptions keep;
  keep.keep_intermediates = true;
  Plan checked(p.graph(), p.outputs(), keep);
  for (size_t i = 0; i < args.size(); ++i) checked.set_input("arg" + std::to_string(i), args[i]);
  checked.run();
  VerifyResult r = verify(checked, true);
  EXPECT_TRUE(r.ok) << r.report;
  for (size_t i = 0; i < outs.size(); ++i) {
    HostTensor ref = checked.read(p.outputs()[i]);
    EXPECT_EQ(0, std::memcmp(ref.buffer->data(), outs[i].buffer->data(), ref.bytes())) << "output " << i;
  }
}

// Runs f, expects an Error whose message contains every fragment.
template <class F>
void expect_error(F f, std::vector<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error raised";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& fr : fragments) EXPECT_NE(m.find(fr), std::string::npos) << "message: " << m;
  }
}

// Random values in [-3, 3) with NaN, infinities, signed zeros, denormals and large magnitudes
// written at every `every`-th element.
inline HostTensor special_tensor(const Shape& s, uint64_t seed, int64_t every = 5) {
  HostTensor h = random_tensor({DType::F32, s, -3.0, 3.0}, seed);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-40f, -1e-40f, 1e30f,
                            -1e30f, 88.5f, -88.5f, 9.0f, -9.0f};
  float* p = static_cast<float*>(h.buffer->data());
  for (int64_t i = 0; i < numel(s); i += every) p[i] = specials[size_t(i / every) % std::size(specials)];
  return h;
}

// A fresh directory removed when the test ends.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / ("synoros_test_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace synoros::testing
