// Attention in one launch: softmax(scale q k^T [causal]) v computed block by block with an online
// softmax, so no score matrix of the whole sequence is ever in memory, and its gradient from
// recomputed scores (whose gradients dS are kept in scratch when they fit).
//
// The order is fixed by the shape alone: queries and keys are cut into blocks of kBlock, every
// product of two blocks is the canonical GEMM (one FMA chain in ascending k, the same bits on every
// instruction set), and one task owns each output block and walks the other blocks in ascending
// order. So the bits depend neither on the thread count nor on the instruction set.
//
// q, k, v, o and g may be views (AttnArgs::lay): each row's D values contiguous, the rows and the
// batch items at any strides, as the slices and permutes that split a fused projection into heads
// leave them. Every product reads its operands through those strides, so the bits are the same.
//
// Causal attention may place query i at position offset + i (an input read at run time): it sees
// keys 0 .. offset + i, which is how decoding attends over a key/value cache with the bits of the
// full forward's row. The forward does not read the keys after a query block's last query (from
// key_end on, see split_pass); the keys after a query inside that range are masked and add exact
// zeros for finite values.
//
// Forward, for each query row: the keys are cut into splits of kSplit (four key blocks), and each
// split runs an online softmax of its own from a fresh state: running maximum m (NaN scores
// skipped) and sum l; per key block, m' = max(m, the block's maximum), alpha = exp(m - m') (1 where
// m = m'), p = exp(s - m') summed as the reductions sum a row (lane t % 8, lanes combined
// pairwise), l = l alpha + sum(p), and the output row o = o alpha + p V. The first split's state
// is the row's; each later split (m_s, l_s, o_s) is folded in, in ascending order:
// M = max(m, m_s), l = l a + l_s a_s, o = o a + o_s a_s with a = exp(m - M), a_s = exp(m_s - M)
// (1 where equal to M, 0 for -inf; a split that saw no finite score changes nothing but a NaN sum).
// At the end o / l; every NaN is written as the one quiet NaN. The splits are what lets a
// single-query decoding step spread its long key range over threads: with at most kSplitRows
// queries and several splits, one task per (batch item, split) computes the partial states and a
// second pass folds them in the same order, so the bits are those of a task that walks the splits
// itself, and the same whatever the thread count. A forward over several query blocks transposes
// every key block once into its scratch (the size of K), which each task reads: in a pass of its
// own, or, with at least four batch items per thread, inside tasks that each run whole batch
// items and reuse their own part of the scratch (item_task).
//
// Backward: phase 1 computes the row sums D = sum(g o) (in the reductions' lane order) and takes
// lse = m + log(l) from the forward, which keeps it when it ran earlier in the plan, or else
// recomputes m and l in the forward's order (fresh per split, the splits folded in ascending
// order), so lse has the forward's bits either way; phase 2 owns each key block (its key and
// value blocks transposed once): for the query blocks in ascending order, P = exp(s - lse),
// dv += P^T g, dS = P (g v^T - D), dk += dS^T q; phase 3 owns each query block: dq += dS k over
// the key blocks in ascending order. dq and dk are then scaled.
// Phase 2 stores each dS block when the plan's scratch holds a batch item's blocks
// (attention_store_limit), and phases 2 and 3 then run over rounds of as many batch items as it
// holds; phase 3 reads dS instead of computing S and g v^T again. The stored blocks are the ones
// phase 3 would compute, bit for bit, so the gradient is the same either way.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ir/scalar_ops.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/line_fn.hpp"

namespace synoros::kernels {

namespace {
constexpr int64_t kBlock = 64;  // queries and keys per block: part of the definition of the bits
constexpr int64_t kSplit = 4 * kBlock;  // keys per split of the forward: part of the definition too
constexpr int64_t kFetchPieces = 4;  // a block's products run in this many pieces (see split_pass)
constexpr int64_t kSplitRows = 4;  // at most this many queries: the forward's splits run as tasks

enum Operand { kQ, kK, kV, kO, kG };

struct AttnArgs {
  int64_t batch, Tq, Tk, D;
  // Where each operand's rows lie (Operand order): contiguous, or read in place through the
  // slice and permute that split a projection into heads.
  passes::RowsView lay[5];
  bool causal, f64;
  int isa;  // 0 scalar, 1 AVX2, 2 AVX-512: the block products; the row steps take the vector builds from 1 up
  double scale;
  const void *q, *k, *v, *o, *g;
  const int64_t* offset;  // causal: query i sees keys 0 .. offset + i (null: offset 0)
  void* out;
  void* stats;  // the gradient's lse and D, batch * Tq each
  void* lse;    // forward: each row's log-sum-exp, batch * Tq, for the gradient (null: not kept);
                // gradient: the forward's, when it ran earlier in the plan (null: computed here)
  void* kt;       // forward over several query blocks: the key blocks transposed (D x kBlock each) (null: none)
  void* partial;  // split tasks: per (batch item, split), Tq rows of o_s then m_s and l_s (null: none)
  void* dstore;   // backward: dS blocks of `round` batch items, kBlock x kBlock each (null: recompute)
  int64_t round = 0, item0 = 0;  // batch items per round of phases 2 and 3, and this round's first
  int64_t slots = 0;  // forward by batch items: task t runs items t, t + slots, ... (item_task); 0: by query blocks
};

// An operand's rows for one batch item: row i at p + i rs.
template <class T>
struct Rows {
  const T* p;
  int64_t rs;
  const T* row(int64_t i) const { return p + i * rs; }
};
template <class T>
Rows<T> rows_of(const AttnArgs& a, const void* p, Operand w, int64_t b) {
  return {static_cast<const T*>(p) + a.lay[w].item(b), a.lay[w].row_stride};
}

int64_t blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }
int64_t splits(int64_t n) { return (n + kSplit - 1) / kSplit; }
// Whether the forward runs one task per (batch item, split) and then folds the splits.
bool split_tasks(int64_t Tq, int64_t Tk) { return Tq <= kSplitRows && splits(Tk) > 1; }

// A task of one (batch item, query block): queries i0 .. i0 + rows - 1 of batch item b.
struct QueryBlock {
  int64_t b, i0, rows;
};
QueryBlock query_block(const AttnArgs& a, int64_t task) {
  const int64_t nqb = blocks(a.Tq), i0 = task % nqb * kBlock;
  return {task / nqb, i0, std::min(kBlock, a.Tq - i0)};
}
// The query offset, clamped to [0, Tk] (ops.def).
int64_t offset(const AttnArgs& a) { return a.offset ? std::clamp<int64_t>(*a.offset, 0, a.Tk) : 0; }
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The last key block that queries i0 .. i0 + rows - 1 see (-1: none).
int64_t last_key_block(const AttnArgs& a, int64_t i0, int64_t rows) {
  if (!a.causal) return blocks(a.Tk) - 1;
  return std::min(blocks(a.Tk) - 1, floor_div(i0 + rows - 1 + offset(a), kBlock));
}

// A task's scratch: two score blocks, an output block and the GEMM's transposition space (which
// the gradient's key tasks use for their transposed key and value blocks instead); on the task's
// stack for heads up to kStackD wide (so running a plan allocates nothing), else on the heap.
constexpr int64_t kStackD = 128;
template <class T, bool Acc = false>  // Acc: a second output block (the forward's later splits)
class Scratch {
 public:
  explicit Scratch(int64_t D) {
    T* p = stack_;
    if (D > kStackD) {
      heap_.resize(size_t(2 * kBlock * kBlock + (Acc ? 3 : 2) * kBlock * D) + 64);
      p = heap_.data();
      while (reinterpret_cast<uintptr_t>(p) % 64) ++p;
    }
    s = p;
    dp = p + kBlock * kBlock;
    c = p + 2 * kBlock * kBlock;
    gemm = c + kBlock * D;
    acc = Acc ? p + 2 * kBlock * kBlock + 2 * kBlock * std::max(D, kStackD) : nullptr;  // after the GEMM's space
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T *s, *dp, *c, *acc, *gemm;

 private:
  alignas(64) T stack_[2 * kBlock * kBlock + (Acc ? 3 : 2) * kBlock * kStackD];
  std::vector<T> heap_;
};

// C (rows of c_rs) = A B for one pair of blocks, A(m, k) = A[m a_rs + k a_cs], B(k, n) = B[k b_rs + n b_cs].
template <class T>
void block_gemm(const AttnArgs& a, int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs,
                const T* B, int64_t b_rs, int64_t b_cs, T* C, int64_t c_rs, bool acc, T* tmp) {
  const GemmShape s{M, N, K, a_rs, a_cs, b_rs, b_cs, c_rs};
  if constexpr (std::is_same_v<T, float>) {
    sgemm_block(s, A, B, C, tmp, a.isa, acc);
  } else {
    dgemm(s, A, B, C, acc);
  }
}

// Whether float rows take the vector row steps (row_steps: AVX2's, or AVX-512's for isa 2). They
// follow a.isa, fixed at lowering, where the exp sums follow the active ISA at run time: the
// bits are the same either way.
template <class T>
bool vector_rows(const AttnArgs& a) {
  return std::is_same_v<T, float> && a.isa >= 1;
}

// x *= scale, n elements (scores, and the gradients dq and dk).
template <class T>
void scale_rows(const AttnArgs& a, T* x, int64_t n) {
  const T scale = T(a.scale);
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a)) return row_steps(a.isa).scale(x, n, scale);
  }
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

// Columns c0 .. c1 - 1 of S = q k^T (keys j0 + c0 ..) for queries i0.. (rows), rows kBlock apart,
// unscaled. kt (when not null): keys j0.. already transposed, D rows of kBlock (the same products,
// without transposing the block again). Every score is its own chain, so the columns may be
// computed in any pieces.
template <class T>
void score_products(const AttnArgs& a, Rows<T> q, Rows<T> k, int64_t i0, int64_t rows, int64_t j0, int64_t c0,
                    int64_t c1, T* S, T* tmp, const T* kt = nullptr) {
  const int64_t D = a.D, n = c1 - c0;
  if (kt) {
    block_gemm<T>(a, rows, n, D, q.row(i0), q.rs, 1, kt + c0, kBlock, 1, S + c0, kBlock, false, nullptr);
  } else if (rows == 1) {  // one query (decoding): k times q, the keys read in place rather than transposed
    block_gemm<T>(a, n, 1, D, k.row(j0 + c0), k.rs, 1, q.row(i0), 1, 1, S + c0, 1, false, tmp);
  } else {
    block_gemm<T>(a, rows, n, D, q.row(i0), q.rs, 1, k.row(j0 + c0), 1, k.rs, S + c0, kBlock, false, tmp);
  }
}

// Scales the scores S (queries i0.., keys j0 .. j0 + cols - 1, rows kBlock apart); a key after its
// query (causal) scores -inf. rmax (when not null): float rows on a vector build take each row's
// maximum (row_max's) in the same pass; returns whether they did.
template <class T>
bool scale_and_mask(const AttnArgs& a, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* S, T* rmax = nullptr) {
  bool maxima = false;
  const int64_t off = offset(a);
  for (int64_t r = 0; r < rows; ++r) {
    T* s = S + r * kBlock;
    // Keys j0 + c with c < seen are at or before the query's position.
    const int64_t seen = a.causal ? std::clamp<int64_t>(i0 + r + off - j0 + 1, 0, cols) : cols;
    if constexpr (std::is_same_v<T, float>) {
      if (rmax && vector_rows<T>(a)) {
        rmax[r] = row_steps(a.isa).scale_mask_max(s, seen, cols, float(a.scale));
        maxima = true;
        continue;
      }
    }
    scale_rows(a, s, seen);
    std::fill(s + seen, s + cols, -std::numeric_limits<T>::infinity());
  }
  return maxima;
}

// S = scale q k^T for queries i0.. (rows) and keys j0.. (cols), rows kBlock apart, masked.
template <class T>
void scores(const AttnArgs& a, Rows<T> q, Rows<T> k, int64_t i0, int64_t rows, int64_t j0, int64_t cols, T* S,
            T* tmp, const T* kt = nullptr) {
  score_products(a, q, k, i0, rows, j0, 0, cols, S, tmp, kt);
  scale_and_mask(a, i0, rows, j0, cols, S);
}

// The row's maximum, NaN skipped.
template <class T>
T row_max(const AttnArgs& a, const T* s, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a)) return row_steps(a.isa).max(s, n);
  }
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < n; ++c) m = std::max(m, s[c]);
  return m;
}

// s = exp(s - m) in place; returns its sum in the reductions' lane order (n <= kBlock).
template <class T>
T exp_sum(const AttnArgs& a, T* s, int64_t n, T m) {
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a)) return softmax_exp_sum_vec(s, s, n, m);
  }
  return canonical_sum(n, [&](int64_t c) { return s[c] = fn::Exp::f(T(s[c] - m)); });
}

// One key block of a row's online softmax: s becomes p, m and l move on; returns alpha, the factor
// for what was accumulated before.
template <class T>
T online_step(const AttnArgs& a, T* s, int64_t n, T& m, T& l) {
  const T inf = std::numeric_limits<T>::infinity();
  const T mn = std::max(m, row_max(a, s, n));
  if (mn == -inf) {  // nothing but -inf (or NaN) so far: p = 0, and a NaN makes the row NaN
    bool nan = false;
    for (int64_t c = 0; c < n; ++c) nan = nan || std::isnan(s[c]), s[c] = 0;
    if (nan) l = std::numeric_limits<T>::quiet_NaN();
    return T(1);
  }
  const T alpha = m == mn ? T(1) : fn::Exp::f(T(m - mn));
  const T bs = exp_sum(a, s, n, mn);
  l = l * alpha + bs;
  m = mn;
  return alpha;
}

// online_step for rows 0 .. rows - 1 of S (kBlock apart); alpha (when not null) gets each row's
// factor. Float rows on a vector build take their exp-sums four at a time (one row's sum is a
// chain of dependent adds) and their factors' exps as one line of the exp op's kernel: each
// row's operations are online_step's, so the bits are the same. rmax (when not null): the rows'
// maxima, already taken (scale_and_mask).
template <class T>
void online_steps(const AttnArgs& a, T* S, int64_t rows, int64_t n, T* m, T* l, T* alpha, const T* rmax = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a)) {
      float mn[kBlock], al[kBlock], bs[kBlock], d[kBlock], e[kBlock];
      int64_t live[kBlock], nl = 0;
      for (int64_t r = 0; r < rows; ++r) {
        mn[r] = std::max(m[r], rmax ? rmax[r] : row_max(a, S + r * kBlock, n));
        if (mn[r] == -INFINITY) {  // nothing finite yet: online_step's own path
          const float f = online_step(a, S + r * kBlock, n, m[r], l[r]);
          if (alpha) alpha[r] = f;
          continue;
        }
        d[nl] = m[r] - mn[r];
        live[nl++] = r;
      }
      if (const LineFn ex = pick_line(Op::Exp, DType::F32)) {  // its bits are fn::Exp's
        const void* in[1] = {d};
        const int64_t st[1] = {1};
        ex(e, in, st, nl);
      } else {
        for (int64_t j = 0; j < nl; ++j) e[j] = fn::Exp::f(d[j]);
      }
      int64_t i = 0;
      for (; i + 4 <= nl; i += 4) {
        float* x[4];
        float m4[4], s4[4];
        for (int j = 0; j < 4; ++j) x[j] = S + live[i + j] * kBlock, m4[j] = mn[live[i + j]];
        softmax_exp_sum4_vec(x, x, n, m4, s4);
        for (int j = 0; j < 4; ++j) bs[live[i + j]] = s4[j];
      }
      for (; i < nl; ++i) bs[live[i]] = exp_sum(a, S + live[i] * kBlock, n, mn[live[i]]);
      for (int64_t j = 0; j < nl; ++j) {
        const int64_t r = live[j];
        al[r] = m[r] == mn[r] ? 1.0f : e[j];
        l[r] = l[r] * al[r] + bs[r];
        m[r] = mn[r];
        if (alpha) alpha[r] = al[r];
      }
      return;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T f = online_step(a, S + r * kBlock, n, m[r], l[r]);
    if (alpha) alpha[r] = f;
  }
}

// S's rows r = exp(S's row r - m[r]) for rows 0 .. rows - 1 (kBlock apart): exp_sum's values
// (its sums unused), four float rows at a time on a vector build.
template <class T>
void exp_rows(const AttnArgs& a, T* S, int64_t rows, int64_t n, const T* m) {
  int64_t r = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a))
      for (; r + 4 <= rows; r += 4) {
        float* x[4] = {S + r * kBlock, S + (r + 1) * kBlock, S + (r + 2) * kBlock, S + (r + 3) * kBlock};
        float sums[4];
        softmax_exp_sum4_vec(x, x, n, m + r, sums);
      }
  }
  for (; r < rows; ++r) exp_sum(a, S + r * kBlock, n, m[r]);
}

// Every NaN as the one quiet NaN; branch-free, so the compiler vectorises it (a branch per
// element was half of a forward task's own samples).
template <class T>
void canonical_nans(T* x, int64_t n) {
  const T qnan = std::numeric_limits<T>::quiet_NaN();
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    x[i] = v != v ? qnan : v;
  }
}

template <class T>
const T* at(const void* p, int64_t off) {
  return static_cast<const T*>(p) + off;
}
// Batch item b's transposed key blocks in the forward's scratch (AttnArgs::kt), D x kBlock each:
// its own part, or its task's (item_task) when the forward runs by batch items.
template <class T>
T* transposed_keys(const AttnArgs& a, int64_t b) {
  return static_cast<T*>(a.kt) + (a.slots ? b % a.slots : b) * blocks(a.Tk) * kBlock * a.D;
}

// ---- forward
// Brings n elements from p toward the core, line by line in address order, with the weakest
// locality hint that still helps (on an AMD EPYC, prefetcht2 read a decoding step's keys and values
// at 15-17 GB/s against 10-11 GB/s with prefetcht0 or prefetcht1, whose bursts stall the loads).
template <class T>
void prefetch(const T* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < n * int64_t(sizeof(T)); b += 64) __builtin_prefetch(c + b, 0, 1);
}
// The same for n rows of D values, rs apart.
template <class T>
void prefetch_rows(const T* p, int64_t n, int64_t D, int64_t rs) {
  if (rs == D) return prefetch(p, n * D);
  for (int64_t i = 0; i < n; ++i) prefetch(p + i * rs, D);
}

// One split's online softmax for queries i0 .. i0 + rows - 1 over key blocks kb0 .. kb1, from a
// fresh state: o (rows x D), m and l. next_k, next_v: the next batch item's keys and values (null:
// none follows). kt: the batch item's key blocks transposed (D x kBlock each, one after another),
// or null.
template <class T, bool Acc>
void split_pass(const AttnArgs& a, Rows<T> q, Rows<T> k, Rows<T> v, int64_t i0, int64_t rows, int64_t kb0,
                int64_t kb1, T* o, T* m, T* l, Scratch<T, Acc>& w, const T* next_k, const T* next_v,
                const T* kt = nullptr) {
  const int64_t D = a.D;
  T alpha[kBlock], rmax[kBlock];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  // The first key block's p V is written to o itself: o = 0 alpha + p V would be p V bit for bit
  // (the first block's alpha is 0 or 1, and a product's chain from +0 never ends at -0 when
  // rounding to nearest without flushing to zero, as the engine runs). No key block (Tk = 0): 0.
  if (kb0 > kb1) std::fill(o, o + rows * D, T(0));
  // Keys from key_end on are after every query of the block (causal): they are not read at all.
  // Their scores would be -inf and, for finite values, their terms exact zeros, so leaving them
  // out moves no bit (a NaN or an infinity there no longer reaches the output; the backward still
  // reads the whole last block). A decoding step over a static cache reads only the keys and values
  // it attends over.
  const int64_t key_end = a.causal ? std::min(a.Tk, i0 + rows + offset(a)) : a.Tk;
  for (int64_t kb = kb0; kb <= kb1; ++kb) {
    const int64_t j0 = kb * kBlock, cols = std::min(kBlock, key_end - j0);
    // A decoding step reads each key and value once, from memory: the block after this one (the
    // next split's first, or the next batch item's) is fetched while this one is computed, in
    // address order (a few query rows read the keys k-major, short streams that the hardware
    // prefetcher follows poorly).
    // With fetches, the products run in kFetchPieces pieces of keys, each after a piece of the
    // fetches, so the fetches overlap the work (issued in one burst, they held up the products
    // behind them: a decoding step's attention over 512 positions at batch 8, 12 heads, one
    // thread on an AMD EPYC, from 18.0 to 16.2 ms).
    const bool same = kb < last_key_block(a, i0, rows), ahead = rows <= kSplitRows && (same || next_k);
    const int64_t f0 = same ? j0 + kBlock : 0, fn = ahead ? std::min(kBlock, key_end - f0) : 0;
    const T* fk = same ? k.row(f0) : next_k;
    const T* fv = same ? v.row(f0) : next_v;
    const T* kt_block = kt ? kt + kb * kBlock * D : nullptr;
    const int64_t pieces = ahead ? kFetchPieces : 1;
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t r0 = fn * p / pieces, r1 = fn * (p + 1) / pieces;
      if (r1 > r0) prefetch_rows(fk + r0 * k.rs, r1 - r0, D, k.rs);
      const int64_t c0 = cols * p / pieces, c1 = cols * (p + 1) / pieces;
      if (c1 > c0) score_products(a, q, k, i0, rows, j0, c0, c1, w.s, w.gemm, kt_block);
    }
    const bool maxima = scale_and_mask(a, i0, rows, j0, cols, w.s, rmax);
    online_steps(a, w.s, rows, cols, m, l, alpha, maxima ? rmax : nullptr);
    // p V, its chains continued from piece to piece (the same chains as in one product).
    T* pv = kb == kb0 ? o : w.c;
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t r0 = fn * p / pieces, r1 = fn * (p + 1) / pieces;
      if (r1 > r0) prefetch_rows(fv + r0 * v.rs, r1 - r0, D, v.rs);
      const int64_t c0 = cols * p / pieces, c1 = cols * (p + 1) / pieces;
      if (c1 > c0)
        block_gemm<T>(a, rows, D, c1 - c0, w.s + c0, kBlock, 1, v.row(j0 + c0), v.rs, 1, pv, D, c0 > 0, w.gemm);
    }
    if (kb == kb0) continue;
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<T, float>) {
        if (vector_rows<T>(a)) {
          row_steps(a.isa).scale_add(o + r * D, w.c + r * D, D, alpha[r]);
          continue;
        }
      }
      for (int64_t d = 0; d < D; ++d) o[r * D + d] = o[r * D + d] * alpha[r] + w.c[r * D + d];
    }
  }
}

// Folds a later split's (ms, ls) into a row's (m, l); false when the split adds nothing, else
// a and as are the factors of the row's and the split's accumulations.
template <class T>
bool fold_stats(T& m, T& l, T ms, T ls, T& a, T& as) {
  const T inf = std::numeric_limits<T>::infinity();
  if (ms == -inf) {  // the split saw no finite score: p = 0 there, and a NaN makes the row NaN
    if (std::isnan(ls)) l = std::numeric_limits<T>::quiet_NaN();
    return false;
  }
  const T mn = std::max(m, ms);
  a = m == mn ? T(1) : m == -inf ? T(0) : fn::Exp::f(T(m - mn));
  as = ms == mn ? T(1) : fn::Exp::f(T(ms - mn));
  l = l * a + ls * as;
  m = mn;
  return true;
}
// Folds a later split's state (ms, ls, os) into a row's (m, l, o).
template <class T>
void fold_split(int64_t D, T& m, T& l, T* o, T ms, T ls, const T* os) {
  T a, as;
  if (!fold_stats(m, l, ms, ls, a, as)) return;
  for (int64_t d = 0; d < D; ++d) o[d] = o[d] * a + os[d] * as;
}
// A row's log-sum-exp from its final (m, l), kept by the forward for the gradient.
template <class T>
void keep_lse(const AttnArgs& a, int64_t b, int64_t i0, int64_t rows, const T* m, const T* l) {
  if (!a.lse) return;
  T* lse = static_cast<T*>(a.lse) + b * a.Tq + i0;
  for (int64_t r = 0; r < rows; ++r) lse[r] = m[r] + fn::Log::f(l[r]);
}

template <class T>
void finish_rows(const AttnArgs& a, T* o, const T* l, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<T, float>) {
      if (vector_rows<T>(a)) {
        row_steps(a.isa).divide(o + r * a.D, a.D, l[r]);
        continue;
      }
    }
    for (int64_t d = 0; d < a.D; ++d) o[r * a.D + d] /= l[r];
  }
  canonical_nans(o, rows * a.D);
}

// The last split that queries i0 .. i0 + rows - 1 see (-1: none).
int64_t last_split(const AttnArgs& a, int64_t i0, int64_t rows) {
  const int64_t kb = last_key_block(a, i0, rows);
  return kb < 0 ? -1 : kb / (kSplit / kBlock);
}
// Split s's last key block, given the last one the queries see.
int64_t last_block_of_split(int64_t s, int64_t last_block) {
  return std::min(last_block, (s + 1) * (kSplit / kBlock) - 1);
}

// The keys and values of the batch item the task runs after b: b + 1, or b + a.slots by batch
// items (nulls after the last one).
template <class T>
std::pair<const T*, const T*> next_item(const AttnArgs& a, int64_t b) {
  const int64_t next = b + (a.slots ? a.slots : 1);
  if (next >= a.batch) return {nullptr, nullptr};
  return {rows_of<T>(a, a.k, kK, next).p, rows_of<T>(a, a.v, kV, next).p};
}

// One task per (batch, query block): walks the splits in ascending order.
template <class T>
void forward_task(const AttnArgs& a, int64_t task) {
  const auto [b, i0, rows] = query_block(a, task);
  const int64_t D = a.D;
  const Rows<T> q = rows_of<T>(a, a.q, kQ, b), k = rows_of<T>(a, a.k, kK, b), v = rows_of<T>(a, a.v, kV, b);
  const auto [next_k, next_v] = next_item<T>(a, b);
  T* o = static_cast<T*>(a.out) + (b * a.Tq + i0) * D;
  Scratch<T, true> w(D);
  T m[kBlock], l[kBlock], ms[kBlock], ls[kBlock];
  const int64_t last = last_key_block(a, i0, rows), per = kSplit / kBlock;
  const T* kt = a.kt ? transposed_keys<T>(a, b) : nullptr;
  split_pass(a, q, k, v, i0, rows, 0, std::min(last, per - 1), o, m, l, w, next_k, next_v, kt);
  for (int64_t s = 1; s <= last_split(a, i0, rows); ++s) {
    split_pass(a, q, k, v, i0, rows, s * per, last_block_of_split(s, last), w.acc, ms, ls, w, next_k, next_v, kt);
    for (int64_t r = 0; r < rows; ++r) fold_split(D, m[r], l[r], o + r * D, ms[r], ls[r], w.acc + r * D);
  }
  keep_lse(a, b, i0, rows, m, l);
  finish_rows(a, o, l, rows);
}

// Split tasks (at most kSplitRows queries, one query block): one task per (batch, split) writes
// its partial state; a split past the last one the queries see is left alone.
template <class T>
T* partial_state(const AttnArgs& a, int64_t b, int64_t s) {
  return static_cast<T*>(a.partial) + (b * splits(a.Tk) + s) * a.Tq * (a.D + 2);
}
template <class T>
void split_task(const AttnArgs& a, int64_t task) {
  const int64_t ns = splits(a.Tk), b = task / ns, s = task % ns, D = a.D, rows = a.Tq;
  if (s > last_split(a, 0, rows)) return;
  const Rows<T> q = rows_of<T>(a, a.q, kQ, b), k = rows_of<T>(a, a.k, kK, b), v = rows_of<T>(a, a.v, kV, b);
  const auto [next_k, next_v] = next_item<T>(a, b);
  Scratch<T> w(D);
  T* p = partial_state<T>(a, b, s);
  const int64_t per = kSplit / kBlock;
  split_pass(a, q, k, v, 0, rows, s * per, last_block_of_split(s, last_key_block(a, 0, rows)), p,
             p + rows * D, p + rows * D + rows, w, next_k, next_v);
}
// Then one task per batch item folds its splits in ascending order.
template <class T>
void fold_task(const AttnArgs& a, int64_t b) {
  const int64_t D = a.D, rows = a.Tq;
  T* o = static_cast<T*>(a.out) + b * a.Tq * D;
  const T* p0 = partial_state<T>(a, b, 0);
  T m[kSplitRows], l[kSplitRows];
  std::copy(p0, p0 + rows * D, o);
  std::copy(p0 + rows * D, p0 + rows * D + rows, m);
  std::copy(p0 + rows * D + rows, p0 + rows * D + 2 * rows, l);
  for (int64_t s = 1; s <= last_split(a, 0, rows); ++s) {
    const T* p = partial_state<T>(a, b, s);
    for (int64_t r = 0; r < rows; ++r) fold_split(D, m[r], l[r], o + r * D, p[rows * D + r], p[rows * D + rows + r], p + r * D);
  }
  keep_lse(a, b, 0, rows, m, l);
  finish_rows(a, o, l, rows);
}

// ---- backward
template <class T>
struct GradView {
  Rows<T> q, k, v, o, g;
  const T* lse;
  T *dq, *dk, *dv, *dsum;
};
template <class T>
GradView<T> grad_view(const AttnArgs& a, int64_t b) {
  const int64_t D = a.D;
  T* out = static_cast<T*>(a.out) + b * (a.Tq + 2 * a.Tk) * D;
  T* st = static_cast<T*>(a.stats) + b * a.Tq;
  const T* lse = a.lse ? at<T>(a.lse, b * a.Tq) : st;
  return {rows_of<T>(a, a.q, kQ, b),
          rows_of<T>(a, a.k, kK, b),
          rows_of<T>(a, a.v, kV, b),
          rows_of<T>(a, a.o, kO, b),
          rows_of<T>(a, a.g, kG, b),
          lse,
          out,
          out + a.Tq * D,
          out + (a.Tq + a.Tk) * D,
          st + a.batch * a.Tq};
}

// Phase 1, one task per (batch, query block): D of its rows, and their lse unless the forward
// kept it. The lse is computed in the forward's order (each split of kSplit keys from a fresh
// state, the splits folded in ascending order), so it has the forward's bits either way.
template <class T>
void stats_task(const AttnArgs& a, int64_t task) {
  const auto [b, i0, rows] = query_block(a, task);
  const int64_t D = a.D;
  const GradView<T> x = grad_view<T>(a, b);
  bool done = false;
  if constexpr (std::is_same_v<T, float>) {
    if (vector_rows<T>(a)) avx2::row_dots(x.g.row(i0), x.g.rs, x.o.row(i0), x.o.rs, D, rows, x.dsum + i0), done = true;
  }
  for (int64_t r = 0; r < rows && !done; ++r) {
    const T *gr = x.g.row(i0 + r), *orow = x.o.row(i0 + r);
    x.dsum[i0 + r] = canonical_sum(D, [&](int64_t d) { return T(gr[d] * orow[d]); });
  }
  if (a.lse) return;
  Scratch<T> w(D);
  T m[kBlock], l[kBlock], ms[kBlock], ls[kBlock];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  const int64_t last = last_key_block(a, i0, rows), per = kSplit / kBlock;
  for (int64_t s = 0; s <= last_split(a, i0, rows); ++s) {
    T *sm = s == 0 ? m : ms, *sl = s == 0 ? l : ls;
    std::fill(sm, sm + rows, -std::numeric_limits<T>::infinity());
    std::fill(sl, sl + rows, T(0));
    for (int64_t kb = s * per; kb <= last_block_of_split(s, last); ++kb) {
      const int64_t j0 = kb * kBlock, cols = std::min(kBlock, a.Tk - j0);
      scores(a, x.q, x.k, i0, rows, j0, cols, w.s, w.gemm);
      online_steps<T>(a, w.s, rows, cols, sm, sl, nullptr);
    }
    if (s > 0)
      for (int64_t r = 0; r < rows; ++r) {
        T f, fs;
        fold_stats(m[r], l[r], ms[r], ls[r], f, fs);
      }
  }
  T* lse = static_cast<T*>(a.stats) + b * a.Tq + i0;
  for (int64_t r = 0; r < rows; ++r) lse[r] = m[r] + fn::Log::f(l[r]);
}

// P = exp(S - lse) and dS = P (g v^T - D) for one pair of blocks: P in w.s, dS in dp (rows kBlock
// apart). kt, vt (when not null): the key and value blocks transposed, D rows of kBlock each.
template <class T>
void probs_and_dscores(const AttnArgs& a, const GradView<T>& x, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                       Scratch<T>& w, T* dp, const T* kt = nullptr, const T* vt = nullptr) {
  const int64_t D = a.D;
  scores(a, x.q, x.k, i0, rows, j0, cols, w.s, kt ? nullptr : w.gemm, kt);  // (vt may live in w.gemm)
  exp_rows(a, w.s, rows, cols, x.lse + i0);
  if (vt) {
    block_gemm<T>(a, rows, cols, D, x.g.row(i0), x.g.rs, 1, vt, kBlock, 1, dp, kBlock, false, nullptr);
  } else {
    block_gemm<T>(a, rows, cols, D, x.g.row(i0), x.g.rs, 1, x.v.row(j0), 1, x.v.rs, dp, kBlock, false, w.gemm);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T *p = w.s + r * kBlock, *ds = dp + r * kBlock;
    const T dsum = x.dsum[i0 + r];
    for (int64_t c = 0; c < cols; ++c) ds[c] = p[c] * (ds[c] - dsum);
  }
}

// rows x D (rows of `from` rs apart) to D x rows (rows of kBlock).
template <class T>
void transpose_block(const AttnArgs& a, const T* from, int64_t rs, int64_t rows, T* to) {
  if constexpr (std::is_same_v<T, float>) {
    if (a.isa >= 1) return transpose_rows(from, rs, rows, a.D, to, kBlock);
  }
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t d = 0; d < a.D; ++d) to[d * kBlock + j] = from[j * rs + d];
}

// The stored dS block of (batch item b, query block qb, key block kb), rows kBlock apart.
template <class T>
T* stored_dscores(const AttnArgs& a, int64_t b, int64_t qb, int64_t kb) {
  return static_cast<T*>(a.dstore) + (((b - a.item0) * blocks(a.Tq) + qb) * blocks(a.Tk) + kb) * kBlock * kBlock;
}

// Phase 2, one task per (batch item of the round, key block): its dk and dv.
template <class T>
void key_task(const AttnArgs& a, int64_t task) {
  const int64_t nkb = blocks(a.Tk), b = a.item0 + task / nkb, kb = task % nkb, j0 = kb * kBlock,
                cols = std::min(kBlock, a.Tk - j0);
  const int64_t D = a.D;
  const GradView<T> x = grad_view<T>(a, b);
  Scratch<T> w(D);
  T *dk = x.dk + j0 * D, *dv = x.dv + j0 * D;
  bool first = true;
  // The first query block with a query that sees key j0 (i + offset >= j0); none past the last query.
  const int64_t qb0 = !a.causal                       ? 0
                      : j0 > a.Tq - 1 + offset(a) ? blocks(a.Tq)
                                                  : std::max<int64_t>(0, floor_div(j0 - offset(a), kBlock));
  // The task's key and value blocks, transposed once for all its query blocks (into the space of
  // the forward's output block and of the GEMM's own transposition, unused here).
  T *kt = w.c, *vt = w.gemm;
  if (qb0 < blocks(a.Tq)) {
    transpose_block(a, x.k.row(j0), x.k.rs, cols, kt);
    transpose_block(a, x.v.row(j0), x.v.rs, cols, vt);
  }
  for (int64_t qb = qb0; qb < blocks(a.Tq); ++qb, first = false) {
    const int64_t i0 = qb * kBlock, rows = std::min(kBlock, a.Tq - i0);
    T* dp = a.dstore ? stored_dscores<T>(a, b, qb, kb) : w.dp;  // dS straight into the store
    probs_and_dscores(a, x, i0, rows, j0, cols, w, dp, kt, vt);
    block_gemm<T>(a, cols, D, rows, w.s, 1, kBlock, x.g.row(i0), x.g.rs, 1, dv, D, !first, nullptr);
    block_gemm<T>(a, cols, D, rows, dp, 1, kBlock, x.q.row(i0), x.q.rs, 1, dk, D, !first, nullptr);
  }
  if (first) std::fill(dk, dk + cols * D, T(0)), std::fill(dv, dv + cols * D, T(0));
  scale_rows(a, dk, cols * D);
  canonical_nans(dk, cols * D);
  canonical_nans(dv, cols * D);
}

// Phase 3, one task per (batch item of the round, query block): its dq.
template <class T>
void query_task(const AttnArgs& a, int64_t task) {
  auto [b, i0, rows] = query_block(a, task);
  b += a.item0;
  const int64_t D = a.D;
  const GradView<T> x = grad_view<T>(a, b);
  Scratch<T> w(D);
  T* dq = x.dq + i0 * D;
  const int64_t last = last_key_block(a, i0, rows);
  for (int64_t kb = 0; kb <= last; ++kb) {
    const int64_t j0 = kb * kBlock, cols = std::min(kBlock, a.Tk - j0);
    const T* ds = w.dp;
    if (a.dstore) {
      ds = stored_dscores<T>(a, b, i0 / kBlock, kb);
    } else {
      probs_and_dscores(a, x, i0, rows, j0, cols, w, w.dp);
    }
    block_gemm<T>(a, rows, D, cols, ds, kBlock, 1, x.k.row(j0), x.k.rs, 1, dq, D, kb > 0, w.gemm);
  }
  if (last < 0) std::fill(dq, dq + rows * D, T(0));
  scale_rows(a, dq, rows * D);
  canonical_nans(dq, rows * D);
}

template <void (*F32)(const AttnArgs&, int64_t), void (*F64)(const AttnArgs&, int64_t)>
void task(const void* p, int64_t t) {
  const AttnArgs& a = *static_cast<const AttnArgs*>(p);
  a.f64 ? F64(a, t) : F32(a, t);
}

// The key blocks of batch item b transposed, for forward tasks over several query blocks: each
// key block is transposed once rather than once per query block that reads it (the same layout,
// D rows of kBlock per block, as the gradient's key tasks).
template <class T>
void transpose_keys(const AttnArgs& a, int64_t task) {  // one task per (batch item, key block)
  const int64_t b = task / blocks(a.Tk), kb = task % blocks(a.Tk);
  const Rows<T> k = rows_of<T>(a, a.k, kK, b);
  transpose_block(a, k.row(kb * kBlock), k.rs, std::min(kBlock, a.Tk - kb * kBlock),
                  transposed_keys<T>(a, b) + kb * kBlock * a.D);
}

// Task `slot` of a.slots runs the batch items slot, slot + a.slots, ...: for each, it transposes
// the item's key blocks into the slot's part of kt (transposed_keys) and runs the item's query
// blocks in ascending order. The rows' work is transpose_keys' and forward_task's, so the bits
// are the same; the transposed keys stay in the cache, where separate passes write them all to
// memory and read them back.
template <class T>
void item_task(const AttnArgs& a, int64_t slot) {
  for (int64_t b = slot; b < a.batch; b += a.slots) {
    for (int64_t kb = 0; kb < blocks(a.Tk); ++kb) transpose_keys<T>(a, b * blocks(a.Tk) + kb);
    for (int64_t qb = 0; qb < blocks(a.Tq); ++qb) forward_task<T>(a, b * blocks(a.Tq) + qb);
  }
}

void forward_launch(const void* p, ThreadPool& pool) {
  const AttnArgs& a = *static_cast<const AttnArgs*>(p);
  if (a.partial) {
    pool.run(a.batch * splits(a.Tk), task<split_task<float>, split_task<double>>, p);
    pool.run(a.batch, task<fold_task<float>, fold_task<double>>, p);
    return;
  }
  // Whole batch items as tasks where there are enough of them to share among the threads (four
  // tasks per thread, each with its own part of kt).
  if (a.kt && a.batch >= 4 * int64_t(pool.size())) {
    AttnArgs r = a;
    r.slots = 4 * int64_t(pool.size());
    return pool.run(r.slots, task<item_task<float>, item_task<double>>, &r);
  }
  if (a.kt) pool.run(a.batch * blocks(a.Tk), task<transpose_keys<float>, transpose_keys<double>>, p);
  pool.run(a.batch * blocks(a.Tq), task<forward_task<float>, forward_task<double>>, p);
}

void backward_launch(const void* p, ThreadPool& pool) {
  const AttnArgs& a = *static_cast<const AttnArgs*>(p);
  pool.run(a.batch * blocks(a.Tq), task<stats_task<float>, stats_task<double>>, p);
  AttnArgs r = a;
  for (r.item0 = 0; r.item0 < a.batch; r.item0 += a.round) {
    const int64_t items = std::min(a.round, a.batch - r.item0);
    pool.run(items * blocks(a.Tk), task<key_task<float>, key_task<double>>, &r);
    pool.run(items * blocks(a.Tq), task<query_task<float>, query_task<double>>, &r);
  }
}
}  // namespace

size_t attention_store_limit = size_t(32) << 20;

Launch lower_attention(LowerCtx& c) {
  auto* a = c.args<AttnArgs>();
  const Shape &q = c.in_shape(0), &k = c.in_shape(1);
  const size_t r = q.size();
  a->Tq = q[r - 2];
  a->Tk = k[r - 2];
  a->D = q[r - 1];
  a->batch = numel(q) / (a->Tq * a->D);
  a->causal = c.node.attr<attr::Attention>().causal;
  a->f64 = c.node.dtype == DType::F64;
  a->isa = int(active_isa());
  a->scale = c.node.attr<attr::Attention>().scale;
  a->q = c.in[0];
  a->k = c.in[1];
  a->v = c.in[2];
  a->out = c.out;
  c.kernel = "attention";
  const size_t tensors = c.node.op == Op::Attention ? 3 : 5;
  for (size_t w = 0; w < tensors; ++w) {  // the placement folds only views rows_view takes
    const std::optional<passes::RowsView> v = passes::rows_view(c.in_shape(w), c.in_stride(w));
    if (!v) throw Error("attention: an operand's rows are not contiguous or its leading dims do not merge into two");
    a->lay[w] = *v;
  }
  a->offset = c.in.size() > tensors ? static_cast<const int64_t*>(c.in[tensors]) : nullptr;
  a->partial = a->dstore = a->lse = a->kt = nullptr;
  if (c.node.op == Op::Attention) {
    if (split_tasks(a->Tq, a->Tk))
      a->partial = c.storage.scratch(size_t(a->batch * splits(a->Tk) * a->Tq * (a->D + 2)) * dtype_size(c.node.dtype));
    else if (a->Tq > kBlock)  // several query blocks read each key block
      a->kt = c.storage.scratch(size_t(a->batch * blocks(a->Tk) * kBlock * a->D) * dtype_size(c.node.dtype));
    // The rows' log-sum-exp, for a gradient of this node in the graph (outside the arena: it
    // lives from this launch to that one).
    bool read = false;
    for (const Node& n : c.g.nodes()) read = read || (n.op == Op::AttentionGrad && n.in.size() > 3 && n.in[3] == c.id);
    if (read) {
      a->lse = c.storage.persistent(size_t(a->batch * a->Tq) * dtype_size(c.node.dtype));
      c.storage.share(c.id, a->lse);
    }
    return {forward_launch, a, c.id};
  }
  a->o = c.in[3];
  a->g = c.in[4];
  // The forward that made o, lowered earlier in this plan with the same operands, kept the lse.
  const Node& fwd = c.g.node(c.node.in[3]);
  bool same = fwd.op == Op::Attention && fwd.dtype == c.node.dtype && fwd.in.size() + 2 == c.node.in.size() &&
              fwd.attr<attr::Attention>() == c.node.attr<attr::Attention>();
  for (size_t i = 0; same && i < fwd.in.size(); ++i) same = fwd.in[i] == c.node.in[i < 3 ? i : i + 2];
  if (same) a->lse = c.storage.shared(c.node.in[3]);
  a->stats = c.storage.scratch(size_t(2 * a->batch * a->Tq) * dtype_size(c.node.dtype));
  // dS stored for as many batch items as the limit holds (all of them at most), else recomputed.
  const size_t item_bytes = size_t(blocks(a->Tq) * blocks(a->Tk) * kBlock * kBlock) * dtype_size(c.node.dtype);
  const int64_t fit = item_bytes ? std::min<int64_t>(int64_t(attention_store_limit / item_bytes), a->batch) : 0;
  a->dstore = fit > 0 ? c.storage.scratch(size_t(fit) * item_bytes) : nullptr;
  a->round = fit > 0 ? fit : a->batch;
  c.kernel = a->lse ? "attention-grad+lse" : "attention-grad";  // +lse: the forward's
  return {backward_launch, a, c.id};
}

}  // namespace synoros::kernels
