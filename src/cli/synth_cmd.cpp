// `synoros synth`: enumerate, sample or search operators for a layer spec and print them with
// formula, FLOPs and parameter count.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_set>

#include "cli/commands.hpp"
#include "synoros/synth.hpp"

namespace synoros::cli {

namespace {
void print_ops(const synth::Spec& spec, const std::vector<synth::Operator>& ops, const std::vector<double>* scores,
               size_t limit, const std::string& export_dir) {
  // Each shown operator known (its family's name) or new.
  std::vector<synth::Operator> shown(ops.begin(), ops.begin() + std::ptrdiff_t(std::min(limit, ops.size())));
  std::vector<synth::KnownFamily> families = synth::known_families(spec);
  std::vector<std::string> family = synth::known_family_names(spec, shown, families);
  for (size_t i = 0; i < shown.size(); ++i) {
    synth::Stats st = synth::stats(spec, ops[i], synth::binding(spec, 0));
    std::cout << "#" << i;
    if (!families.empty()) std::cout << "  " << (family[i].empty() ? "new" : "known: " + family[i]);
    if (scores) std::cout << "  reward " << std::setprecision(4) << (*scores)[i];
    std::cout << "  depth " << ops[i].depth << "  FLOPs " << std::setprecision(4) << st.flops / 1e6 << "M  params "
              << std::setprecision(8) << st.params << "  (binding 0)\n    " << synth::formula(spec, ops[i])
              << "\n    path: " << synth::encode_actions(ops[i].path) << "\n";
    if (!export_dir.empty()) {
      std::string path = export_dir + "/op" + std::to_string(i) + ".py";
      std::ofstream f(path);
      if (!f) throw Error("synth: cannot write '" + path + "'");
      f << synth::pytorch_module(spec, ops[i], synth::binding(spec, 0));
      std::cout << "    -> " << path << "\n";
    }
  }
}

// Every canonical operator to the depth, evaluated and grouped by the function it computes: a
// group of several canonical forms is a canonicalization gap. With raw, operators reached only
// with the rules off join too, and a function no canonical operator computes is reported.
int print_gaps(synth::Synthesizer& syn, bool raw, uint64_t seed, size_t limit) {
  const synth::Spec& spec = syn.spec();
  synth::EnumResult r = synth::enumerate(syn);
  std::vector<synth::Operator> ops = r.operators;
  const size_t canonical = ops.size();
  if (raw) {
    synth::Options ro = syn.options();
    ro.canonical = false;
    synth::Synthesizer rsyn(spec, ro);
    std::unordered_set<std::string> have;
    for (const auto& op : ops) have.insert(op.canonical);
    for (auto& op : synth::enumerate(rsyn).operators)
      if (!have.count(op.canonical)) ops.push_back(std::move(op));
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<size_t>> groups = synth::equal_functions(spec, ops, seed);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t gaps = 0, redundant = 0, functions = 0, missed = 0;
  for (const auto& g : groups) {
    size_t c = size_t(std::count_if(g.begin(), g.end(), [&](size_t i) { return i < canonical; }));
    functions += c > 0;
    missed += c == 0;
    gaps += c > 1;
    redundant += c > 1 ? c - 1 : 0;
  }
  std::cout << canonical << " canonical operators to depth " << syn.options().max_depth << " compute " << functions
            << " distinct functions (up to weight re-layout, judged at " << spec.bindings.size()
            << " binding(s) in " << std::setprecision(3) << secs << " s): " << gaps
            << " group(s) of several canonical forms, " << redundant << " redundant form(s)\n";
  if (raw)
    std::cout << ops.size() - canonical << " operators reached only with the rules off; " << missed
              << " function(s) among them that no canonical operator computes\n";
  size_t shown = 0;
  for (const auto& g : groups) {
    size_t c = size_t(std::count_if(g.begin(), g.end(), [&](size_t i) { return i < canonical; }));
    if ((c < 2 && c > 0) || shown++ >= limit) continue;
    std::cout << (c ? "gap" : "missed") << " (" << g.size() << " forms):\n";
    for (size_t i : g)
      std::cout << "  " << (i < canonical ? "canonical" : "raw      ") << " depth " << ops[i].depth << "  "
                << synth::formula(spec, ops[i]) << "\n      path: " << synth::encode_actions(ops[i].path) << "\n";
  }
  return 0;
}
}  // namespace

int synth(const Args& a) {
  synth::Options opt;
  opt.max_depth = int(a.integer("depth"));
  if (a.has("max-weights")) opt.max_weights = int(a.integer("max-weights"));
  if (a.has("max-reductions")) opt.max_reductions = int(a.integer("max-reductions"));
  if (a.has("min-weights")) opt.min_weights = int(a.integer("min-weights"));
  if (a.has("max-weight-rank")) opt.max_weight_rank = int(a.integer("max-weight-rank"));
  if (a.has("max-vars-in-size")) opt.max_vars_in_size = int(a.integer("max-vars-in-size"));
  if (a.has("max-exponent")) opt.max_exponent = int(a.integer("max-exponent"));
  if (a.has("min-unfold-ratio")) opt.min_unfold_ratio = a.real("min-unfold-ratio");
  if (a.has("max-window")) opt.max_window = a.integer("max-window");
  if (opt.min_weights > opt.max_weights)
    throw UsageError("synth: --min-weights " + std::to_string(opt.min_weights) + " exceeds --max-weights " +
                     std::to_string(opt.max_weights));
  opt.count_weight_coefficients = a.has("count-weight-coefficients");
  opt.allow_shift = !a.has("no-shift");
  opt.allow_stride = !a.has("no-stride");
  std::string mode = a.str("mode"), reward_kind = a.str("reward"), checkpoint = a.str("checkpoint"),
              export_dir = a.str("export");
  std::string spec_text = a.has("spec") ? a.str("spec") : a.has("spec-file") ? read_text_file(a.str("spec-file"), "spec file") : "";
  bool conv = a.has("conv2d"), conv_same = a.has("conv2d-same"), raw = a.has("raw");
  size_t limit = size_t(a.integer("limit")), width = size_t(a.integer("width"));
  uint64_t iterations = uint64_t(a.integer("iterations")), seed = uint64_t(a.integer("seed"));
  if (raw && mode != "enumerate" && mode != "gaps") throw UsageError("synth: --raw applies to --mode enumerate and gaps");
  if (mode != "beam") a.refuse("width", "applies to --mode beam");
  if (mode != "mcts" && mode != "random") a.refuse("iterations", "applies to --mode mcts and random");
  if (mode == "enumerate") a.refuse("seed", "does not apply to --mode enumerate");
  if (mode == "enumerate" || mode == "sample" || mode == "gaps") a.refuse("reward", "applies to --mode mcts, random and beam");
  if (mode == "gaps") a.refuse("export", "applies to the modes that print operators");
  if (!checkpoint.empty() && mode != "mcts") throw UsageError("synth: --checkpoint applies to --mode mcts");
  if (int(conv) + int(conv_same) + int(a.has("spec")) + int(a.has("spec-file")) != 1)
    throw UsageError("synth: give exactly one spec (--conv2d, --conv2d-same, --spec or --spec-file)");
  synth::Spec spec = conv ? synth::conv2d_spec(false) : conv_same ? synth::conv2d_spec(true) : synth::parse_spec(spec_text);
  if (a.has("caps")) synth::set_caps(spec, a.str("caps"));
  synth::Synthesizer syn(spec, opt);
  syn.require_reachable();
  std::cout << "spec: input [";
  for (size_t i = 0; i < spec.input.size(); ++i) std::cout << (i ? ", " : "") << spec.str(spec.input[i]);
  std::cout << "] <- output [";
  for (size_t i = 0; i < spec.output.size(); ++i) std::cout << (i ? ", " : "") << spec.str(spec.output[i]);
  std::cout << "], " << spec.bindings.size() << " binding(s), depth <= " << opt.max_depth << ", "
            << syn.candidate_sizes().size() << " candidate sizes\n";

  synth::Reward reward;
  if (reward_kind == "flops") {
    // Reference: a dense k×k convolution's FLOPs at binding 0 when the spec looks like conv2d,
    // otherwise the first operator found.
    double ref = 2.0;
    for (const synth::Size& z : spec.output) ref *= double(spec.eval(z, 0));
    for (size_t i = 0; i < spec.input.size(); ++i)
      if (!(spec.input[i] == spec.output[std::min(i, spec.output.size() - 1)])) ref *= double(spec.eval(spec.input[i], 0));
    ref *= 9;
    reward = synth::flops_proxy_reward(syn, ref, 0.05, 0.5);
  } else if (reward_kind == "hash") {
    reward = [](const synth::Operator& op) { return double(op.hash % 1000) / 1000.0; };
  } else {
    throw Error("synth: unknown reward '" + reward_kind + "' (flops or hash)");
  }

  if (mode == "enumerate") {
    synth::EnumResult r = synth::enumerate(syn, true, limit);
    synth::EnumResult rr;
    if (raw) {
      synth::Options ro = opt;
      ro.canonical = false;
      synth::Synthesizer rsyn(spec, ro);
      rr = synth::enumerate(rsyn, false);
    }
    std::cout << "depth  sequences" << (raw ? "  raw-sequences  raw-operators" : "") << "  states  canonical-operators\n";
    uint64_t total = 0;
    for (size_t d = 0; d < r.per_depth.size(); ++d) {
      const auto& pd = r.per_depth[d];
      total += pd.operators;
      std::cout << std::setw(5) << pd.depth << std::setw(11) << pd.sequences;
      if (raw) std::cout << std::setw(15) << rr.per_depth[d].sequences << std::setw(15) << rr.per_depth[d].operators;
      std::cout << std::setw(8) << pd.states << std::setw(21) << pd.operators << "\n";
    }
    std::cout << "total canonical operators: " << total << "; states visited " << r.total_states << " in "
              << std::setprecision(3) << r.seconds << " s (" << std::setprecision(4) << double(r.total_states) / r.seconds
              << " states/s, " << double(total) / r.seconds << " operators/s)";
    if (raw) std::cout << "; raw pass " << rr.seconds << " s";
    std::cout << "\n";
    print_ops(spec, r.operators, nullptr, limit, export_dir);
    return 0;
  }
  if (mode == "gaps") return print_gaps(syn, raw, seed, limit);
  synth::SearchResult res;
  if (mode == "sample") {
    std::mt19937_64 rng(seed);
    std::vector<synth::Operator> ops;
    for (size_t i = 0; i < limit; ++i) {
      synth::Operator op;
      if (synth::sample(syn, rng, op)) ops.push_back(op);
    }
    print_ops(spec, ops, nullptr, limit, export_dir);
    return 0;
  } else if (mode == "mcts") {
    synth::MctsOptions mo;
    mo.seed = seed;
    mo.checkpoint = checkpoint;
    mo.checkpoint_every = checkpoint.empty() ? 0 : 500;
    synth::Mcts m(syn, reward, mo);
    if (!checkpoint.empty() && std::ifstream(checkpoint).good()) {
      m.load(checkpoint);
      std::cout << "resumed from " << checkpoint << " at iteration " << m.iterations() << "\n";
    }
    uint64_t before = m.iterations();
    res = m.run(iterations);
    std::cout << "mcts: " << res.iterations - before << " iterations in " << std::setprecision(3) << res.seconds << " s ("
              << std::setprecision(5) << double(res.iterations - before) / res.seconds << " it/s), " << m.nodes()
              << " nodes, " << res.evaluations << " distinct operators evaluated\n";
  } else if (mode == "random") {
    res = synth::random_search(syn, reward, iterations, seed, limit);
    std::cout << "random: " << res.iterations << " samples in " << std::setprecision(3) << res.seconds << " s ("
              << std::setprecision(5) << double(res.iterations) / res.seconds << " samples/s), " << res.evaluations
              << " distinct operators evaluated\n";
  } else if (mode == "beam") {
    res = synth::beam_search(syn, reward, width, seed, limit);
    std::cout << "beam: " << res.iterations << " children scored in " << std::setprecision(3) << res.seconds << " s, "
              << res.evaluations << " distinct operators evaluated\n";
  } else {
    throw Error("synth: unknown mode '" + mode + "' (enumerate, sample, mcts, random, beam, gaps)");
  }
  std::vector<synth::Operator> ops;
  std::vector<double> scores;
  for (auto& [s, op] : res.best) scores.push_back(s), ops.push_back(op);
  print_ops(spec, ops, &scores, limit, export_dir);
  return 0;
}

}  // namespace synoros::cli
