#include "ir/einsum_spec.hpp"

#include <cctype>

namespace synoros {

std::string EinsumSpec::labels() const {
  std::string l;
  auto addl = [&](const std::string& s) {
    for (char c : s)
      if (l.find(c) == std::string::npos) l += c;
  };
  for (const auto& s : in) addl(s);
  addl(out);
  return l;
}

EinsumSpec parse_einsum(const std::string& spec, const std::vector<Shape>& shapes) {
  EinsumSpec e;
  auto arrow = spec.find("->");
  if (arrow == std::string::npos) throw Error("einsum spec '" + spec + "' has no '->'");
  std::string lhs = spec.substr(0, arrow);
  e.out = spec.substr(arrow + 2);
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    e.in.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.in.size() != shapes.size()) {
    throw Error("einsum spec '" + spec + "' names " + std::to_string(e.in.size()) +
                " operands but " + std::to_string(shapes.size()) + " were given");
  }
  auto check_labels = [&](const std::string& s) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>(s[i])))
        throw Error("einsum spec '" + spec + "': label '" + std::string(1, s[i]) + "' is not a letter");
      if (s.find(s[i], i + 1) != std::string::npos)
        throw Error("einsum spec '" + spec + "': label '" + std::string(1, s[i]) +
                    "' repeats within one operand (diagonals are not supported)");
    }
  };
  for (int64_t& s : e.size) s = -1;
  for (size_t k = 0; k < e.in.size(); ++k) {
    check_labels(e.in[k]);
    if (e.in[k].size() != shapes[k].size()) {
      throw Error("einsum spec '" + spec + "': operand " + std::to_string(k) + " has rank " +
                  std::to_string(shapes[k].size()) + " but its labels '" + e.in[k] + "' say " +
                  std::to_string(e.in[k].size()));
    }
    for (size_t i = 0; i < e.in[k].size(); ++i) {
      int64_t& sz = e.size[int(e.in[k][i])];
      if (sz >= 0 && sz != shapes[k][i]) {
        throw Error("einsum spec '" + spec + "': label '" + std::string(1, e.in[k][i]) +
                    "' has size " + std::to_string(sz) + " and " + std::to_string(shapes[k][i]));
      }
      sz = shapes[k][i];
    }
  }
  check_labels(e.out);
  for (char c : e.out) {
    if (e.size[int(c)] < 0)
      throw Error("einsum spec '" + spec + "': output label '" + std::string(1, c) +
                  "' appears in no operand");
  }
  return e;
}

std::string make_einsum(const std::vector<std::string>& in, const std::string& out) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) s += (i ? "," : "") + in[i];
  return s + "->" + out;
}

}  // namespace synoros
