// Single-precision GEMM with the engine's canonical reduction order: every C[m, n] is one FMA
// chain over k = 0, 1, ..., K-1 starting from zero. The AVX2 micro-kernel and the scalar
// fallback (std::fma) follow the same chain, so they agree bit for bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "synoros/runtime.hpp"

namespace synoros::kernels {

struct GemmShape {
  int64_t M, N, K;
  // Element strides: A(m, k) = A[m * a_rs + k * a_cs], B(k, n) = B[k * b_rs + n * b_cs],
  // C(m, n) = C[m * c_rs + n] (C rows contiguous).
  int64_t a_rs, a_cs, b_rs, b_cs, c_rs;
};

// The same problem with the strides of size-1 dims (which no element ever steps along) set to
// what a dense row-major layout would have: a matrix-vector product's B of stride (1, 0) is then
// recognisably a plain vector for the BLAS-style providers.
inline GemmShape dense_unit_strides(GemmShape s) {
  if (s.M == 1) s.a_rs = std::max<int64_t>(s.K, 1), s.c_rs = std::max<int64_t>(s.N, 1);
  if (s.K == 1) s.a_cs = 1, s.b_rs = std::max<int64_t>(s.N, 1);
  if (s.N == 1) s.b_cs = 1;
  return s;
}

constexpr int64_t kGemmMR = 6;
constexpr int64_t kGemmNR = 16;
constexpr int64_t kGemmKC = 256;

// Scratch sgemm needs in `mode` (see sgemm), in floats.
size_t gemm_scratch_floats(const GemmShape& s, int mode = 0);

// C = A @ B for one matrix; `scratch` holds gemm_scratch_floats(s) floats, 64-byte aligned.
// isa: 0 scalar, 1 AVX2, 2 AVX-512 (same bits on all).
// mode: 0 picks by size, 1 the unpacked small-problem path, 2 the packed blocked path.
// packed_b: B already packed by sgemm_pack_b for this shape and isa (null: B is packed per call,
// or read in place by the few-row paths); used only when sgemm_packs_b holds. The bits are the
// same either way.
void sgemm(const GemmShape& s, const float* A, const float* B, float* C, float* scratch, int isa,
           ThreadPool& pool, int mode = 0, bool accumulate = false, const float* packed_b = nullptr);

// Whether sgemm reads B packed for this shape (its blocked path, which packs B per call, and with
// AVX-512 the products of 2 to 8 rows, which read a packed B as one stream), so that a B packed
// once ahead (a weight that does not change between calls) saves that work.
bool sgemm_packs_b(const GemmShape& s, int isa, int mode = 0);
// The floats of B packed for every K block: the panels sgemm reads.
size_t sgemm_packed_b_floats(const GemmShape& s, int isa);
// Packs all of B (the K blocks one after another) into dst, sgemm_packed_b_floats(s, isa) floats.
void sgemm_pack_b(const GemmShape& s, const float* B, float* dst, int isa, ThreadPool& pool);

// C = A @ B on the calling thread, for kernels that run many small products inside one parallel
// task (attention's blocks). scratch: s.K * s.N floats, 64-byte aligned (B is transposed into it
// when its columns are not contiguous). The same bits as sgemm on every instruction set.
void sgemm_block(const GemmShape& s, const float* A, const float* B, float* C, float* scratch, int isa,
                 bool accumulate = false);

// dst[k * ldd + n] = S[n * ld + k] for n < N, k < K (ldd < 0: N), with AVX2 (the caller checks
// the CPU has it).
void transpose_rows(const float* S, int64_t ld, int64_t N, int64_t K, float* dst, int64_t ldd = -1);
// dst[k * N + n] = B[k * rs + n * cs]: a B read with strides laid out as [K][N] rows (transposed
// with AVX2 where B's rows are K-contiguous and the instruction set has it, else plain loops).
void lay_out_kn(const float* B, int64_t rs, int64_t cs, int64_t N, int64_t K, float* dst, int isa);

// Double precision, same canonical order, plain loops.
// accumulate: C holds partial chains (of earlier k) to continue, as the K blocks do internally,
// so splitting K across calls gives the bits of one call.
void dgemm(const GemmShape& s, const double* A, const double* B, double* C, bool accumulate = false);

}  // namespace synoros::kernels
