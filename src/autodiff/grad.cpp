#include "synoros/autodiff.hpp"

namespace synoros {

std::vector<ValueId> grad(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed) {
  return grad(g, loss, wrt, seed, {});
}

std::vector<ValueId> grad(Graph& g, ValueId loss, const std::vector<ValueId>& wrt, ValueId seed,
                          const std::vector<int32_t>& recompute) {
  if (loss < 0 || size_t(loss) >= g.size()) throw Error("grad: loss is not a value of this graph");
  const size_t existing = g.size();  // values made before: the forward's, the data's, a given seed
  if (!is_float(g.dtype(loss))) throw Error("grad: loss must be a float tensor");
  if (seed == kNoValue) {
    if (!g.shape(loss).empty())
      throw Error("grad: loss must be a scalar, got shape " + shape_str(g.shape(loss)) +
                  " (pass a seed gradient for non-scalar outputs)");
    seed = g.scalar(1.0, g.dtype(loss));
  } else if (g.shape(seed) != g.shape(loss)) {
    throw Error("grad: seed shape " + shape_str(g.shape(seed)) + " differs from loss shape " +
                shape_str(g.shape(loss)));
  }
  size_t n = size_t(loss) + 1;
  // Only nodes on a path from some w to the loss need adjoints.
  std::vector<bool> from_wrt(n, false);
  for (ValueId w : wrt) {
    if (w < 0 || size_t(w) >= g.size()) throw Error("grad: wrt refers to a value not in this graph");
    if (size_t(w) < n) from_wrt[size_t(w)] = true;
  }
  for (size_t i = 0; i < n; ++i)
    for (ValueId x : g.node(ValueId(i)).in)
      if (from_wrt[size_t(x)]) from_wrt[i] = true;

  // Activation checkpointing: the value a gradient reads in place of forward value v.
  auto segment = [&](size_t v) { return v < recompute.size() && v < n ? recompute[v] : -1; };
  std::vector<bool> kept(n, true);  // a segment value read outside its segment stays as it is
  bool any_segment = false;
  for (size_t i = 0; i < n; ++i) {
    if (segment(i) < 0 || op_info(g.node(ValueId(i)).op).kind == OpKind::Leaf) continue;
    kept[i] = i == size_t(loss);
    any_segment = true;
  }
  if (any_segment)
    for (size_t i = 0; i < n; ++i)
      for (ValueId x : g.node(ValueId(i)).in)
        if (segment(size_t(x)) >= 0 && segment(i) != segment(size_t(x))) kept[size_t(x)] = true;
  std::vector<ValueId> again(any_segment ? n : 0, kNoValue);
  auto rebuilt_inputs = [&](const Node& nd) {
    std::vector<ValueId> in;
    for (ValueId x : nd.in) in.push_back(kept[size_t(x)] ? x : again[size_t(x)]);
    return in;
  };
  // The recomputed value of v and of what it needs from its segment, in tape order (iterative:
  // a long segment cannot overflow the stack).
  auto recomputed = [&](ValueId v) {
    if (kept[size_t(v)]) return v;
    std::vector<ValueId> stack{v};
    while (!stack.empty()) {
      ValueId t = stack.back();
      if (again[size_t(t)] != kNoValue) {
        stack.pop_back();
        continue;
      }
      const Node nd = g.node(t);
      bool ready = true;
      for (ValueId x : nd.in)
        if (!kept[size_t(x)] && again[size_t(x)] == kNoValue) stack.push_back(x), ready = false;
      if (!ready) continue;
      again[size_t(t)] = g.add(nd.op, rebuilt_inputs(nd), nd.attrs, nd.dtype);
      stack.pop_back();
    }
    return again[size_t(v)];
  };
  // What a segment value's VJP reads: its recomputed node, whose inputs are recomputed too. A
  // kept value is computed once more for this (one op), so that its VJP reads no forward copy
  // of the segment's other values.
  auto vjp_node = [&](ValueId v) {
    if (segment(size_t(v)) < 0 || op_info(g.node(v).op).kind == OpKind::Leaf) return v;
    if (!kept[size_t(v)]) return recomputed(v);
    const Node nd = g.node(v);
    for (ValueId x : nd.in) recomputed(x);
    return g.add(nd.op, rebuilt_inputs(nd), nd.attrs, nd.dtype);
  };

  std::vector<std::vector<ValueId>> contrib(n);
  contrib[size_t(loss)].push_back(seed);
  std::vector<ValueId> adj(n, kNoValue);
  for (size_t i = n; i-- > 0;) {
    if (contrib[i].empty() || !from_wrt[i]) continue;
    // A tied table's two contributions, one of them an embedding's gradient: its rows are added to
    // the other where that lies (the same bits as the sum; no table-sized buffer for the rows).
    int emb = -1;  // which contribution is the embedding's rows
    if (contrib[i].size() == 2)
      for (int k = 1; k >= 0 && emb < 0; --k)
        if (const Node& e = g.node(contrib[i][size_t(k)]); e.op == Op::EmbeddingGrad && e.in.size() == 2) emb = k;
    ValueId a = contrib[i][0];
    if (emb >= 0) {
      const Node e = g.node(contrib[i][size_t(emb)]);
      a = g.add(Op::EmbeddingGrad, {e.in[0], e.in[1], contrib[i][size_t(1 - emb)]}, e.attrs, e.dtype);
    } else {
      for (size_t k = 1; k < contrib[i].size(); ++k) a = g.binary(Op::Add, a, contrib[i][k]);
    }
    adj[i] = a;
    Node node = g.node(ValueId(i));
    const OpInfo& info = op_info(node.op);
    if (info.kind == OpKind::Leaf) continue;
    bool any = false;
    for (ValueId x : node.in) any = any || from_wrt[size_t(x)];
    if (!any) continue;
    if (!info.vjp) {
      throw Error(std::string("grad: op '") + info.name + "' at %" + std::to_string(i) +
                  " is not differentiable, but a gradient flows through it");
    }
    std::vector<ValueId> gin(node.in.size(), kNoValue);
    info.vjp(g, vjp_node(ValueId(i)), a, gin);
    for (size_t k = 0; k < node.in.size(); ++k) {
      if (gin[k] != kNoValue && from_wrt[size_t(node.in[k])])
        contrib[size_t(node.in[k])].push_back(gin[k]);
    }
  }
  std::vector<ValueId> out;
  for (ValueId w : wrt) {
    if (size_t(w) < n && adj[size_t(w)] != kNoValue) {
      // A gradient that is a forward value (VJPs drop products with 1: the gradient of sum(a * b)
      // for a is b) is returned as a value of its own, so that it is never the tensor it equals.
      ValueId a = adj[size_t(w)];
      if (size_t(a) < existing) a = g.binary(Op::Mul, a, g.scalar(1.0, g.dtype(a)));
      out.push_back(a);
    } else {
      ValueId z = g.scalar(0.0, g.dtype(w));
      out.push_back(g.expand(z, g.shape(w)));
    }
  }
  return out;
}

}  // namespace synoros
