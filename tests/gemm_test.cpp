// Every GEMM provider against a float64 reference over edge shapes (tile edges, several K blocks,
// transposed operands, accumulation), and the canonical kernels' bits: the packed and the
// unpacked paths and every instruction set give one FMA chain per output, so the same bits.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/kernel_api.hpp"
#include "kernels/providers.hpp"
#include "synoros/runtime.hpp"

namespace synoros {
namespace {
using namespace kernels;

struct Problem {
  GemmShape s;
  std::vector<float> A, B, C0;
};

// A [M,K] (transposed in memory when ta), B [K,N] (transposed when tb), C [M,N] with padding.
Problem make_problem(int64_t M, int64_t N, int64_t K, bool ta, bool tb, uint64_t seed) {
  Problem p;
  p.s = {M, N, K, ta ? 1 : K + 3, ta ? M + 2 : 1, tb ? 1 : N + 5, tb ? K + 1 : 1, N + 7};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  p.A.resize(size_t((ta ? K * (M + 2) : M * (K + 3))) + 1);
  p.B.resize(size_t((tb ? N * (K + 1) : K * (N + 5))) + 1);
  p.C0.resize(size_t(M * (N + 7)) + 1);
  for (float& v : p.A) v = u(rng);
  for (float& v : p.B) v = u(rng);
  for (float& v : p.C0) v = u(rng);
  return p;
}

double ref(const Problem& p, int64_t m, int64_t n, bool acc) {
  const GemmShape& s = p.s;
  double r = acc ? double(p.C0[size_t(m * s.c_rs + n)]) : 0.0;
  for (int64_t k = 0; k < s.K; ++k)
    r += double(p.A[size_t(m * s.a_rs + k * s.a_cs)]) * double(p.B[size_t(k * s.b_rs + n * s.b_cs)]);
  return r;
}

std::vector<float> run(const GemmProvider& prov, const Problem& p, bool acc) {
  std::vector<float> C = p.C0;
  Buffer scratch(prov.scratch_floats(p.s) * sizeof(float));  // 64-byte aligned, as in a plan
  ThreadPool pool(2);
  prov.run({p.s, p.A.data(), p.B.data(), C.data(), static_cast<float*>(scratch.data()), acc}, pool);
  return C;
}

const std::vector<std::array<int64_t, 3>> kShapes = {
    {1, 1, 1}, {8, 32, 16}, {13, 31, 7}, {14, 32, 256}, {15, 33, 257}, {29, 65, 600},
    {64, 64, 64}, {127, 127, 127}, {1, 300, 513}, {1, 1000, 77}, {300, 1, 513}, {45, 97, 1030},
    {40, 1, 24}, {64, 1, 47}, {5, 700, 77}, {8, 1000, 40},  // a few rows of A streaming B (B transposed too),
    {3, 300, 50}, {8, 130, 33}, {6, 520, 19}, {2, 1000, 24},  // with tails of k and of outputs,
    {4, 300, 77}, {7, 700, 45},  // and bands of 64 k with a tail;
    {333, 70, 256}, {333, 70, 512},  // an A too tall for B streamed through one panel (the panels packed first)
    {128, 40, 300}, {17, 70, 300},  // last panels of 2 and 3 rows, shared evenly with the panel before
    {1, 8300, 21}};  // one row of A over more columns than one task of the row stream takes

TEST(Gemm, EveryProviderMatchesTheFloat64Reference) {
  for (const auto& prov : gemm_providers())
    for (const auto& [M, N, K] : kShapes)
      for (int t = 0; t < 4; ++t)
        for (bool acc : {false, true}) {
          Problem p = make_problem(M, N, K, t & 1, t & 2, uint64_t(M * 1000 + N * 10 + K + t));
          if (!prov->supports(p.s)) continue;
          std::vector<float> C = run(*prov, p, acc);
          double worst = 0;
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double r = ref(p, m, n, acc);
              worst = std::max(worst, std::fabs(double(C[size_t(m * p.s.c_rs + n)]) - r));
            }
          // float32 accumulation over K terms of magnitude <= 1.
          EXPECT_LT(worst, 4e-7 * double(K) + 1e-6)
              << prov->name() << " M=" << M << " N=" << N << " K=" << K << " transposes=" << t << " acc=" << acc;
          // Padding between rows is never written.
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = N; n < p.s.c_rs && m * p.s.c_rs + n < int64_t(C.size()); ++n)
              EXPECT_EQ(C[size_t(m * p.s.c_rs + n)], p.C0[size_t(m * p.s.c_rs + n)]) << prov->name();
        }
}

// Size-1 dims carry stride 0 in the graph's layouts (a matrix-vector B is (1, 0)): the BLAS-style
// providers must still take them, and get them right.
TEST(Gemm, VectorShapesWithZeroStridesAreSupportedAndCorrect) {
  for (const auto& [M, N, K] : std::vector<std::array<int64_t, 3>>{{37, 1, 300}, {1, 45, 300}, {20, 30, 1}}) {
    Problem p = make_problem(M, N, K, false, false, uint64_t(M * N + K));
    if (N == 1) p.s.b_cs = 0;
    if (M == 1) p.s.a_rs = 0, p.s.c_rs = N;
    if (K == 1) p.s.a_cs = 0, p.s.b_rs = 0;
    int vendors = 0;
    for (const auto& prov : gemm_providers()) {
      if (!prov->supports(p.s)) continue;
      vendors += prov->canonical() ? 0 : 1;
      std::vector<float> C = run(*prov, p, false);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n)
          EXPECT_NEAR(C[size_t(m * p.s.c_rs + n)], ref(p, m, n, false), 4e-7 * double(K) + 1e-6)
              << prov->name() << " M=" << M << " N=" << N << " K=" << K;
    }
    EXPECT_GE(vendors, 2) << "M=" << M << " N=" << N << " K=" << K;
  }
}

// Every provider, canonical or not, gives bits that ignore the thread count (a split may follow
// the thread count only where it changes no output's chain: the few-row products). One row and
// a few rows, B read in place and transposed.
TEST(Gemm, EveryProviderIgnoresTheThreadCount) {
  for (const auto& prov : gemm_providers())
    for (const auto& [M, N, K, tb] : std::vector<std::array<int64_t, 4>>{
             {64, 600, 64, 0}, {200, 300, 129, 0}, {9, 1030, 40, 0}, {6, 1030, 40, 0}, {6, 1030, 40, 1},
             {1, 1030, 77, 0}, {1, 1030, 77, 1}, {3, 2100, 50, 1}, {333, 300, 256, 0}, {333, 300, 256, 1},
             {100, 1030, 300, 1}}) {
      Problem p = make_problem(M, N, K, false, tb, uint64_t(M + N + K));
      if (!prov->supports(p.s)) continue;
      std::vector<float> first;
      for (int threads : {1, 2, 3}) {
        std::vector<float> C = p.C0;
        Buffer scratch(prov->scratch_floats(p.s) * sizeof(float));
        ThreadPool pool(threads);
        prov->run({p.s, p.A.data(), p.B.data(), C.data(), static_cast<float*>(scratch.data()), false}, pool);
        if (first.empty()) first = C;
        EXPECT_EQ(C, first) << prov->name() << " M=" << M << " N=" << N << " K=" << K << " threads=" << threads;
      }
    }
}

TEST(Gemm, CanonicalPathsAndInstructionSetsGiveTheSameBits) {
  Isa saved = active_isa();
  ThreadPool one(1), three(3);  // one thread streams all of B's panels through one buffer
  for (const auto& [M, N, K] : kShapes)
    for (int t = 0; t < 4; ++t) {
      Problem p = make_problem(M, N, K, t & 1, t & 2, uint64_t(7 * M + N + K + t));
      std::vector<float> first;
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (int(isa) > int(best_isa())) continue;
        for (int run = 0; run < 3; ++run) {  // the small path, the packed path on three threads and on one
          const int mode = run == 0 ? 1 : 2;
          ThreadPool& pool = run == 2 ? one : three;
          std::vector<float> C = p.C0;
          Buffer scratch(gemm_scratch_floats(p.s) * sizeof(float));
          sgemm(p.s, p.A.data(), p.B.data(), C.data(), static_cast<float*>(scratch.data()), int(isa), pool, mode, true);
          // And without accumulating, after it in the same buffer (the chains start from 0).
          std::vector<float> D = p.C0;
          sgemm(p.s, p.A.data(), p.B.data(), D.data(), static_cast<float*>(scratch.data()), int(isa), pool, mode, false);
          C.insert(C.end(), D.begin(), D.end());
          if (first.empty()) first = C;
          EXPECT_EQ(C, first) << "M=" << M << " N=" << N << " K=" << K << " isa=" << isa_name(isa)
                              << " mode=" << mode << " threads=" << pool.size();
        }
      }
    }
  set_isa(saved);
}

// A B packed ahead (a weight a plan keeps packed) gives the bits of B packed by the call, on every
// instruction set, with and without accumulation; shapes that take another path never pack B.
TEST(Gemm, BPackedAheadGivesTheBitsOfBPackedPerCall) {
  Isa saved = active_isa();
  ThreadPool pool(3), one(1);
  const std::vector<std::array<int64_t, 3>> shapes = {
      {128, 384, 384}, {29, 65, 600}, {45, 97, 1030}, {127, 127, 127}, {9, 33, 257}, {300, 1, 513},
      {333, 70, 1030}};  // (an A too large to pack for every K block: the K blocks one at a time)
  for (const auto& [M, N, K] : shapes)
    for (int t = 0; t < 4; ++t) {
      Problem p = make_problem(M, N, K, t & 1, t & 2, uint64_t(3 * M + N + K + t));
      for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
        if (int(isa) > int(best_isa())) continue;
        ASSERT_TRUE(sgemm_packs_b(p.s, int(isa), 2)) << M << "x" << N << "x" << K;
        Buffer packed(sgemm_packed_b_floats(p.s, int(isa)) * sizeof(float));
        sgemm_pack_b(p.s, p.B.data(), static_cast<float*>(packed.data()), int(isa), pool);
        // The call given the packed B gets a B of NaNs: it must read the packed one only.
        const std::vector<float> nans(p.B.size(), std::numeric_limits<float>::quiet_NaN());
        for (bool acc : {false, true}) {
          Buffer scratch(gemm_scratch_floats(p.s) * sizeof(float));
          std::vector<float> C = p.C0, D = p.C0;
          sgemm(p.s, p.A.data(), p.B.data(), C.data(), static_cast<float*>(scratch.data()), int(isa), pool, 2, acc);
          sgemm(p.s, p.A.data(), nans.data(), D.data(), static_cast<float*>(scratch.data()), int(isa), pool, 2, acc,
                static_cast<const float*>(packed.data()));
          EXPECT_EQ(C, D) << "M=" << M << " N=" << N << " K=" << K << " transposed=" << t
                          << " isa=" << isa_name(isa) << " accumulate=" << acc;
          std::vector<float> E = p.C0;  // and on one thread, where one task runs every panel
          sgemm(p.s, p.A.data(), nans.data(), E.data(), static_cast<float*>(scratch.data()), int(isa), one, 2, acc,
                static_cast<const float*>(packed.data()));
          EXPECT_EQ(C, E) << "M=" << M << " N=" << N << " K=" << K << " transposed=" << t
                          << " isa=" << isa_name(isa) << " accumulate=" << acc << " on one thread";
        }
      }
    }
  // One row, a few rows without AVX-512 and tiny products read B where it lies.
  const GemmShape row{1, 512, 512, 512, 1, 512, 1, 512}, few{8, 512, 512, 512, 1, 512, 1, 512},
      tiny{4, 4, 4, 4, 1, 4, 1, 4};
  EXPECT_FALSE(sgemm_packs_b(row, 2));
  EXPECT_FALSE(sgemm_packs_b(few, 1));
  EXPECT_TRUE(sgemm_packs_b(few, 2));
  EXPECT_FALSE(sgemm_packs_b(tiny, 1));
  EXPECT_TRUE(sgemm_packs_b(tiny, 1, 2));
  set_isa(saved);
}

// A few rows of A (decoding at batch 2 to 8) with AVX-512 read a B packed ahead panel after panel:
// the bits of B read in place and of the scalar build, on one thread and three, with and without
// accumulation; partial panels, several K blocks, B in place or transposed.
TEST(Gemm, FewRowsReadingBPackedAheadGiveTheBitsOfBInPlace) {
  if (int(best_isa()) < int(Isa::Avx512)) GTEST_SKIP() << "needs AVX-512";
  Isa saved = active_isa();
  ThreadPool three(3), one(1);
  const std::vector<std::array<int64_t, 3>> shapes = {{2, 65, 600}, {3, 97, 1030}, {8, 512, 300}, {5, 70, 257},
                                                      {8, 1020, 40}, {7, 64, 513}, {4, 2304, 768}, {6, 97, 2000}};
  for (const auto& [M, N, K] : shapes)
    for (int t = 0; t < 4; ++t) {
      Problem p = make_problem(M, N, K, t & 1, t & 2, uint64_t(5 * M + N + K + t));
      ASSERT_TRUE(sgemm_packs_b(p.s, int(Isa::Avx512))) << M << "x" << N << "x" << K << " transposed=" << t;
      Buffer packed(sgemm_packed_b_floats(p.s, int(Isa::Avx512)) * sizeof(float));
      sgemm_pack_b(p.s, p.B.data(), static_cast<float*>(packed.data()), int(Isa::Avx512), three);
      const std::vector<float> nans(p.B.size(), std::numeric_limits<float>::quiet_NaN());
      for (bool acc : {false, true}) {
        Buffer scratch(gemm_scratch_floats(p.s) * sizeof(float));
        std::vector<float> in_place = p.C0, scalar = p.C0;
        sgemm(p.s, p.A.data(), p.B.data(), in_place.data(), static_cast<float*>(scratch.data()), int(Isa::Avx512),
              three, 0, acc);
        sgemm(p.s, p.A.data(), p.B.data(), scalar.data(), static_cast<float*>(scratch.data()), int(Isa::Scalar), one,
              0, acc);
        EXPECT_EQ(in_place, scalar) << "M=" << M << " N=" << N << " K=" << K << " transposed=" << t;
        for (ThreadPool* pool : {&three, &one}) {
          std::vector<float> C = p.C0;
          sgemm(p.s, p.A.data(), nans.data(), C.data(), static_cast<float*>(scratch.data()), int(Isa::Avx512),
                *pool, 0, acc, static_cast<const float*>(packed.data()));
          EXPECT_EQ(C, in_place) << "M=" << M << " N=" << N << " K=" << K << " transposed=" << t
                                 << " accumulate=" << acc << " threads=" << pool->size();
        }
      }
    }
  set_isa(saved);
}

// A B read with strides laid out as [K][N] rows: the same floats on every instruction set, for
// shapes with and without whole 8 x 8 tiles, K-contiguous rows (transposed with AVX2) or not.
TEST(Gemm, LayingOutBAsRowsCopiesEveryElementOnEveryInstructionSet) {
  for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {8, 8}, {32, 16}, {8, 32}, {13, 21}, {70, 9}})
    for (bool k_contiguous : {true, false}) {
      const int64_t rs = k_contiguous ? 1 : N + 3, cs = k_contiguous ? K + 2 : 1;
      std::vector<float> B(size_t((k_contiguous ? N * cs : K * rs)) + 1);
      for (size_t i = 0; i < B.size(); ++i) B[i] = float(i) * 0.5f - 3.0f;
      for (int isa = 0; isa <= int(best_isa()); ++isa) {
        std::vector<float> dst(size_t(N * K), -1.0f);
        lay_out_kn(B.data(), rs, cs, N, K, dst.data(), isa);
        for (int64_t k = 0; k < K; ++k)
          for (int64_t n = 0; n < N; ++n)
            ASSERT_EQ(dst[size_t(k * N + n)], B[size_t(k * rs + n * cs)])
                << "N " << N << ", K " << K << ", k-contiguous " << k_contiguous << ", isa " << isa << ", at " << k
                << ", " << n;
      }
    }
}

}  // namespace
}  // namespace synoros
