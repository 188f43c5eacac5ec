// Private parts of the synthesizer shared by its source files.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "synoros/synth.hpp"

namespace synoros::synth {

struct ExprNode {
  Kind kind = Kind::Out;
  int32_t a = -1, b = -1, iter = -1;
  Size size, param;
  uint64_t hash = 0;
};

struct Synthesizer::Impl {
  std::vector<ExprNode> arena;
  std::unordered_map<uint64_t, std::vector<int32_t>> by_hash;  // hash-consing (collisions kept)
  struct Memo {
    int lb = 0;        // the distance is at least lb
    int ub = 1 << 20;  // ... and at most ub
  };
  std::unordered_map<std::string, Memo> dist_memo;
  struct SizeHash {
    size_t operator()(const Size& z) const { return size_t(z.hash()); }
  };
  std::unordered_map<Size, uint16_t, SizeHash> size_ids;  // compact size ids for memo keys
  std::vector<Size> want;                              // sorted non-fixed input sizes
  uint16_t size_id(const Size& z);
  int32_t intern(const ExprNode& n);
};

inline uint64_t hmix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

// The usage caps (Syno's allowance), one definition for the legality check and the bookkeeping.
using Usage = std::array<int8_t, 2 * kMaxVars>;
// |exponents| of a size (its coefficients' too unless `coefficients` is false).
Usage size_usage(const Size& z, bool coefficients = true);
bool within_caps(const Spec& spec, const Usage& usage, const Usage& more);
void add_usage(Usage& usage, const Usage& more);
// What an action spends (Syno's getAllowanceUsage): a reduction or stride its size; a weight the
// primary variables of each iterator it shares, each on its own (and their coefficients with
// Options::count_weight_coefficients); a merge of x^(a+b) into x^a, x^b spends (|a|+|b|-|a+b|)/2
// of each x (what the division introduces); the other views nothing.
Usage action_usage(const Spec& sp, const Options& o, const State& s, const Action& a);
// The action's result as the rules see it: no expressions, the frontier neither sorted nor
// abstracted (enough for complete() and the distance's lower bound).
State apply_rules_only(const Spec& sp, const Options& o, const State& s, const Action& a);
std::string size_key(const Size& z);
std::string canonical_string(const Operator& op);
int iter_count(const Spec& spec, const State& s);


}  // namespace synoros::synth
