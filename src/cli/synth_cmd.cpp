// `synoros synth`: enumerate, sample or search operators for a layer spec and print them with
// formula, FLOPs and parameter count.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "cli/commands.hpp"
#include "synoros/synth.hpp"

namespace synoros::cli {

namespace {
const char* kSynthUsage =
    "usage: synoros synth [spec] [options]\n"
    "spec (one of):\n"
    "  --conv2d | --conv2d-same        the built-in conv2d spec (C_in->C_out, or C->C)\n"
    "  --spec 'input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:4, g=8:3; bind: N=2, C_in=32, ...'\n"
    "  --spec-file FILE                the same text in a file (clauses per line or ';')\n"
    "options:\n"
    "  --mode enumerate|sample|mcts|random|beam   (default enumerate)\n"
    "  --depth N          maximum primitives (default 6)\n"
    "  --limit N          operators to print (default 10)\n"
    "  --iterations N     MCTS iterations / random samples (default 2000) ; --width N beam width\n"
    "  --seed S           seed (default 1)\n"
    "  --reward flops|hash  flops: FLOPs window vs a 3x3 conv (default); hash: constant-time\n"
    "                     pseudo reward (to time the search alone)\n"
    "  --checkpoint FILE  MCTS state file: resumed if it exists, saved every 500 iterations\n"
    "  --raw              also count with the canonicalization rules off (enumerate)\n"
    "  --export DIR       write each printed operator as a PyTorch module DIR/op<i>.py\n"
    "  --max-weights N --max-reductions N --no-shift --no-stride\n";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("synth: cannot read spec file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t to_int(const std::string& flag, const char* v) {
  try {
    size_t pos = 0;
    long long x = std::stoll(v, &pos);
    if (pos != std::string(v).size() || x < 0) throw 0;
    return x;
  } catch (...) {
    throw Error("synth: " + flag + " needs a non-negative integer, got '" + v + "'");
  }
}

void print_ops(const synth::Spec& spec, const std::vector<synth::Operator>& ops, const std::vector<double>* scores,
               size_t limit, const std::string& export_dir) {
  for (size_t i = 0; i < ops.size() && i < limit; ++i) {
    synth::Stats st = synth::stats(spec, ops[i], synth::binding(spec, 0));
    std::cout << "#" << i;
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
}  // namespace

int synth(int argc, char** argv) {
  std::string spec_text, mode = "enumerate", reward_kind = "flops", checkpoint, export_dir;
  bool conv = false, conv_same = false, raw = false;
  synth::Options opt;
  opt.max_depth = 6;
  size_t limit = 10, width = 8;
  uint64_t iterations = 2000, seed = 1;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw Error("synth: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--conv2d") conv = true;
    else if (a == "--conv2d-same") conv_same = true;
    else if (a == "--spec") spec_text = next();
    else if (a == "--spec-file") spec_text = read_file(next());
    else if (a == "--mode") mode = next();
    else if (a == "--depth") opt.max_depth = int(to_int(a, next()));
    else if (a == "--limit") limit = size_t(to_int(a, next()));
    else if (a == "--iterations") iterations = uint64_t(to_int(a, next()));
    else if (a == "--width") width = size_t(to_int(a, next()));
    else if (a == "--seed") seed = uint64_t(to_int(a, next()));
    else if (a == "--reward") reward_kind = next();
    else if (a == "--checkpoint") checkpoint = next();
    else if (a == "--export") export_dir = next();
    else if (a == "--raw") raw = true;
    else if (a == "--max-weights") opt.max_weights = int(to_int(a, next()));
    else if (a == "--max-reductions") opt.max_reductions = int(to_int(a, next()));
    else if (a == "--no-shift") opt.allow_shift = false;
    else if (a == "--no-stride") opt.allow_stride = false;
    else if (a == "-h" || a == "--help") {
      std::cout << kSynthUsage;
      return 0;
    } else {
      std::cerr << kSynthUsage;
      throw Error("synth: unknown option '" + a + "'");
    }
  }
  if (mode != "enumerate" && mode != "sample" && mode != "mcts" && mode != "random" && mode != "beam")
    throw Error("synth: unknown mode '" + mode + "' (enumerate, sample, mcts, random, beam)");
  if (reward_kind != "flops" && reward_kind != "hash") throw Error("synth: unknown reward '" + reward_kind + "' (flops or hash)");
  if (int(conv) + int(conv_same) + int(!spec_text.empty()) != 1)
    throw Error("synth: give exactly one spec (--conv2d, --conv2d-same, --spec or --spec-file)");
  synth::Spec spec = conv ? synth::conv2d_spec(false) : conv_same ? synth::conv2d_spec(true) : synth::parse_spec(spec_text);
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
    throw Error("synth: unknown mode '" + mode + "' (enumerate, sample, mcts, random, beam)");
  }
  std::vector<synth::Operator> ops;
  std::vector<double> scores;
  for (auto& [s, op] : res.best) scores.push_back(s), ops.push_back(op);
  print_ops(spec, ops, &scores, limit, export_dir);
  return 0;
}

}  // namespace synoros::cli
