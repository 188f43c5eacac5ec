// Op -> CPU kernel lowering, one row per op expanded from the op list (ops.def).
#include <cstdlib>
#include <cstring>

#include "synoros/config.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/onednn_conv.hpp"
#include "kernels/providers.hpp"
#include "kernels/cpu/line_fn.hpp"
#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/window_einsum.hpp"
#include "kernels/jit/compiler.hpp"

namespace synoros::kernels {

namespace {
using LowerFn = Launch (*)(LowerCtx&);
constexpr LowerFn none = nullptr;  // leaves and aliases need no launch
constexpr LowerFn kLower[] = {
#define SYNOROS_OP(Enum, ident, arity, kind, infer, vjp, oracle, cost, lower, ...) lower,
#define SYNOROS_MAP(Enum, ...) lower_map,
#include "synoros/ops.def"
};

Isa detect_isa() {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return Isa::Scalar;
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return avx512 ? Isa::Avx512 : Isa::Avx2;
}
Isa& isa_slot() {
  static Isa isa = [] {
    // A cap: asking for more than the CPU has gives what it has.
    Isa best = detect_isa();
    std::string env = config::text("SYNOROS_ISA");
    if (env == "scalar") return Isa::Scalar;
    if (env == "avx2" && best != Isa::Scalar) return Isa::Avx2;
    return best;
  }();
  return isa;
}
}  // namespace

Isa active_isa() { return isa_slot(); }
namespace {
bool& fast_slot() {
  static bool s = config::flag("SYNOROS_FAST") && !config::flag("SYNOROS_STRICT");
  return s;
}
}  // namespace
bool fast_kernels() { return fast_slot(); }
bool strict_kernels() { return !fast_slot(); }
void set_fast_kernels(bool on) { fast_slot() = on; }
void set_strict_kernels(bool on) { fast_slot() = !on; }

std::string kernel_config() {
  // Built with appends into one string: every plan lookup (an eager loop's steps) asks for it,
  // and the usual settings ("avx512 jit") fit the string's own storage, without an allocation.
  std::string c;
  c += isa_name(active_isa());
  const bool fast = fast_kernels();
  if (fast) c += " fast";
  if (const std::string& conv = forced_conv_lowering(); !conv.empty()) c += " conv=", c += conv;
  if (!window_einsum_enabled()) c += " nowindow";
  if (!conv_direct_enabled()) c += " noconvdirect";
  if (fast)
    if (std::string replayed = replayed_choices_id(); !replayed.empty()) c += " replay=", c += replayed;
  if (jit::enabled()) c += " jit";
  return c;
}
Isa best_isa() { return detect_isa(); }
void set_isa(Isa isa) {
  if (int(isa) > int(detect_isa())) throw Error(std::string("set_isa: this CPU has no ") + isa_name(isa));
  isa_slot() = isa;
}
const char* isa_name(Isa isa) {
  return isa == Isa::Avx512 ? "avx512" : isa == Isa::Avx2 ? "avx2" : "scalar";
}

// The active ISA's build of a per-ISA picker.
template <class Pick>
Pick for_active_isa(Pick avx512_pick, Pick avx2_pick, Pick scalar_pick) {
  switch (active_isa()) {
    case Isa::Avx512: return avx512_pick;
    case Isa::Avx2: return avx2_pick;
    case Isa::Scalar: break;
  }
  return scalar_pick;
}
LineFn pick_line(Op op, DType t) { return for_active_isa(avx512::pick_line, avx2::pick_line, scalar::pick_line)(op, t); }
StagedLineFn pick_staged(Op op, DType t) {
  return for_active_isa(avx512::pick_staged, avx2::pick_staged, scalar::pick_staged)(op, t);
}

namespace {
struct Sequence {
  Launch first, second;
};
void sequence_launch(const void* p, ThreadPool& pool) {
  const Sequence& s = *static_cast<const Sequence*>(p);
  s.first.fn(s.first.args, pool);
  s.second.fn(s.second.args, pool);
}
}  // namespace

Launch sequence(PlanStorage& storage, Launch first, Launch second, ValueId node) {
  auto* s = storage.make<Sequence>();
  s->first = first;
  s->second = second;
  return {sequence_launch, s, node};
}

Launch lower(LowerCtx& c) {
  LowerFn fn = kLower[size_t(c.node.op)];
  if (!fn) return {nullptr, nullptr, c.id};
  return fn(c);
}

}  // namespace synoros::kernels

namespace synoros {
bool fast_mode() { return kernels::fast_kernels(); }
void set_fast_mode(bool on) { kernels::set_fast_kernels(on); }
}  // namespace synoros

