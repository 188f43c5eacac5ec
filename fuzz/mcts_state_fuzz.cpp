// Fuzz target: the MCTS checkpoint file (Mcts::load). A checkpoint starts with its magic line
// and a fingerprint of the spec and options, which random input never matches; the target
// takes both from a checkpoint it saves itself and the input supplies everything after them
// (iterations, evaluations, generator state, nodes, reward cache, best operators). Whether the
// load succeeds or is refused, the search must be able to go on for another iteration.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fuzz_util.hpp"
#include "synoros/synth.hpp"

using namespace synoros;

namespace {

synth::Options options() {
  synth::Options o;
  o.max_depth = 5;
  return o;
}

double constant_reward(const synth::Operator&) { return 0.5; }

// "synoros-mcts 1\n<fingerprint> <seed> " of a fresh search over the conv2d spec.
std::string header() {
  char dir_template[] = "/tmp/synoros-fuzz-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) fuzz::fail("mkdtemp failed");
  const std::string path = std::string(dir) + "/mcts.state";
  synth::Synthesizer syn(synth::conv2d_spec(), options());
  synth::Mcts m(syn, constant_reward);
  m.save(path);
  std::ifstream in(path);
  std::string magic, version, fingerprint, seed;
  in >> magic >> version >> fingerprint >> seed;
  std::filesystem::remove_all(dir);
  if (magic != "synoros-mcts") fuzz::fail("cannot read back the checkpoint header");
  return magic + " " + version + "\n" + fingerprint + " " + seed + " ";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string head = header();
  // One synthesizer for all inputs: a fresh one would compute every shape distance again, which
  // makes an input take a second. Its arena and memo only cache what the spec determines.
  static synth::Synthesizer syn(synth::conv2d_spec(), options());
  fuzz::MemFile file(head + std::string(fuzz::text_of(data, size)));
  synth::Mcts m(syn, constant_reward);
  try {
    m.load(file.path());
  } catch (const Error&) {
  }
  if (m.nodes() == 0) fuzz::fail("a search without nodes");
  try {
    m.run(m.iterations() + 1);
  } catch (const Error& e) {
    fuzz::fail(std::string("the search cannot go on: ") + e.what());
  }
  return 0;
}
