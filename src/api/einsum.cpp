// torch.einsum's notation over the engine's einsum op (explicit, letters only, one or two
// operands, no label repeated within an operand): spaces, an implicit output, "..." for
// broadcast axes, size-1 axes broadcast against the other operands, repeated labels within an
// operand (a diagonal, taken as a strided view), and three or more operands contracted left to
// right, each step keeping only the labels a later operand or the output still needs.
#include <algorithm>
#include <cctype>
#include <map>

#include "ir/einsum_spec.hpp"
#include "synoros/tensor.hpp"

namespace synoros {

namespace {
[[noreturn]] void bad(const std::string& spec, const std::string& why) {
  throw Error("einsum '" + spec + "': " + why);
}

// A letter no term of the spec uses, for each axis an ellipsis stands for.
std::string free_letters(const std::string& spec, size_t n) {
  std::string out;
  for (char c = 'A'; c <= 'z' && out.size() < n; ++c)
    if (std::isalpha(static_cast<unsigned char>(c)) && spec.find(c) == std::string::npos) out += c;
  if (out.size() < n) bad(spec, "too many axes for the letters left");
  return out;
}

// The diagonal over the axes of t whose labels repeat: "ii" of [n, n] becomes "i" of [n].
Tensor take_diagonals(Tensor t, std::string& labels, const std::string& spec) {
  for (size_t i = 0; i < labels.size(); ++i) {
    size_t j = labels.find(labels[i], i + 1);
    if (j == std::string::npos) continue;
    const Shape& s = t.shape();
    if (s[i] != s[j])
      bad(spec, "label '" + std::string(1, labels[i]) + "' has sizes " + std::to_string(s[i]) +
                    " and " + std::to_string(s[j]) + " in one operand");
    // Move axis j last and axis i just before it; [..., n, n] -> [..., n * n] -> every (n + 1)th.
    std::vector<int64_t> perm;
    for (size_t d = 0; d < s.size(); ++d)
      if (d != i && d != j) perm.push_back(int64_t(d));
    perm.push_back(int64_t(i));
    perm.push_back(int64_t(j));
    int64_t n = s[i];
    Shape flat;
    std::string rest;
    for (size_t k = 0; k + 2 < perm.size(); ++k) {
      flat.push_back(s[size_t(perm[k])]);
      rest += labels[size_t(perm[k])];
    }
    flat.push_back(n * n);
    t = t.permute(perm).reshape(flat).stride(-1, n + 1);
    labels = rest + labels[i];
    i = size_t(-1);  // start over: the labels moved
  }
  return t;
}
}  // namespace

Tensor einsum(const std::string& spec_in, const std::vector<Tensor>& operands) {
  std::string spec;
  for (char c : spec_in)
    if (!std::isspace(static_cast<unsigned char>(c))) spec += c;
  size_t arrow = spec.find("->");
  std::string lhs = spec.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    bad(spec, "names " + std::to_string(terms.size()) + " operands but " +
                  std::to_string(operands.size()) + " were given");
  // Ellipses: each operand's own count of broadcast axes, aligned on the right.
  size_t ell = 0;
  std::vector<size_t> ell_of(terms.size(), 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    size_t at = terms[k].find("...");
    if (at == std::string::npos) continue;
    if (terms[k].find("...", at + 3) != std::string::npos) bad(spec, "an operand has two ellipses");
    size_t named = terms[k].size() - 3, rank = operands[k].shape().size();
    if (named > rank)
      bad(spec, "operand " + std::to_string(k) + " has rank " + std::to_string(rank) +
                    " but more labels");
    ell_of[k] = rank - named;
    ell = std::max(ell, ell_of[k]);
  }
  std::string ell_letters = free_letters(spec, ell);
  for (size_t k = 0; k < terms.size(); ++k) {
    size_t at = terms[k].find("...");
    if (at != std::string::npos) terms[k].replace(at, 3, ell_letters.substr(ell - ell_of[k]));
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = spec.substr(arrow + 2);
    size_t at = out.find("...");
    if (at != std::string::npos) out.replace(at, 3, ell_letters);
  } else {  // implicit: the broadcast axes, then the labels used once, in alphabetical order
    std::map<char, int> count;
    for (const auto& t : terms)
      for (char c : t) ++count[c];
    out = ell_letters;
    std::string once;
    for (auto [c, n] : count)
      if (n == 1 && ell_letters.find(c) == std::string::npos) once += c;
    std::sort(once.begin(), once.end());
    out += once;
  }
  // Diagonals, then the size of each label, then size-1 axes broadcast to it.
  std::vector<Tensor> ops = operands;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (terms[k].size() != ops[k].shape().size())
      bad(spec, "operand " + std::to_string(k) + " has rank " +
                    std::to_string(ops[k].shape().size()) + " but its labels '" + terms[k] +
                    "' say " + std::to_string(terms[k].size()));
    ops[k] = take_diagonals(ops[k], terms[k], spec);
  }
  std::map<char, int64_t> size;
  for (size_t k = 0; k < ops.size(); ++k)
    for (size_t i = 0; i < terms[k].size(); ++i) {
      int64_t& s = size.try_emplace(terms[k][i], 1).first->second;
      int64_t d = ops[k].shape()[i];
      if (d != 1 && s != 1 && d != s)
        bad(spec, "label '" + std::string(1, terms[k][i]) + "' has sizes " + std::to_string(s) +
                      " and " + std::to_string(d));
      if (d != 1) s = d;
    }
  for (size_t k = 0; k < ops.size(); ++k) {
    Shape want;
    for (char c : terms[k]) want.push_back(size[c]);
    if (want != ops[k].shape()) ops[k] = ops[k].expand(want);
  }
  // Left to right: after each step, keep the labels the output or a later operand reads.
  Tensor acc = ops[0];
  std::string acc_labels = terms[0];
  if (ops.size() == 1) {
    return Tensor::apply(Op::Einsum, {acc}, attr::Einsum{make_einsum({acc_labels}, out)});
  }
  for (size_t k = 1; k < ops.size(); ++k) {
    std::string keep;
    if (k + 1 == ops.size()) {
      keep = out;
    } else {
      std::string later = out;
      for (size_t m = k + 1; m < ops.size(); ++m) later += terms[m];
      for (char c : acc_labels + terms[k])
        if (later.find(c) != std::string::npos && keep.find(c) == std::string::npos) keep += c;
    }
    acc = Tensor::apply(Op::Einsum, {acc, ops[k]}, attr::Einsum{make_einsum({acc_labels, terms[k]}, keep)});
    acc_labels = keep;
  }
  return acc;
}

}  // namespace synoros
