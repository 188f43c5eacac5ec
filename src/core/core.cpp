#include "synoros/core.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

namespace synoros {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << ']';
  return o.str();
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

int normalize_axis(int64_t axis, size_t rank, const char* op, const Shape& shape) {
  int64_t r = int64_t(rank);
  int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r) {
    throw Error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for shape " +
                shape_str(shape));
  }
  return int(a);
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device.kind != Device::Kind::CPU) throw Error("Buffer: only CPU buffers can be allocated here");
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { std::free(data_); }

HostTensor::HostTensor(DType t, Shape s) : dtype(t), shape(std::move(s)) {
  for (int64_t d : shape)
    if (d < 0) throw Error("HostTensor: negative dimension in shape " + shape_str(shape));
  buffer = std::make_shared<Buffer>(bytes());
}

double HostTensor::get(int64_t i) const {
  switch (dtype) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::I64: return double(data<int64_t>()[i]);
  }
  return 0;
}

void HostTensor::set(int64_t i, double v) {
  buffer->mark_modified();
  switch (dtype) {
    case DType::F32: data<float>()[i] = float(v); break;
    case DType::F64: data<double>()[i] = v; break;
    case DType::I32: data<int32_t>()[i] = int32_t(v); break;
    case DType::I64: data<int64_t>()[i] = int64_t(v); break;
  }
}

}  // namespace synoros
