// A convolution's data gradient as one launch. Autodiff writes the input gradient of a strided
// convolution as fold(fold(einsum(dY, W))): the contraction materialises the unfolded gradient
// [N, C, OH, OW, KH, KW] (KH*KW times the input's size) and two folds add it back into
// [N, C, H, W]. The plan hands the whole chain to the last fold; here it runs as the engine's
// one-pass kernel (engine-conv-data, conv_direct.cpp) where it applies, else as that same
// sequence of kernels in the launch's scratch (both with the bits of the unfused plan) -- or, in
// fast mode, as oneDNN's backward-data convolution, which never materialises the unfolded
// gradient, checked against float64 and timed against the engine's, like every provider.
#include <optional>
#include <string>

#include "ir/einsum_spec.hpp"
#include "ir/op_defs.hpp"
#include "kernels/cpu/conv_direct.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/onednn_conv.hpp"

namespace synoros::kernels {

namespace {
// The chain as its own kernels: einsum -> scratch, fold -> scratch, fold -> out.
Launch lower_sequence(const Graph& g, const ConvDataChain& m, ValueId f2, PlanStorage& storage,
                      const std::vector<void*>& ein, const std::vector<const Buffer*>& params, void* out,
                      std::string* kernel = nullptr) {
  const Node& ne = g.node(m.e);
  const Node& n1 = g.node(m.f1);
  const Node& n2 = g.node(f2);
  void* s1 = storage.scratch(size_t(numel(ne.shape)) * 4);
  void* s2 = storage.scratch(size_t(numel(n1.shape)) * 4);
  LowerCtx ce{g, m.e, ne, ein, s1, storage};
  ce.in_param = params;
  Launch le = lower(ce);
  if (kernel) *kernel = (ce.kernel.empty() ? "einsum" : ce.kernel) + "+fold";
  LowerCtx c1{g, m.f1, n1, {s1}, s2, storage};
  Launch l1 = lower(c1);
  LowerCtx c2{g, f2, n2, {s2}, out, storage};
  Launch l2 = lower(c2);
  return sequence(storage, sequence(storage, le, l1, f2), l2, f2);
}
}  // namespace

Launch lower_conv_data_grad(LowerCtx& c) {
  std::optional<ConvDataChain> m = passes::match_conv_data_grad(c.g, c.id);
  if (!m || c.chain.size() != 2 || c.chain[0] != m->e || c.chain[1] != m->f1 || c.chain_in.size() != 2)
    throw Error("fold: the plan's convolution data-gradient chain does not match the graph");
  std::vector<const Buffer*> params = c.chain_param;
  params.resize(2, nullptr);
  int dy = m->dy;
  const auto* dyp = static_cast<const float*>(c.chain_in[size_t(dy)]);
  const auto* wp = static_cast<const float*>(c.chain_in[size_t(1 - dy)]);
  // The engine's own one-pass kernel where it applies (the unfolded gradient never leaves the
  // core's cache), else the chain's three kernels.
  if (std::optional<Launch> d = lower_conv_data_grad_direct(c, *m, dyp, wp)) {
    ProbeLowering on_probe = [&c, &m](PlanStorage& storage, float* x, float* b, float* y) {
      LowerCtx pc{c.g, c.id, c.node, {}, y, storage};
      return *lower_conv_data_grad_direct(pc, *m, x, b);
    };
    Launch l = select_onednn(c, m->g, dyp, wp, *d, on_probe);
    if (c.kernel == "onednn-conv" || c.kernel == "onednn-wino") c.kernel += "-data";
    return l;
  }
  // The choice is made in the real pass, so both paths get scratch in both: the frame holds the
  // unfolded gradient even when oneDNN is chosen (the memory the unfused plan used anyway).
  Launch seq = lower_sequence(c.g, *m, c.id, c.storage, c.chain_in, params, c.out, &c.kernel);
  ProbeLowering on_probe = [&c, &m, dy](PlanStorage& storage, float* x, float* b, float* y) {
    std::vector<void*> in(2);
    in[size_t(dy)] = x;
    in[size_t(1 - dy)] = b;
    return lower_sequence(c.g, *m, c.id, storage, in, {nullptr, nullptr}, y);
  };
  Launch l = select_onednn(c, m->g, dyp, wp, seq, on_probe);
  if (c.kernel == "onednn-conv" || c.kernel == "onednn-wino") c.kernel += "-data";
  return l;
}

}  // namespace synoros::kernels
