// Known operator families: the convolutions and the linear-layer factorizations people already
// use, built by hand from index expressions in a spec's own variables, so a searched operator can
// be named known or new.
#include <algorithm>

#include "synoros/synth.hpp"

namespace synoros::synth {

namespace {

// An operator written by hand: iterators (the outputs, then the reductions) and index nodes.
class Builder {
 public:
  Builder(const Spec& spec, const std::vector<Size>& reduces) {
    op_.n_out = int(spec.output.size());
    op_.iter_sizes = spec.output;
    op_.iter_sizes.insert(op_.iter_sizes.end(), reduces.begin(), reduces.end());
  }
  int32_t it(int i) { return node(i < op_.n_out ? Kind::Out : Kind::Red, -1, -1, i, op_.iter_sizes[size_t(i)]); }
  // main + window - (|window| - 1) / 2, zero outside: a "same" convolution window.
  int32_t unfold(int32_t main, int32_t window) {
    return node(Kind::Unfold, main, window, -1, op_.nodes[size_t(main)].size, op_.nodes[size_t(window)].size);
  }
  int32_t stride(int32_t a, const Size& s) { return node(Kind::Stride, a, -1, -1, op_.nodes[size_t(a)].size * s, s); }
  int32_t shift(int32_t a) { return node(Kind::Shift, a, -1, -1, op_.nodes[size_t(a)].size); }
  // Output channel o of C_out in g groups: its group o / (C_out/g), then the group's input channel c.
  int32_t grouped_channel(int out_iter, int red_iter, const Size& g, const Size& c_in) {
    int32_t grp = node(Kind::Div, it(out_iter), -1, -1, g, op_.iter_sizes[size_t(out_iter)] / g);
    return node(Kind::Split, grp, it(red_iter), -1, c_in, c_in / g);
  }
  Operator finish(std::vector<int32_t> x_root, std::vector<std::vector<int32_t>> weights) {
    op_.x_root = std::move(x_root);
    op_.weights = std::move(weights);
    op_.canonical = canonical_form(op_);
    return op_;
  }

 private:
  int32_t node(Kind k, int32_t a, int32_t b, int32_t iter, Size size, Size param = {}) {
    op_.nodes.push_back({k, a, b, iter, size, param});
    return int32_t(op_.nodes.size() - 1);
  }
  Operator op_;
};

}  // namespace

std::vector<KnownFamily> known_families(const Spec& spec) {
  std::vector<KnownFamily> out;
  // The layout these families are written for: [N, C_in, H, W] -> [N, C_out, H, W] (or one C).
  auto named = [&](const std::vector<Size>& dims, size_t i, const char* a, const char* b = nullptr) {
    if (i >= dims.size()) return false;
    int p = spec.find_primary(a), q = b ? spec.find_primary(b) : -1;
    Size sa, sb;
    if (p >= 0) sa.p[size_t(p)] = 1;
    if (q >= 0) sb.p[size_t(q)] = 1;
    return (p >= 0 && dims[i] == sa) || (q >= 0 && dims[i] == sb);
  };
  const bool linear = spec.input.size() == 2 && spec.output.size() == 2;
  if (linear ? !named(spec.input, 0, "N") || !named(spec.output, 0, "N") || !named(spec.input, 1, "C_in", "C") ||
                   !named(spec.output, 1, "C_out", "C")
             : spec.input.size() != 4 || spec.output.size() != 4 || !named(spec.input, 0, "N") ||
                   !named(spec.output, 0, "N") || !named(spec.input, 1, "C_in", "C") ||
                   !named(spec.output, 1, "C_out", "C") || !named(spec.input, 2, "H") || !named(spec.output, 2, "H") ||
                   !named(spec.input, 3, "W") || !named(spec.output, 3, "W"))
    return out;
  const Size ci = spec.input[1], co = spec.output[1];
  auto coef = [&](const char* name, Size& s) {
    int c = spec.find_coefficient(name);
    if (c < 0) return false;
    s = Size{};
    s.c[size_t(c)] = 1;
    return true;
  };
  Size k, s;
  bool has_k = coef("k", k), has_s = coef("s", s);
  auto add = [&](const std::string& name, std::vector<Size> reduces, auto&& build) {
    for (const Size& z : reduces)
      if (!spec.legal(z)) return;
    Builder b(spec, reduces);
    out.push_back({name, build(b)});
  };
  // Groups and ranks may be any coefficient of the spec (g groups, rank k, ...).
  std::vector<std::pair<std::string, Size>> counts;
  for (const Var& v : spec.coefficient) {
    Size z;
    z.c[size_t(spec.find_coefficient(v.name))] = 1;
    counts.push_back({v.name, z});
  }
  if (linear) {  // [N, C_in] -> [N, C_out]; iterators: 0 N, 1 C_out, then the reductions from 2
    add("dense linear", {ci}, [](Builder& b) { return b.finish({b.it(0), b.it(2)}, {{1, 2}}); });
    for (const auto& [v, c] : counts)
      if (spec.legal(co / c))  // block-diagonal: output channels in groups of C_out / c
        add("grouped linear (" + v + " groups)", {ci / c},
            [&, c = c](Builder& b) { return b.finish({b.it(0), b.grouped_channel(1, 2, c, ci)}, {{1, 2}}); });
    // x W1 W2 through a bottleneck of rank m, C_in / m or C_out / m, for every product m of the
    // coefficients, each up to its usage cap (g, g·h, g²·h², ...): a rank spelled as several
    // reductions (Σ_{r1<g·h, r2<g·h}) is still this family, up to a re-layout of the weights.
    std::vector<std::pair<std::string, Size>> ranks = {{"", Size{}}};
    for (size_t i = 0; i < counts.size(); ++i) {
      const auto& [v, c] = counts[i];
      std::vector<std::pair<std::string, Size>> next;
      for (const auto& [name, m] : ranks) {
        Size power = m;
        for (int e = 0; e <= std::max(1, spec.coefficient[i].cap); ++e, power = power * c)
          next.push_back({e == 0 ? name
                                 : name + (name.empty() ? "" : "*") + v + (e > 1 ? "^" + std::to_string(e) : ""),
                          power});
      }
      ranks = std::move(next);
    }
    // Low rank where the bottleneck is narrower than both sides under every binding; a wider one
    // is a dense product written as two.
    auto below_both = [&](const Size& r) {
      for (size_t b = 0; b < spec.bindings.size(); ++b)
        if (!spec.legal(r) || spec.eval(r, b) >= std::min(spec.eval(ci, b), spec.eval(co, b))) return false;
      return true;
    };
    for (const auto& [name, m] : ranks) {
      if (name.empty()) continue;
      const std::string den = name.find('*') == std::string::npos ? name : "(" + name + ")";
      for (const auto& [rank, r] :
           {std::pair<std::string, Size>{name, m}, {"C_in/" + den, ci / m}, {"C_out/" + den, co / m}})
        add((below_both(r) ? "low-rank linear (rank " : "factored dense linear (rank ") + rank + ")", {ci, r},
            [](Builder& b) { return b.finish({b.it(0), b.it(2)}, {{2, 3}, {1, 3}}); });
    }
    return out;
  }
  // Iterators: 0 N, 1 C_out, 2 H, 3 W, then the reductions from 4.
  add("pointwise", {ci}, [](Builder& b) { return b.finish({b.it(0), b.it(4), b.it(2), b.it(3)}, {{1, 4}}); });
  add("shifted pointwise (H)", {ci},
      [](Builder& b) { return b.finish({b.it(0), b.it(4), b.shift(b.it(2)), b.it(3)}, {{1, 4}}); });
  add("shifted pointwise (W)", {ci},
      [](Builder& b) { return b.finish({b.it(0), b.it(4), b.it(2), b.shift(b.it(3))}, {{1, 4}}); });
  for (const auto& [v, c] : counts) {
    if (spec.legal(co / c))  // output channels in groups of C_out / c
      add("grouped pointwise (" + v + " groups)", {ci / c}, [&, c = c](Builder& b) {
        return b.finish({b.it(0), b.grouped_channel(1, 4, c, ci), b.it(2), b.it(3)}, {{1, 4}});
      });
    add("low-rank pointwise (rank " + v + ")", {ci, c},
        [](Builder& b) { return b.finish({b.it(0), b.it(4), b.it(2), b.it(3)}, {{4, 5}, {1, 5}}); });
  }
  if (!has_k) return out;
  add("standard kxk", {ci, k, k}, [](Builder& b) {
    return b.finish({b.it(0), b.it(4), b.unfold(b.it(2), b.it(5)), b.unfold(b.it(3), b.it(6))}, {{1, 4, 5, 6}});
  });
  add("separable kx1", {ci, k},
      [](Builder& b) { return b.finish({b.it(0), b.it(4), b.unfold(b.it(2), b.it(5)), b.it(3)}, {{1, 4, 5}}); });
  add("separable 1xk", {ci, k},
      [](Builder& b) { return b.finish({b.it(0), b.it(4), b.it(2), b.unfold(b.it(3), b.it(5))}, {{1, 4, 5}}); });
  if (ci == co)
    add("depthwise kxk", {k, k}, [](Builder& b) {
      return b.finish({b.it(0), b.it(1), b.unfold(b.it(2), b.it(4)), b.unfold(b.it(3), b.it(5))}, {{1, 4, 5}});
    });
  for (const auto& [v, c] : counts) {
    if (spec.legal(co / c))
      add("grouped kxk (" + v + " groups)", {ci / c, k, k}, [&, c = c](Builder& b) {
        return b.finish(
            {b.it(0), b.grouped_channel(1, 4, c, ci), b.unfold(b.it(2), b.it(5)), b.unfold(b.it(3), b.it(6))},
            {{1, 4, 5, 6}});
      });
    add("low-rank kxk (rank " + v + ")", {ci, k, k, c}, [](Builder& b) {
      return b.finish({b.it(0), b.it(4), b.unfold(b.it(2), b.it(5)), b.unfold(b.it(3), b.it(6))},
                      {{4, 5, 6, 7}, {1, 7}});
    });
  }
  // A window of k·s read every s is centred as PyTorch's dilated convolution when (k·s - 1) / 2
  // = s·(k - 1) / 2 (odd k and s < 3, say k = 3, s = 2); other values are another operator.
  int64_t kv = has_k ? spec.coefficient[size_t(spec.find_coefficient("k"))].value : 0;
  int64_t sv = has_s ? spec.coefficient[size_t(spec.find_coefficient("s"))].value : 0;
  if (has_s && kv % 2 == 1 && (kv * sv - 1) / 2 == sv * (kv - 1) / 2)
    add("dilated kxk", {ci, k, k}, [&](Builder& b) {
      return b.finish({b.it(0), b.it(4), b.unfold(b.it(2), b.stride(b.it(5), s)), b.unfold(b.it(3), b.stride(b.it(6), s))},
                      {{1, 4, 5, 6}});
    });
  return out;
}

std::vector<std::string> known_family_names(const Spec& spec, const std::vector<Operator>& ops,
                                            const std::vector<KnownFamily>& families, uint64_t seed) {
  std::vector<std::string> names(ops.size());
  std::vector<size_t> open;  // not named by their canonical form
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const KnownFamily& f : families)
      if (f.op.canonical == ops[i].canonical) names[i] = f.name;
    if (names[i].empty()) open.push_back(i);
  }
  if (open.empty() || families.empty()) return names;
  // The rest by the function they compute (a spelling the canonical rules do not merge).
  std::vector<Operator> all;
  for (const KnownFamily& f : families) all.push_back(f.op);
  for (size_t i : open) all.push_back(ops[i]);
  for (const std::vector<size_t>& group : equal_functions(spec, all, seed)) {
    const std::string* family = nullptr;
    for (size_t j : group)
      if (j < families.size()) family = &families[j].name;
    if (!family) continue;
    for (size_t j : group)
      if (j >= families.size()) names[open[j - families.size()]] = *family;
  }
  return names;
}

}  // namespace synoros::synth
