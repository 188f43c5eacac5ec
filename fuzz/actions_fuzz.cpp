// Fuzz target: action paths (synth::decode_actions and trials::parse_actions). A decoded path
// must encode back to text that decodes to the same actions, and is replayed on the conv2d spec
// with build_from_actions.
#include "fuzz_util.hpp"
#include "synoros/trials.hpp"
#include "synoros/synth.hpp"

using namespace synoros;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::text_of(data, size));
  std::vector<synth::Action> path;
  try {
    path = synth::decode_actions(text);
  } catch (const Error& e) {
    try {
      trials::parse_actions(text);
    } catch (const Error& e2) {
      if (std::string(e.what()) != e2.what()) fuzz::fail("parse_actions fails differently");
      return 0;
    }
    fuzz::fail("parse_actions accepts what decode_actions refuses");
  }
  if (trials::parse_actions(text) != path) fuzz::fail("parse_actions and decode_actions disagree");
  try {
    if (synth::decode_actions(synth::encode_actions(path)) != path) fuzz::fail("encode/decode round trip differs");
  } catch (const Error& e) {
    fuzz::fail(std::string("an encoded path does not decode: ") + e.what());
  }

  // A fresh synthesizer per input: its arena grows with every state applied, and findings must
  // not depend on earlier inputs.
  synth::Synthesizer syn(synth::conv2d_spec());
  try {
    synth::Operator op = synth::build_from_actions(syn, path);
    if (op.path != path) fuzz::fail("the operator does not keep its path");
    synth::formula(syn.spec(), op);
  } catch (const Error&) {
  }
  return 0;
}
