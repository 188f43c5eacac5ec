#include <array>
#include <cstring>
#include <sstream>
#include <utility>

#include "ir/einsum_spec.hpp"
#include "synoros/ir.hpp"

namespace synoros {

namespace {
std::string op_context(const Graph& g, Op op, const std::vector<ValueId>& in) {
  std::ostringstream o;
  o << op_name(op) << "(";
  for (size_t i = 0; i < in.size(); ++i) {
    if (i) o << ", ";
    if (in[i] < 0 || size_t(in[i]) >= g.size()) {
      o << "<invalid id " << in[i] << ">";
    } else {
      o << dtype_name(g.dtype(in[i])) << shape_str(g.shape(in[i]));
    }
  }
  o << ")";
  return o.str();
}

template <size_t... I>
constexpr std::array<const char*, sizeof...(I)> attr_names(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, Attrs>::kName...};
}
constexpr auto kAttrNames = attr_names(std::make_index_sequence<std::variant_size_v<Attrs>>());

// An op given no attributes gets its struct's defaults where the struct allows that (kOptional).
template <size_t... I>
bool default_attrs(size_t want, Attrs& a, std::index_sequence<I...>) {
  bool ok = false;
  ((I == want && [&] {
     using T = std::variant_alternative_t<I, Attrs>;
     if constexpr (requires { T::kOptional; }) {
       if constexpr (T::kOptional) a = T{}, ok = true;
     }
     return true;
   }()) || ...);
  return ok;
}
}  // namespace

const char* attr_name(size_t i) { return i < kAttrNames.size() ? kAttrNames[i] : "?"; }

void throw_wrong_attrs(const Node& n, size_t wanted) {
  throw Error(std::string(op_name(n.op)) + ": expected attr::" + attr_name(wanted) + " attributes, the node holds attr::" +
              attr_name(n.attrs.index()));
}

ValueId Graph::input(DType t, Shape s, std::string name) {
  check_shape(s, t, "input", name);
  Node n;
  n.op = Op::Input;
  n.dtype = t;
  n.shape = std::move(s);
  n.name = std::move(name);
  nodes_.push_back(std::move(n));
  return ValueId(nodes_.size() - 1);
}

ValueId Graph::param(std::shared_ptr<HostTensor> storage, std::string name) {
  if (!storage || !storage->buffer) throw Error("param '" + name + "': no storage given");
  Node n;
  n.op = Op::Param;
  n.dtype = storage->dtype;
  n.shape = storage->shape;
  n.name = std::move(name);
  n.data = std::move(storage);
  nodes_.push_back(std::move(n));
  return ValueId(nodes_.size() - 1);
}

ValueId Graph::constant(HostTensor value) {
  Node n;
  n.op = Op::Const;
  n.dtype = value.dtype;
  n.shape = value.shape;
  n.data = std::make_shared<HostTensor>(std::move(value));
  nodes_.push_back(std::move(n));
  return ValueId(nodes_.size() - 1);
}

ValueId Graph::scalar(double v, DType t) {
  HostTensor h(t, {});
  h.set(0, v);
  return constant(std::move(h));
}

ValueId Graph::add(Op op, std::vector<ValueId> in, Attrs attrs, DType cast_to) {
  const OpInfo& info = op_info(op);
  if (info.kind == OpKind::Leaf) throw Error(std::string(info.name) + ": use the leaf builders");
  bool arity_ok = info.arity < 0 ? (!in.empty() && int(in.size()) <= -info.arity)
                                  : int(in.size()) == info.arity;
  if (!arity_ok) {
    throw Error(op_context(*this, op, in) + ": expects " +
                (info.arity < 0 ? "1 to " + std::to_string(-info.arity) : std::to_string(info.arity)) +
                " inputs, got " + std::to_string(in.size()));
  }
  for (ValueId v : in) {
    if (v < 0 || size_t(v) >= nodes_.size()) {
      throw Error(op_context(*this, op, in) + ": input refers to a value not in this graph");
    }
  }
  if (attrs.index() != info.attrs &&
      !(attrs.index() == 0 && default_attrs(info.attrs, attrs, std::make_index_sequence<std::variant_size_v<Attrs>>()))) {
    throw Error(op_context(*this, op, in) + ": takes attr::" + attr_name(info.attrs) + " attributes, got " +
                (attrs.index() == 0 ? std::string("none") : "attr::" + std::string(attr_name(attrs.index()))));
  }
  Node n;
  n.op = op;
  n.in = std::move(in);
  n.attrs = std::move(attrs);
  n.dtype = cast_to;
  try {
    info.infer(*this, n);
    check_shape(n.shape, n.dtype, "result");
  } catch (const Error& e) {
    throw Error(op_context(*this, op, n.in) + ": " + e.what());
  }
  nodes_.push_back(std::move(n));
  return ValueId(nodes_.size() - 1);
}

ValueId Graph::add_checked(Op op, std::vector<ValueId> in, Attrs attrs, DType dtype, Shape shape) {
  for (ValueId v : in)
    if (v < 0 || size_t(v) >= nodes_.size()) throw Error(op_context(*this, op, in) + ": input refers to a value not in this graph");
  Node n;
  n.op = op;
  n.in = std::move(in);
  n.attrs = std::move(attrs);
  n.dtype = dtype;
  n.shape = std::move(shape);
  nodes_.push_back(std::move(n));
  return ValueId(nodes_.size() - 1);
}

ValueId Graph::sum(ValueId a, std::vector<int64_t> axes, bool keepdim) {
  return add(Op::Sum, {a}, attr::Reduce{std::move(axes), keepdim});
}

ValueId Graph::mean(ValueId a, std::vector<int64_t> axes, bool keepdim) {
  return add(Op::Mean, {a}, attr::Reduce{std::move(axes), keepdim});
}

ValueId Graph::reshape(ValueId a, Shape s) {
  if (s == shape(a)) return a;
  return add(Op::Reshape, {a}, attr::Target{std::move(s)});
}

ValueId Graph::permute(ValueId a, std::vector<int64_t> perm) {
  return add(Op::Permute, {a}, attr::Permute{std::move(perm)});
}

ValueId Graph::expand(ValueId a, Shape s) {
  if (s == shape(a)) return a;
  return add(Op::Expand, {a}, attr::Target{std::move(s)});
}

ValueId Graph::einsum(const std::string& spec, std::vector<ValueId> in) {
  return add(Op::Einsum, std::move(in), attr::Einsum{spec});
}

ValueId Graph::matmul(ValueId a, ValueId b) {
  const Shape& sa = shape(a);
  const Shape& sb = shape(b);
  if (sa.size() < 2 || sb.size() < 2) {
    throw Error("matmul: operands need rank >= 2, got " + shape_str(sa) + " and " + shape_str(sb));
  }
  if (sa.size() != sb.size()) {
    throw Error("matmul: operands need equal rank, got " + shape_str(sa) + " and " + shape_str(sb));
  }
  std::string batch;
  for (size_t i = 0; i + 2 < sa.size(); ++i) batch += char('a' + i);
  return einsum(batch + "mk," + batch + "kn->" + batch + "mn", {a, b});
}

ValueId Graph::sum_to(ValueId g, Shape target) {
  Shape gs = shape(g);
  if (gs == target) return g;
  size_t lead = gs.size() - target.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < gs.size(); ++i) {
    if (i < lead || (target[i - lead] == 1 && gs[i] != 1)) axes.push_back(int64_t(i));
  }
  ValueId s = axes.empty() ? g : sum(g, axes, true);
  return reshape(s, target);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw Error(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                  " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdULL;
}
void mix_bytes(uint64_t& h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc = (acc << 8) | b[i];
    if ((i & 7) == 7) mix(h, acc), acc = 0;
  }
  mix(h, acc ^ n);
}

// One attribute field into the hash, and onto a printed line.
void mix_field(uint64_t& h, int64_t v) { mix(h, uint64_t(v)); }
void mix_field(uint64_t& h, uint64_t v) { mix(h, v); }
void mix_field(uint64_t& h, bool v) { mix(h, v); }
void mix_field(uint64_t& h, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  mix(h, bits);
}
void mix_field(uint64_t& h, const std::string& v) { mix_bytes(h, v.data(), v.size()); }
void mix_field(uint64_t& h, const std::vector<int64_t>& v) {
  mix(h, v.size());
  for (int64_t x : v) mix(h, uint64_t(x));
}
void mix_field(uint64_t& h, const std::optional<int64_t>& v) {
  mix(h, v.has_value());
  if (v) mix(h, uint64_t(*v));
}
void print_field(std::ostream& o, const std::vector<int64_t>& v) { o << shape_str(v); }
void print_field(std::ostream& o, const std::string& v) { o << '"' << v << '"'; }
void print_field(std::ostream& o, const std::optional<int64_t>& v) {
  if (v) o << *v;
  else o << "none";
}
template <class T>
void print_field(std::ostream& o, const T& v) {
  o << v;
}
}  // namespace

uint64_t Graph::structural_hash() const {
  uint64_t h = 0x5eed;
  for (const Node& n : nodes_) {
    mix(h, uint64_t(n.op));
    mix(h, uint64_t(n.dtype));
    for (int64_t d : n.shape) mix(h, uint64_t(d));
    mix(h, 0xabc);
    for (ValueId v : n.in) mix(h, uint64_t(v));
    mix(h, n.attrs.index());
    std::visit([&](const auto& a) { std::apply([&](const auto&... f) { (mix_field(h, f), ...); }, a.tie()); }, n.attrs);
    mix_bytes(h, n.name.data(), n.name.size());
    if (n.op == Op::Const) mix_bytes(h, n.data->buffer->data(), n.data->bytes());
    if (n.op == Op::Param) mix(h, uint64_t(reinterpret_cast<uintptr_t>(n.data.get())));
  }
  return h;
}

bool Graph::structurally_equal(const Graph& o) const {
  if (nodes_.size() != o.nodes_.size()) return false;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& a = nodes_[i];
    const Node& b = o.nodes_[i];
    if (a.op != b.op || a.dtype != b.dtype || a.shape != b.shape || a.in != b.in ||
        !(a.attrs == b.attrs) || a.name != b.name)
      return false;
    if (a.op == Op::Param && a.data != b.data) return false;
    if (a.op == Op::Const &&
        std::memcmp(a.data->buffer->data(), b.data->buffer->data(), a.data->bytes()) != 0)
      return false;
  }
  return true;
}

std::string Graph::to_string() const {
  std::ostringstream o;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    o << "%" << i << " = " << op_name(n.op) << "(";
    for (size_t j = 0; j < n.in.size(); ++j) o << (j ? ", " : "") << "%" << n.in[j];
    o << ") " << dtype_name(n.dtype) << shape_str(n.shape);
    if (!n.name.empty()) o << " '" << n.name << "'";
    if (n.attrs.index() != 0) {
      o << " " << attr_name(n.attrs.index()) << "{";
      std::visit([&](const auto& a) {
        std::apply([&](const auto&... f) {
          int k = 0;
          ((o << (k++ ? ", " : ""), print_field(o, f)), ...);
        }, a.tie());
      }, n.attrs);
      o << "}";
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace synoros
