// CPU kernel lowerings, one per op family. src/kernels/cpu/lowering.cpp maps ops onto these.
#pragma once

#include "ir/op_defs.hpp"
#include "kernels/jit/loop_ir.hpp"
#include "kernels/kernel_api.hpp"
#include "passes/fusion.hpp"

namespace synoros::kernels {

// Element k of an index tensor (i32 or i64), and the error for one out of [0, limit).
inline int64_t index_at(const void* p, bool i64, int64_t k) {
  return i64 ? static_cast<const int64_t*>(p)[k] : static_cast<const int32_t*>(p)[k];
}
[[noreturn]] inline void bad_index(const char* op, int64_t v, int64_t limit) {
  throw Error(std::string(op) + ": index " + std::to_string(v) + " is out of range [0, " + std::to_string(limit) + ")");
}

Launch lower_map(LowerCtx& c);       // elementwise unary/binary/ternary with broadcasting

// A fused elementwise group: `members` in tape order (the last one is the group's output), all
// of the output's shape and dtype; `externals` are the values they read from outside the group,
// broadcast against the output shape. Each block of output is computed instruction by
// instruction through L1-resident scratch, so intermediates never reach memory. Every element
// goes through the same scalar operations as unfused, so the bits are identical.
// At most passes::kFuseMaxMembers members and kFuseMaxExternals externals.
using passes::kFuseMaxMembers;
using passes::kFuseMaxExternals;
Launch lower_group(const Graph& g, const std::vector<ValueId>& members,
                   const std::vector<ValueId>& externals, const std::vector<void*>& ext_ptrs,
                   void* out, PlanStorage& storage);
// A group built by lower_group evaluated over output elements [begin, end) into dst (nothing
// written to its output), for a consumer that takes it as its prologue; group_prepare first,
// once per launch (it refreshes the group's tiled broadcast rows). Each group is registered as a
// JitSite (its walk: "r2t64i64", rank, broadcast-tile row, inner run).
void group_eval(const void* group_args, int64_t begin, int64_t end, void* dst);
void group_prepare(const void* group_args);
Launch lower_cast(LowerCtx& c);
Launch lower_dropout(LowerCtx& c);
Launch lower_reduce(LowerCtx& c);    // sum, max, mean
Launch lower_reduce_max_grad(LowerCtx& c);  // a max's input gradient, one pass per window
// Whether reduction r can take a fused elementwise prologue (LowerCtx::pro_members): a sum or
// mean over trailing axes, or over a leading and a trailing block.
bool reduce_takes_prologue(const Graph& g, ValueId r);
Launch lower_view(LowerCtx& c);      // permute, expand, slice, pad, stride, shift, unfold
Launch lower_fold(LowerCtx& c);
// What a fold (window `w`, n_in input positions per window dimension value, n_out outputs) adds
// into output position p, in its order: entries [first[p], first[p + 1]) of (in, j), the input
// position and the window index, j ascending.
struct FoldTaps {
  std::vector<int64_t> first, in, j;
};
FoldTaps fold_taps(const opdefs::WindowArgs& w, int64_t n_out, int64_t n_in);
Launch lower_einsum(LowerCtx& c);
Launch lower_softmax(LowerCtx& c);   // softmax, log_softmax
Launch lower_softmax_grad(LowerCtx& c);
Launch lower_layernorm(LowerCtx& c);
Launch lower_layernorm_backward(LowerCtx& c);  // dx, weight and bias gradients in one launch
Launch lower_conv3x3(LowerCtx& c);
// A convolution task's buffers (conv_direct.cpp, winograd.cpp): per thread, grown once and then
// reused, 64-byte aligned; valid until the thread's next call.
float* task_scratch(size_t floats);  // Winograd's F(4x4, 3x3) (winograd.cpp)
Launch lower_attention(LowerCtx& c);  // attention and its gradient, block by block (attention.cpp)
// The most scratch the gradient's stored dS blocks may take (bytes; read when a plan is lowered):
// a batch item's blocks at least, else they are computed again. It changes no bit. Change it only
// while no plan is being built (the tests do, to compare the two ways).
extern size_t attention_store_limit;
Launch lower_batchnorm(LowerCtx& c);  // normalisation with given statistics, weight and bias
Launch lower_batchnorm_sums(LowerCtx& c);  // per-channel sum(g), sum(g * xh) in one pass
Launch lower_cross_entropy(LowerCtx& c);
Launch lower_cross_entropy_grad(LowerCtx& c);
Launch lower_embedding(LowerCtx& c);
Launch lower_embedding_grad(LowerCtx& c);
Launch lower_argmax(LowerCtx& c);  // argmax and argmin (index_ops.cpp)
Launch lower_cumsum(LowerCtx& c);  // and cumprod_exclusive, cumprod
Launch lower_cumprod_grad(LowerCtx& c);
Launch lower_prod(LowerCtx& c);
Launch lower_gather(LowerCtx& c);
Launch lower_gather_grad(LowerCtx& c);  // the scatter-add of the upstream gradient

// Strided gather used by views and by einsum to bring operands into GEMM layout:
// out[i] = in[offset + sum_d idx_d * stride_d], out contiguous with shape `shape`.
struct GatherSpec {
  Shape shape;
  std::vector<int64_t> stride;
  int64_t offset = 0;
  // One bounds-checked (or wrapping) input coordinate: c = c0 + sum_d idx_d * cstride_d,
  // contributing c * cmul to the offset; out of [0, climit) reads 0 unless wrap is set.
  bool checked = false, wrap = false;
  std::vector<int64_t> cstride;
  int64_t c0 = 0, climit = 0, cmul = 0;
  // Zero-padding gates of a folded pad/unfold view (see passes::ViewGate): the offset stays
  // affine and a gated-off element reads 0.
  std::vector<passes::ViewGate> gates;
};
Launch make_gather(LowerCtx& c, const GatherSpec& spec, const void* in, void* out, size_t esize);
// Output elements [begin, end) of a gather built by make_gather / lower_view, written to dst.
void gather_range(const void* gather_args, int64_t begin, int64_t end, void* dst);

}  // namespace synoros::kernels
