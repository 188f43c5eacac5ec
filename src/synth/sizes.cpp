// Symbolic sizes (monomials) and layer specs.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "synoros/synth.hpp"

namespace synoros::synth {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(trim(cur));
  return out;
}

bool valid_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char ch : n)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
  return true;
}

int64_t parse_int(const std::string& s, const std::string& what) {
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    if (pos != s.size()) throw Error("");
    return v;
  } catch (...) {
    throw Error("synth spec: " + what + ": '" + s + "' is not an integer");
  }
}

// A cap: checked here, before it is narrowed to an int.
int parse_cap(const std::string& s, const std::string& name) {
  const int64_t v = parse_int(s, "cap of " + name);
  if (v < 0 || v > 8) throw Error("synth spec: cap of '" + name + "' must be in [0, 8], got " + std::to_string(v));
  return int(v);
}

// "name=value, ..." as (name, cap) pairs.
std::vector<std::pair<std::string, int>> parse_caps(const std::string& body) {
  std::vector<std::pair<std::string, int>> caps;
  for (const std::string& item : split(body, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw Error("synth spec: cap item '" + item + "' needs name=value");
    const std::string name = trim(item.substr(0, eq));
    caps.push_back({name, parse_cap(trim(item.substr(eq + 1)), name)});
  }
  return caps;
}

void apply_caps(Spec& s, const std::vector<std::pair<std::string, int>>& caps) {
  for (auto& [name, cap] : caps) {
    int p = s.find_primary(name), c = s.find_coefficient(name);
    if (p < 0 && c < 0) throw Error("synth spec: cap names unknown variable '" + name + "'");
    (p >= 0 ? s.primary[size_t(p)] : s.coefficient[size_t(c)]).cap = cap;
  }
}
}  // namespace

Size Size::operator*(const Size& o) const {
  Size r;
  for (int i = 0; i < kMaxVars; ++i) {
    r.p[size_t(i)] = int8_t(p[size_t(i)] + o.p[size_t(i)]);
    r.c[size_t(i)] = int8_t(c[size_t(i)] + o.c[size_t(i)]);
  }
  return r;
}
Size Size::operator/(const Size& o) const {
  Size r;
  for (int i = 0; i < kMaxVars; ++i) {
    r.p[size_t(i)] = int8_t(p[size_t(i)] - o.p[size_t(i)]);
    r.c[size_t(i)] = int8_t(c[size_t(i)] - o.c[size_t(i)]);
  }
  return r;
}
bool Size::is_one() const { return *this == Size{}; }
bool Size::pure_coefficient() const {
  for (int8_t e : p)
    if (e) return false;
  return true;
}
uint64_t Size::hash() const {
  uint64_t h = 0x51ED;
  for (int i = 0; i < kMaxVars; ++i) h = mix(h, uint64_t(uint8_t(p[size_t(i)])) | uint64_t(uint8_t(c[size_t(i)])) << 8);
  return h;
}

int Spec::find_primary(const std::string& name) const {
  for (size_t i = 0; i < primary.size(); ++i)
    if (primary[i].name == name) return int(i);
  return -1;
}
int Spec::find_coefficient(const std::string& name) const {
  for (size_t i = 0; i < coefficient.size(); ++i)
    if (coefficient[i].name == name) return int(i);
  return -1;
}

namespace {
// Value of a size under binding b as num/den; false on int64 overflow.
bool eval_frac(const Spec& s, const Size& z, size_t b, int64_t& num, int64_t& den) {
  num = 1;
  den = 1;
  auto mul = [](int64_t& acc, int64_t v) { return !__builtin_mul_overflow(acc, v, &acc); };
  for (size_t i = 0; i < s.primary.size(); ++i) {
    int e = z.p[i];
    for (int k = 0; k < std::abs(e); ++k)
      if (!mul(e > 0 ? num : den, s.bindings[b][i])) return false;
  }
  for (size_t i = 0; i < s.coefficient.size(); ++i) {
    int e = z.c[i];
    for (int k = 0; k < std::abs(e); ++k)
      if (!mul(e > 0 ? num : den, s.coefficient[i].value)) return false;
  }
  return true;
}
}  // namespace

int64_t Spec::eval(const Size& z, size_t b) const {
  int64_t num, den;
  if (!eval_frac(*this, z, b, num, den) || den == 0 || num % den != 0)
    throw Error("synth: size " + str(z) + " is not an integer under binding " + std::to_string(b));
  return num / den;
}

bool Spec::legal(const Size& z) const {
  for (int8_t e : z.p)
    if (e < 0) return false;
  for (size_t b = 0; b < bindings.size(); ++b) {
    int64_t num, den;
    if (!eval_frac(*this, z, b, num, den) || den == 0 || num % den != 0 || num / den < 1) return false;
  }
  return true;
}

std::string Spec::str(const Size& z) const {
  std::string num, den;
  auto put = [](std::string& s, const std::string& name, int e) {
    if (!s.empty()) s += "*";
    s += name;
    if (e > 1) s += "^" + std::to_string(e);
  };
  for (size_t i = 0; i < primary.size(); ++i) {
    if (z.p[i] > 0) put(num, primary[i].name, z.p[i]);
    if (z.p[i] < 0) put(den, primary[i].name, -z.p[i]);
  }
  for (size_t i = 0; i < coefficient.size(); ++i) {
    if (z.c[i] > 0) put(num, coefficient[i].name, z.c[i]);
    if (z.c[i] < 0) put(den, coefficient[i].name, -z.c[i]);
  }
  if (num.empty()) num = "1";
  if (den.empty()) return num;
  return num + "/" + (den.find('*') != std::string::npos ? "(" + den + ")" : den);
}

Size Spec::parse_size(const std::string& text) const {
  Size z;
  std::string t = trim(text);
  if (t.empty()) throw Error("synth spec: empty size");
  // Tokens: name[^int] separated by * or /; "1" allowed as a factor.
  size_t i = 0;
  int sign = 1;
  bool expect_factor = true;
  while (i < t.size()) {
    char ch = t[i];
    if (std::isspace(static_cast<unsigned char>(ch))) {
      ++i;
      continue;
    }
    if (!expect_factor) {
      if (ch == '*') sign = 1;
      else if (ch == '/') sign = -1;
      else throw Error("synth spec: size '" + t + "': expected '*' or '/' at '" + t.substr(i) + "'");
      ++i;
      expect_factor = true;
      continue;
    }
    size_t j = i;
    while (j < t.size() && (std::isalnum(static_cast<unsigned char>(t[j])) || t[j] == '_')) ++j;
    std::string name = t.substr(i, j - i);
    if (name.empty()) throw Error("synth spec: size '" + t + "': expected a variable at '" + t.substr(i) + "'");
    int e = 1;
    if (j < t.size() && t[j] == '^') {
      size_t k = j + 1;
      while (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) ++k;
      // Only digits follow '^', so the exponent is >= 0; bounded before it is narrowed.
      const int64_t e64 = parse_int(t.substr(j + 1, k - j - 1), "exponent in '" + t + "'");
      if (e64 > 100)
        throw Error("synth spec: size '" + t + "': exponent " + std::to_string(e64) + " is out of range (at most 100)");
      e = int(e64);
      j = k;
    }
    if (name != "1") {
      int pi = find_primary(name), ci = find_coefficient(name);
      if (pi < 0 && ci < 0) throw Error("synth spec: size '" + t + "' uses unknown variable '" + name + "'");
      int8_t& slot = pi >= 0 ? z.p[size_t(pi)] : z.c[size_t(ci)];
      int v = slot + sign * e;
      if (v < -100 || v > 100) throw Error("synth spec: size '" + t + "': exponent out of range");
      slot = int8_t(v);
    }
    i = j;
    expect_factor = false;
  }
  if (expect_factor) throw Error("synth spec: size '" + t + "' ends with an operator");
  return z;
}

Shape Spec::shape(const std::vector<Size>& dims, size_t b) const {
  Shape s;
  for (const Size& d : dims) s.push_back(eval(d, b));
  return s;
}

void Spec::validate() const {
  if (primary.size() > size_t(kMaxVars) || coefficient.size() > size_t(kMaxVars))
    throw Error("synth spec: at most " + std::to_string(kMaxVars) + " primary and coefficient variables");
  if (input.empty() || output.empty()) throw Error("synth spec: input and output shapes are required");
  if (bindings.empty()) throw Error("synth spec: at least one binding is required");
  for (const Var& v : coefficient)
    if (v.value < 1) throw Error("synth spec: coefficient '" + v.name + "' must be >= 1");
  for (size_t b = 0; b < bindings.size(); ++b) {
    if (bindings[b].size() != primary.size()) throw Error("synth spec: binding " + std::to_string(b) + " is incomplete");
    for (size_t i = 0; i < primary.size(); ++i)
      if (bindings[b][i] < 1)
        throw Error("synth spec: binding " + std::to_string(b) + " gives " + primary[i].name + " = " +
                    std::to_string(bindings[b][i]) + " (must be >= 1)");
  }
  for (const Var& v : primary)
    if (v.cap < 0 || v.cap > 8) throw Error("synth spec: cap of '" + v.name + "' must be in [0, 8]");
  for (const Var& v : coefficient)
    if (v.cap < 0 || v.cap > 8) throw Error("synth spec: cap of '" + v.name + "' must be in [0, 8]");
  for (auto* dims : {&input, &output}) {
    for (const Size& d : *dims) {
      if (!legal(d))
        throw Error("synth spec: size " + str(d) + " of the " + (dims == &input ? "input" : "output") +
                    " is not an integer >= 1 under every binding");
    }
  }
  for (auto [o, i] : fixed) {
    if (o < 0 || size_t(o) >= output.size() || i < 0 || size_t(i) >= input.size() || !(output[size_t(o)] == input[size_t(i)]))
      throw Error("synth spec: fixed dims must name a size present in both shapes");
  }
}

Spec parse_spec(const std::string& text) {
  Spec s;
  std::vector<std::string> clauses;
  for (const std::string& line : split(text, '\n'))
    for (const std::string& c : split(line, ';'))
      if (!c.empty()) clauses.push_back(c);
  std::vector<std::string> in_dims, out_dims, fixed_names;
  std::vector<std::vector<std::pair<std::string, int64_t>>> binds;
  std::vector<std::pair<std::string, int>> caps;
  for (const std::string& c : clauses) {
    size_t colon = c.find(':');
    if (colon == std::string::npos) throw Error("synth spec: clause '" + c + "' has no ':'");
    std::string key = trim(c.substr(0, colon)), body = trim(c.substr(colon + 1));
    if (key == "input" || key == "output") {
      std::string b = body;
      if (!b.empty() && b.front() == '[') b = b.substr(1);
      if (!b.empty() && b.back() == ']') b.pop_back();
      (key == "input" ? in_dims : out_dims) = split(b, ',');
    } else if (key == "coef" || key == "coefficients") {
      for (const std::string& item : split(body, ',')) {
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("synth spec: coefficient '" + item + "' needs a value (k=3)");
        Var v;
        v.coefficient = true;
        v.cap = 2;
        v.name = trim(item.substr(0, eq));
        std::string val = trim(item.substr(eq + 1));
        size_t cc = val.find(':');
        if (cc != std::string::npos) {
          v.cap = parse_cap(trim(val.substr(cc + 1)), v.name);
          val = trim(val.substr(0, cc));
        }
        v.value = parse_int(val, "value of " + v.name);
        if (!valid_name(v.name)) throw Error("synth spec: bad variable name '" + v.name + "'");
        if (s.find_coefficient(v.name) >= 0) throw Error("synth spec: coefficient '" + v.name + "' defined twice");
        if (s.coefficient.size() == size_t(kMaxVars))
          throw Error("synth spec: at most " + std::to_string(kMaxVars) + " coefficient variables");
        s.coefficient.push_back(v);
      }
    } else if (key == "bind" || key == "binding") {
      std::vector<std::pair<std::string, int64_t>> b;
      for (const std::string& item : split(body, ',')) {
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string::npos) throw Error("synth spec: binding item '" + item + "' needs name=value");
        b.push_back({trim(item.substr(0, eq)), parse_int(trim(item.substr(eq + 1)), "binding of " + trim(item.substr(0, eq)))});
      }
      binds.push_back(b);
    } else if (key == "cap" || key == "caps") {
      for (auto& item : parse_caps(body)) caps.push_back(item);
    } else if (key == "fixed") {
      fixed_names = split(body, ',');
    } else {
      throw Error("synth spec: unknown clause '" + key + "' (expected input, output, coef, bind, cap, fixed)");
    }
  }
  if (in_dims.empty() || out_dims.empty()) throw Error("synth spec: both 'input:' and 'output:' are required");
  if (binds.empty()) throw Error("synth spec: at least one 'bind:' clause is required");
  // Primary variables: every name bound in the first binding, in order.
  for (auto& [name, v] : binds[0]) {
    (void)v;
    if (!valid_name(name)) throw Error("synth spec: bad variable name '" + name + "'");
    if (s.find_coefficient(name) >= 0) throw Error("synth spec: '" + name + "' is both a coefficient and bound");
    if (s.find_primary(name) >= 0) throw Error("synth spec: '" + name + "' bound twice");
    if (s.primary.size() == size_t(kMaxVars))
      throw Error("synth spec: at most " + std::to_string(kMaxVars) +
                  " primary variables (the names of the first 'bind:' clause)");
    Var pv;
    pv.name = name;
    s.primary.push_back(pv);
  }
  for (size_t b = 0; b < binds.size(); ++b) {
    std::vector<int64_t> vals(s.primary.size(), 0);
    std::vector<bool> given(s.primary.size(), false);
    for (auto& [name, v] : binds[b]) {
      int i = s.find_primary(name);
      if (i < 0) throw Error("synth spec: binding " + std::to_string(b) + " names unknown variable '" + name + "'");
      vals[size_t(i)] = v;
      given[size_t(i)] = true;
    }
    for (size_t i = 0; i < vals.size(); ++i)
      if (!given[i])
        throw Error("synth spec: binding " + std::to_string(b) + " lacks a value for '" + s.primary[i].name + "'");
    s.bindings.push_back(vals);
  }
  apply_caps(s, caps);
  for (auto& d : in_dims) s.input.push_back(s.parse_size(d));
  for (auto& d : out_dims) s.output.push_back(s.parse_size(d));
  for (const std::string& f : fixed_names) {
    if (f.empty()) continue;
    Size z = s.parse_size(f);
    int o = -1, i = -1;
    for (size_t k = 0; k < s.output.size(); ++k)
      if (s.output[k] == z && o < 0) o = int(k);
    for (size_t k = 0; k < s.input.size(); ++k)
      if (s.input[k] == z && i < 0) i = int(k);
    if (o < 0 || i < 0) throw Error("synth spec: fixed dim '" + f + "' must appear in both shapes");
    s.fixed.push_back({o, i});
    int pv = s.find_primary(f);
    if (pv >= 0) s.primary[size_t(pv)].cap = 0;
  }
  s.validate();
  return s;
}

void set_caps(Spec& spec, const std::string& items) {
  std::vector<std::pair<std::string, int>> caps = parse_caps(items);
  for (auto& [name, cap] : caps)
    for (auto [o, i] : spec.fixed) {
      (void)i;
      if (cap != 0 && spec.str(spec.output[size_t(o)]) == name)
        throw Error("synth spec: '" + name + "' is passed through untouched (fixed); its cap stays 0");
    }
  apply_caps(spec, caps);
  spec.validate();
}

Spec conv2d_spec(bool same_channels, int64_t g) {
  std::ostringstream t;
  if (same_channels) {
    t << "input: N, C, H, W; output: N, C, H, W; coef: k=3:2, g=" << g << ":3, s=2:2;"
      << "bind: N=2, C=32, H=28, W=28; bind: N=2, C=64, H=14, W=14;"
      << "cap: C=3, H=0, W=0; fixed: N";
  } else {
    t << "input: N, C_in, H, W; output: N, C_out, H, W; coef: k=3:2, g=" << g << ":3, s=2:2;"
      << "bind: N=2, C_in=32, C_out=32, H=28, W=28; bind: N=2, C_in=64, C_out=64, H=14, W=14;"
      << "cap: C_in=2, C_out=4, H=0, W=0; fixed: N";
  }
  return parse_spec(t.str());
}

}  // namespace synoros::synth
