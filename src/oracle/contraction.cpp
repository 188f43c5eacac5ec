#include "oracle/contraction.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace synoros::oracle {

Coord axis(size_t labels, size_t l, int64_t stride) {
  Coord c;
  c.coef.assign(labels, 0);
  c.coef[l] = 1;
  c.stride = stride;
  return c;
}

Coord affine(size_t labels, std::initializer_list<std::pair<size_t, int64_t>> terms, int64_t c0, int64_t div,
             int64_t limit, int64_t stride) {
  Coord c;
  c.coef.assign(labels, 0);
  for (auto [l, k] : terms) c.coef[l] += k;
  c.c0 = c0, c.div = div, c.limit = limit, c.stride = stride;
  return c;
}

namespace {
// The operand's element at idx, or 0 where a coordinate falls in the padding.
double read(const Operand& op, const std::vector<int64_t>& idx) {
  int64_t offset = 0;
  for (const Coord& c : op.coords) {
    if (c.coef.size() != idx.size())
      throw Error("contraction_point: a coordinate over " + std::to_string(c.coef.size()) + " labels, the iteration has " +
                  std::to_string(idx.size()));
    int64_t v = c.c0;
    for (size_t l = 0; l < c.coef.size(); ++l) v += c.coef[l] * idx[l];
    if (c.div != 1) {
      if (v < 0 || v % c.div != 0) return 0.0;
      v /= c.div;
    }
    if (c.limit >= 0 && (v < 0 || v >= c.limit)) return 0.0;
    offset += v * c.stride;
  }
  return op.f32 ? double(op.f32[offset]) : op.tensor->get(offset);
}
}  // namespace

PointSum contraction_point(std::span<const Operand> ops, std::span<const int64_t> fixed,
                           std::span<const int64_t> reduced_extent) {
  PointSum s;
  for (int64_t e : reduced_extent)
    if (e <= 0) return s;
  std::vector<int64_t> idx(fixed.begin(), fixed.end());
  idx.resize(fixed.size() + reduced_extent.size(), 0);
  const size_t first = fixed.size();
  for (;;) {
    double p = 1;
    for (const Operand& op : ops) p *= read(op, idx);
    s.value += p;
    s.magnitude += std::fabs(p);
    size_t d = idx.size();  // the odometer over the reduced labels, the last fastest
    while (d > first && ++idx[d - 1] == reduced_extent[d - 1 - first]) idx[--d] = 0;
    if (d == first) return s;
  }
}

void PointVerdict::check(double got, const PointSum& ref, double terms, const std::string& name,
                         const std::string& where) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double allowed = 4 * eps * (std::sqrt(terms) + 2) * ref.magnitude + 1e-30;
  double err = std::fabs(got - ref.value);
  if (!(err <= allowed)) {
    if (why.empty()) {
      std::ostringstream o;
      o << name << ": " << where << " = " << got << ", float64 says " << ref.value;
      why = o.str();
    }
    if (std::isnan(err)) err = std::numeric_limits<double>::infinity();
  }
  worst = std::max(worst, err / allowed);
}

}  // namespace synoros::oracle
