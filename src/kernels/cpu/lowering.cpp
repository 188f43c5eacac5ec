// Op -> CPU kernel lowering. One row per op, in enum order, checked at compile time.
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"

namespace synoros::kernels {

namespace {
using LowerFn = Launch (*)(LowerCtx&);
struct Row {
  Op op;
  LowerFn fn;  // nullptr: leaves and reshape need no launch
};

constexpr Row kRows[] = {
    {Op::Input, nullptr},        {Op::Param, nullptr},
    {Op::Const, nullptr},        {Op::Neg, lower_map},
    {Op::Exp, lower_map},        {Op::Log, lower_map},
    {Op::Sqrt, lower_map},       {Op::Rsqrt, lower_map},
    {Op::Abs, lower_map},        {Op::Relu, lower_map},
    {Op::Gelu, lower_map},       {Op::Sigmoid, lower_map},
    {Op::Tanh, lower_map},       {Op::Cast, lower_cast},
    {Op::Add, lower_map},        {Op::Sub, lower_map},
    {Op::Mul, lower_map},        {Op::Div, lower_map},
    {Op::Pow, lower_map},        {Op::Max, lower_map},
    {Op::Min, lower_map},        {Op::CmpLt, lower_map},
    {Op::CmpEq, lower_map},      {Op::ReluGrad, lower_map},
    {Op::GeluGrad, lower_map},   {Op::Where, lower_map},
    {Op::Sum, lower_reduce},     {Op::ReduceMax, lower_reduce},
    {Op::Mean, lower_reduce},    {Op::Reshape, nullptr},
    {Op::Permute, lower_view},   {Op::Expand, lower_view},
    {Op::Slice, lower_view},     {Op::Pad, lower_view},
    {Op::Stride, lower_view},    {Op::Shift, lower_view},
    {Op::Unfold, lower_view},    {Op::Fold, lower_fold},
    {Op::Einsum, lower_einsum},  {Op::Softmax, lower_softmax},
    {Op::LogSoftmax, lower_softmax}, {Op::SoftmaxGrad, lower_softmax_grad},
    {Op::LogSoftmaxGrad, lower_softmax_grad}, {Op::LayerNorm, lower_layernorm},
    {Op::CrossEntropy, lower_cross_entropy}, {Op::CrossEntropyGrad, lower_cross_entropy_grad},
    {Op::Embedding, lower_embedding}, {Op::EmbeddingGrad, lower_embedding_grad},
    {Op::Dropout, lower_dropout},
};
static_assert(std::size(kRows) == kOpCount, "every op needs a CPU lowering row");
constexpr bool rows_in_order() {
  for (size_t i = 0; i < std::size(kRows); ++i)
    if (size_t(kRows[i].op) != i) return false;
  return true;
}
static_assert(rows_in_order(), "CPU lowering rows must follow the Op enum order");

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
Isa& isa_slot() {
  static Isa isa = [] {
    const char* env = std::getenv("SYNOROS_ISA");
    if (env && std::strcmp(env, "scalar") == 0) return Isa::Scalar;
    return cpu_has_avx2() ? Isa::Avx2 : Isa::Scalar;
  }();
  return isa;
}
}  // namespace

Isa active_isa() { return isa_slot(); }
void set_isa(Isa isa) {
  if (isa == Isa::Avx2 && !cpu_has_avx2()) throw Error("set_isa: this CPU has no AVX2+FMA");
  isa_slot() = isa;
}
const char* isa_name(Isa isa) { return isa == Isa::Avx2 ? "avx2" : "scalar"; }

Launch lower(LowerCtx& c) {
  LowerFn fn = kRows[size_t(c.node.op)].fn;
  if (!fn) return {nullptr, nullptr, c.id};
  return fn(c);
}

}  // namespace synoros::kernels
