// Vendor GEMM providers from Debian: OpenBLAS's cblas_sgemm, oneDNN's dnnl_sgemm (JIT
// AVX-512/AVX2 kernels, strongest on mid-sized and large shapes) and libxsmm's JIT small-matrix
// kernels (strongest below ~128). None follows the engine's canonical reduction order, so strict
// mode leaves them out. Every vendor call runs single-threaded, large problems as fixed strips
// spread over the pool (OpenBLAS and oneDNN by columns, libxsmm by rows): their bits never
// depend on a thread count.
#include "kernels/vendor_gemm.hpp"

#include <cblas.h>
#include <immintrin.h>
#include <libxsmm.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <string>

namespace synoros::kernels {

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

namespace {

// Row-major operands as BLAS-style (transpose, leading dimension) pairs; none when an operand
// is strided in both dimensions (only the engine's kernels read those).
struct BlasLayout {
  bool ta, tb;
  int64_t lda, ldb, ldc;
};
std::optional<BlasLayout> blas_layout(const GemmShape& shape) {
  GemmShape s = dense_unit_strides(shape);
  bool a_n = s.a_cs == 1 && s.a_rs >= std::max<int64_t>(1, s.K);
  bool a_t = s.a_rs == 1 && s.a_cs >= std::max<int64_t>(1, s.M);
  bool b_n = s.b_cs == 1 && s.b_rs >= std::max<int64_t>(1, s.N);
  bool b_t = s.b_rs == 1 && s.b_cs >= std::max<int64_t>(1, s.K);
  if (!(a_n || a_t) || !(b_n || b_t) || s.c_rs < std::max<int64_t>(1, s.N) || s.K <= 0) return std::nullopt;
  return BlasLayout{!a_n, !b_n, a_n ? s.a_rs : s.a_cs, b_n ? s.b_rs : s.b_cs, s.c_rs};
}

// Large problems split into column strips of a fixed width, one single-threaded vendor call
// each (Call(c, layout, n0, n)), spread over the engine's pool: the split depends only on the
// shape, never on the thread count, so neither do the bits. (Without it a provider chosen with
// one thread ran a 2048^3 product on one core with two: 0.51x PyTorch.)
constexpr int64_t kStrip = 256;
int64_t column_strips(const GemmShape& s) {
  return s.M * s.N * s.K >= (int64_t(1) << 18) ? (s.N + kStrip - 1) / kStrip : 1;
}
template <void (*Call)(const GemmCall&, const BlasLayout&, int64_t, int64_t)>
void column_strip(const void* p, int64_t i) {
  const GemmCall& c = *static_cast<const GemmCall*>(p);
  int64_t width = column_strips(c.shape) == 1 ? c.shape.N : kStrip;
  int64_t n0 = i * width;
  Call(c, *blas_layout(c.shape), n0, std::min(width, c.shape.N - n0));
}
template <void (*Call)(const GemmCall&, const BlasLayout&, int64_t, int64_t)>
void run_column_strips(const GemmCall& c, ThreadPool& pool) {
  int64_t strips = column_strips(c.shape);
  if (strips == 1) return column_strip<Call>(&c, 0);
  pool.run(strips, column_strip<Call>, &c);
}
// Column n0 of B: n0 rows down a transposed B, n0 elements along a plain one.
const float* b_column(const GemmCall& c, const BlasLayout& l, int64_t n0) { return c.B + n0 * (l.tb ? l.ldb : 1); }

// OpenBLAS (Debian's libopenblas), single-threaded so its bits never depend on a thread count.
class OpenBlasGemm : public GemmProvider {
 public:
  std::string name() const override { return "openblas"; }
  std::string version() const override { return OPENBLAS_VERSION; }
  bool canonical() const override { return false; }
  bool supports(const GemmShape& s) const override { return blas_layout(s).has_value(); }
  size_t scratch_floats(const GemmShape&) const override { return 0; }
  void run(const GemmCall& c, ThreadPool& pool) const override {
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(1); });
    run_column_strips<strip>(c, pool);
  }

 private:
  static void strip(const GemmCall& c, const BlasLayout& l, int64_t n0, int64_t n) {
    const GemmShape& s = c.shape;
    cblas_sgemm(CblasRowMajor, l.ta ? CblasTrans : CblasNoTrans, l.tb ? CblasTrans : CblasNoTrans, int(s.M), int(n),
                int(s.K), 1.0f, c.A, int(l.lda), b_column(c, l, n0), int(l.ldb), c.accumulate ? 1.0f : 0.0f, c.C + n0,
                int(l.ldc));
  }
};

class OneDnnGemm : public GemmProvider {
 public:
  std::string name() const override { return "onednn"; }
  std::string version() const override { return onednn_version(); }
  bool canonical() const override { return false; }
  bool supports(const GemmShape& s) const override { return blas_layout(s).has_value(); }
  size_t scratch_floats(const GemmShape&) const override { return 0; }
  // Column strips (run_column_strips), one single-threaded dnnl_sgemm each.
  void run(const GemmCall& c, ThreadPool& pool) const override { run_column_strips<strip>(c, pool); }

 private:
  static void strip(const GemmCall& c, const BlasLayout& l, int64_t n0, int64_t n) {
    // oneDNN parallelises with OpenMP: one thread per call, set once per calling thread.
    thread_local bool single = (omp_set_num_threads(1), true);
    (void)single;
    const GemmShape& s = c.shape;
    dnnl_status_t st = dnnl_sgemm(l.ta ? 'T' : 'N', l.tb ? 'T' : 'N', s.M, n, s.K, 1.0f, c.A, l.lda,
                                  b_column(c, l, n0), l.ldb, c.accumulate ? 1.0f : 0.0f, c.C + n0, l.ldc);
    if (st != dnnl_success)
      throw Error("onednn: dnnl_sgemm failed with status " + std::to_string(int(st)) + " for M=" +
                  std::to_string(s.M) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K));
  }
};

// libxsmm is column-major: row-major C[M,N] = A B is column-major C^T[N,M] = B^T A^T, so the
// kernel gets (m, n) = (N, M) and the operands swapped. Only untransposed operands are JIT'd.
// libxsmm's JIT kernels return with the upper halves of the vector registers dirty (no
// vzeroupper): the caller's next legacy-SSE instruction then pays an AVX-SSE transition on every
// call (measured: an 8x16x32 GEMM took 265 ns through the provider, 56 ns alone). Clear them.
__attribute__((target("avx"))) void call_clean(libxsmm_smmfunction f, const float* a, const float* b, float* c) {
  f(a, b, c);
  _mm256_zeroupper();
}

class LibxsmmGemm : public GemmProvider {
 public:
  LibxsmmGemm() { libxsmm_init(); }
  std::string name() const override { return "libxsmm"; }
  std::string version() const override { return LIBXSMM_CONFIG_VERSION; }
  bool canonical() const override { return false; }
  bool supports(const GemmShape& shape) const override {
    GemmShape s = dense_unit_strides(shape);
    int64_t limit = int64_t(1) << 30;
    return s.a_cs == 1 && s.b_cs == 1 && s.K > 0 && s.a_rs >= s.K && s.b_rs >= s.N && s.c_rs >= s.N &&
           s.M * s.N * s.K <= (int64_t(1) << 24) && s.a_rs < limit && s.b_rs < limit && s.c_rs < limit;
  }
  size_t scratch_floats(const GemmShape&) const override { return 0; }
  // Problems of a million multiply-adds and more split into row strips of a fixed height, one
  // call each, spread over the engine's pool (one call had left a 256^3 product on one core
  // with two threads: 0.89x PyTorch). The split depends only on the shape, never on the thread
  // count, so neither do the bits.
  void run(const GemmCall& c, ThreadPool& pool) const override {
    int64_t strips = strips_of(c.shape);
    if (strips == 1) return call_clean(kernel(dense_unit_strides(c.shape), c.accumulate), c.B, c.A, c.C);
    pool.run(strips, strip, &c);
  }

 private:
  static constexpr int64_t kRows = 64;
  static int64_t strips_of(const GemmShape& s) {
    return s.M * s.N * s.K >= (int64_t(1) << 20) ? (s.M + kRows - 1) / kRows : 1;
  }
  static void strip(const void* p, int64_t i) {
    const GemmCall& c = *static_cast<const GemmCall*>(p);
    GemmShape s = c.shape;
    int64_t m0 = i * kRows;
    s.M = std::min(kRows, s.M - m0);
    call_clean(kernel(dense_unit_strides(s), c.accumulate), c.B, c.A + m0 * c.shape.a_rs, c.C + m0 * c.shape.c_rs);
  }
  // A few recent kernels per thread: dispatch through libxsmm's registry costs about as much as
  // a tiny GEMM itself.
  struct Slot {
    std::array<int64_t, 6> key{};
    bool acc = false;
    libxsmm_smmfunction fn = nullptr;
  };
  static libxsmm_smmfunction kernel(const GemmShape& s, bool acc) {
    thread_local std::array<Slot, 8> slots;
    thread_local size_t next = 0, last = 0;
    std::array<int64_t, 6> key{s.M, s.N, s.K, s.a_rs, s.b_rs, s.c_rs};
    if (slots[last].fn && slots[last].acc == acc && slots[last].key == key) return slots[last].fn;
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i].fn && slots[i].key == key && slots[i].acc == acc) return slots[last = i].fn;
    libxsmm_blasint m = libxsmm_blasint(s.N), n = libxsmm_blasint(s.M), k = libxsmm_blasint(s.K);
    libxsmm_blasint lda = libxsmm_blasint(s.b_rs), ldb = libxsmm_blasint(s.a_rs), ldc = libxsmm_blasint(s.c_rs);
    float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
    int flags = acc ? LIBXSMM_GEMM_FLAG_NONE : LIBXSMM_GEMM_FLAG_BETA_0;
    libxsmm_smmfunction fn = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
    if (!fn)
      throw Error("libxsmm: no kernel for M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                  " K=" + std::to_string(s.K));
    slots[next] = {key, acc, fn};
    last = next;
    next = (next + 1) % slots.size();
    return fn;
  }
};

}  // namespace

std::vector<std::shared_ptr<GemmProvider>> vendor_gemm_providers() {
  return {std::make_shared<OpenBlasGemm>(), std::make_shared<OneDnnGemm>(), std::make_shared<LibxsmmGemm>()};
}

}  // namespace synoros::kernels
