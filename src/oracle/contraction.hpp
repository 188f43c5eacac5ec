// The oracle's sum of products, one output element at a time: the float64 definition that every
// contraction is checked against -- the einsum op's oracle, and the probes that gate the GEMM
// and convolution providers (a probe checks a sample of a large output, so it needs single
// elements, not the whole tensor).
#pragma once

#include <initializer_list>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "synoros/core.hpp"

namespace synoros::oracle {

// One coordinate of an operand's element as an affine function of the iteration's labels idx:
// v = (c0 + sum_l coef[l] idx[l]) / div. Where div does not divide it, or v leaves [0, limit),
// the element is a padding zero (limit -1: never), multiplied in like any other (as the pad op's
// +0 is: 0 * inf gives NaN). The element sits at the sum of v * stride
// over its coordinates.
struct Coord {
  std::vector<int64_t> coef;  // one per label
  int64_t c0 = 0, div = 1, limit = -1, stride = 0;
};
// A plain axis: label l of `labels` itself, with the given stride.
Coord axis(size_t labels, size_t l, int64_t stride);
// A windowed axis: (sum_k coef_k idx[l_k] + c0) / div, bounded by limit.
Coord affine(size_t labels, std::initializer_list<std::pair<size_t, int64_t>> terms, int64_t c0, int64_t div,
             int64_t limit, int64_t stride);

// An operand: float32 data (a probe's) or a tensor of any dtype (the oracle's), and where each
// element of the iteration sits in it.
struct Operand {
  const float* f32 = nullptr;
  const HostTensor* tensor = nullptr;
  std::vector<Coord> coords;
};

struct PointSum {
  double value = 0;      // the sum of the terms
  double magnitude = 0;  // the sum of their absolute values
};

// The sum over the reduced labels of the product of the operands. idx is `fixed` (the output
// element's labels) followed by the reduced labels, each in [0, extent); the terms are added in
// the row-major order of the reduced labels.
PointSum contraction_point(std::span<const Operand> ops, std::span<const int64_t> fixed,
                           std::span<const int64_t> reduced_extent);

// Checks computed float32 elements against their float64 sums: each within 4 eps (sqrt(terms) +
// 2) times its magnitude. Keeps the worst error as a share of that allowance and the first
// element outside it.
struct PointVerdict {
  std::string why;  // "" while every element passed
  double worst = 0;
  // where: names the element, e.g. "C[3,4]", for the message.
  void check(double got, const PointSum& ref, double terms, const std::string& name, const std::string& where);
};

}  // namespace synoros::oracle
