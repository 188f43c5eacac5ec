// Fuzz target: one line of a search's evaluations.jsonl (trials::evaluation_from_json), the log
// a resumed search reads back. A record that parses must survive to_json and back unchanged.
#include "fuzz_util.hpp"
#include "synoros/trials.hpp"

using namespace synoros;

namespace {

bool same(const trials::Evaluation& a, const trials::Evaluation& b) {
  return a.key == b.key && a.formula == b.formula && a.actions == b.actions && a.failed == b.failed &&
         a.error == b.error && a.class_mask == b.class_mask && a.accuracy == b.accuracy && a.loss == b.loss &&
         a.trained_epochs == b.trained_epochs && a.latency.b1_t1 == b.latency.b1_t1 &&
         a.latency.b64_t1 == b.latency.b64_t1 && a.latency.b1_t2 == b.latency.b1_t2 &&
         a.latency.b64_t2 == b.latency.b64_t2 && a.paired_base_b64_t1 == b.paired_base_b64_t1 &&
         a.flops == b.flops && a.params == b.params && a.train_seconds == b.train_seconds && a.reward == b.reward &&
         a.order == b.order;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trials::Evaluation e;
  try {
    e = trials::evaluation_from_json(std::string(fuzz::text_of(data, size)));
  } catch (const Error&) {
    return 0;
  }
  try {
    if (!same(trials::evaluation_from_json(trials::to_json(e)), e)) fuzz::fail("the record changes through to_json");
  } catch (const Error& ex) {
    fuzz::fail(std::string("to_json writes a record that does not parse: ") + ex.what());
  }
  return 0;
}
