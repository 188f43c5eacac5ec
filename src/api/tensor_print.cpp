// Printing a tensor the way PyTorch prints one: the same number formats (integral, fixed with four
// decimals, or scientific, chosen from the nonzero finite values), one width for every entry,
// lines of at most 80 characters, and the first and last three entries per axis of a tensor with
// more than 1000 elements.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "synoros/tensor.hpp"

namespace synoros {

namespace {
constexpr int64_t kThreshold = 1000, kEdge = 3, kLineWidth = 80, kPrecision = 4;

// fmt takes a precision and a double ("%.*f", "%.*e").
std::string printf_str(const char* fmt, double v, int precision = kPrecision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, precision, v);
  return buf;
}
// Integers from their own storage (a double would round those beyond 2^53).
int64_t int_at(const HostTensor& h, int64_t i) {
  return h.dtype == DType::I64 ? static_cast<const int64_t*>(h.buffer->data())[i]
                               : static_cast<const int32_t*>(h.buffer->data())[i];
}
std::string special(double v) {
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

struct Formatter {
  bool floating = true, int_mode = true, sci_mode = false;
  size_t width = 1;

  Formatter(const HostTensor& h, const std::vector<int64_t>& shown) {
    floating = is_float(h.dtype);
    if (!floating) {
      for (int64_t i : shown) width = std::max(width, std::to_string(int_at(h, i)).size());
      return;
    }
    double lo = INFINITY, hi = 0;
    bool any = false;
    for (int64_t i : shown) {
      double v = h.get(i);
      if (!std::isfinite(v) || v == 0) continue;
      any = true;
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
      if (v != std::ceil(v)) int_mode = false;
    }
    if (!any) return;
    sci_mode = hi / lo > 1000 || hi > 1e8 || (!int_mode && lo < 1e-4);
    for (int64_t i : shown) {
      double v = h.get(i);
      if (!std::isfinite(v) || v == 0) continue;
      size_t w = sci_mode   ? printf_str("%.*e", v).size()
                 : int_mode ? printf_str("%.*f", v, 0).size() + 1
                            : printf_str("%.*f", v).size();
      width = std::max(width, w);
    }
  }

  std::string format(const HostTensor& h, int64_t i) const {
    std::string s;
    double v = floating ? h.get(i) : 0.0;
    if (!floating)
      s = std::to_string(int_at(h, i));
    else if (!std::isfinite(v))
      s = special(v);
    else if (sci_mode)
      s = printf_str("%.*e", v);
    else if (int_mode)
      s = printf_str("%.*f", v, 0) + ".";
    else
      s = printf_str("%.*f", v);
    return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
  }
};

// The element indices shown along one axis of size n.
std::vector<int64_t> shown_along(int64_t n, bool summarize) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < n; ++i)
    if (!summarize || n <= 2 * kEdge || i < kEdge || i >= n - kEdge) r.push_back(i);
  return r;
}

struct Printer {
  const HostTensor& h;
  std::vector<int64_t> strides;
  bool summarize;
  const Formatter* fmt = nullptr;

  // Flat indices of every element shown.
  void collect(size_t dim, int64_t base, std::vector<int64_t>& out) const {
    if (dim == h.shape.size()) return out.push_back(base);
    for (int64_t i : shown_along(h.shape[dim], summarize))
      collect(dim + 1, base + i * strides[dim], out);
  }

  std::string str(size_t dim, int64_t base, size_t indent) const {
    int64_t n = h.shape[dim];
    bool cut = summarize && n > 2 * kEdge;
    std::vector<std::string> parts;
    if (dim + 1 == h.shape.size()) {
      size_t per_line =
          std::max<size_t>(1, size_t(kLineWidth - int64_t(indent)) / (fmt->width + 2));
      std::vector<std::string> items;
      for (int64_t i : shown_along(n, summarize)) {
        if (cut && i == n - kEdge) items.push_back(" ...");
        items.push_back(fmt->format(h, base + i * strides[dim]));
      }
      std::string out = "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += i % per_line == 0 ? ",\n" + std::string(indent + 1, ' ') : ", ";
        out += items[i];
      }
      return out + "]";
    }
    std::string sep =
        "," + std::string(h.shape.size() - dim - 1, '\n') + std::string(indent + 1, ' ');
    std::string out = "[";
    bool first = true;
    for (int64_t i : shown_along(n, summarize)) {
      if (!first) out += sep;
      if (cut && i == n - kEdge) out += "..." + sep;
      out += str(dim + 1, base + i * strides[dim], indent + 1);
      first = false;
    }
    return out + "]";
  }
};

const char* torch_dtype(DType t) {
  switch (t) {
    case DType::F64:
      return "float64";
    case DType::I32:
      return "int32";
    default:
      return "";
  }
}
}  // namespace

std::string to_string(const Tensor& t) {
  HostTensor h = t.value();
  Printer p{h, contiguous_strides(h.shape), h.numel() > kThreshold};
  std::vector<int64_t> shown;
  if (h.shape.empty())
    shown.push_back(0);
  else if (h.numel() > 0)
    p.collect(0, 0, shown);
  Formatter f(h, shown);
  p.fmt = &f;
  std::string body;
  if (h.shape.empty())
    body = f.format(h, 0);
  else if (h.numel() == 0)
    body = "[]";
  else
    body = p.str(0, 0, 7);
  std::string extra;
  if (h.numel() == 0 && h.shape.size() != 1) {
    extra += ", size=(";
    for (size_t i = 0; i < h.shape.size(); ++i)
      extra += (i ? ", " : "") + std::to_string(h.shape[i]);
    extra += h.shape.size() == 1 ? ",)" : ")";
  }
  if (*torch_dtype(h.dtype))
    extra += std::string(", dtype=") + torch_dtype(h.dtype);
  else if (h.numel() == 0 && h.dtype == DType::I64)
    extra += ", dtype=int64";  // as PyTorch
  if (t.is_leaf() && t.requires_grad_enabled()) extra += ", requires_grad=True";
  return "tensor(" + body + extra + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << to_string(t);
}

}  // namespace synoros
