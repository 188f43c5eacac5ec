// Parsing and validation of einsum specs ("bmk,bkn->bmn"), shared by shape rules, oracle,
// autodiff and kernels.
#pragma once

#include <string>
#include <vector>

#include "synoros/core.hpp"

namespace synoros {

struct EinsumSpec {
  std::vector<std::string> in;  // one label string per operand
  std::string out;
  int64_t size[128] = {};       // size of each label (indexed by char)
  // Labels in first-seen order over inputs then output.
  std::string labels() const;
};

// Throws Error on a malformed spec, a label repeated within one operand, an output label missing
// from the inputs, a rank mismatch or inconsistent sizes.
EinsumSpec parse_einsum(const std::string& spec, const std::vector<Shape>& shapes);
std::string make_einsum(const std::vector<std::string>& in, const std::string& out);

}  // namespace synoros
