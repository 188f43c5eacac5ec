#include "cli/args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace synoros::cli {

namespace {
const char* type_name(Type t) {
  switch (t) {
    case Type::Flag: return "";
    case Type::Int: return "N";
    case Type::Real: return "X";
    case Type::Choice: return "CHOICE";
    case Type::Path: return "PATH";
    case Type::Text: return "TEXT";
  }
  return "";
}

std::string fmt_real(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string range_text(const Opt& o) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr double kRMax = std::numeric_limits<double>::max();
  if (o.type == Type::Int) {
    if (o.imax == kMax) return ">= " + std::to_string(o.imin);
    return std::to_string(o.imin) + " to " + std::to_string(o.imax);
  }
  if (o.type == Type::Real) {
    if (o.rmin == -kRMax && o.rmax == kRMax) return "any finite number";
    if (o.rmax == kRMax) return ">= " + fmt_real(o.rmin);
    return fmt_real(o.rmin) + " to " + fmt_real(o.rmax);
  }
  if (o.type == Type::Choice) {
    std::string c = o.choices;
    for (char& ch : c)
      if (ch == '|') ch = ',';
    return "one of " + c;
  }
  return "";
}

int64_t parse_int(const std::string& cmd, const Opt& o, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != 0) throw UsageError(cmd + ": --" + o.name + " expects an integer, got '" + v + "'");
  if (errno == ERANGE || x < o.imin || x > o.imax)  // both ends named: ">= 0" does not say where it stops
    throw UsageError(cmd + ": --" + o.name + " " + v + " is out of range (" + std::to_string(o.imin) + " to " +
                     std::to_string(o.imax) + ")");
  return x;
}

double parse_real(const std::string& cmd, const Opt& o, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != 0) throw UsageError(cmd + ": --" + o.name + " expects a number, got '" + v + "'");
  if (!std::isfinite(x)) throw UsageError(cmd + ": --" + o.name + " must be a finite number, got '" + v + "'");
  if (x < o.rmin || x > o.rmax)
    throw UsageError(cmd + ": --" + o.name + " " + v + " is out of range (" + range_text(o) + ")");
  return x;
}

void check_value(const std::string& cmd, const Opt& o, const std::string& v) {
  switch (o.type) {
    case Type::Int: parse_int(cmd, o, v); break;
    case Type::Real: parse_real(cmd, o, v); break;
    case Type::Choice:
      if (v.find('|') != std::string::npos || ("|" + o.choices + "|").find("|" + v + "|") == std::string::npos)
        throw UsageError(cmd + ": --" + o.name + " '" + v + "' is not " + range_text(o));
      break;
    case Type::Path:
      if (v.empty()) throw UsageError(cmd + ": --" + o.name + " needs a non-empty path");
      break;
    case Type::Text: break;  // may be empty (an empty prompt, say)
    case Type::Flag: break;
  }
}

Opt make(std::string name, Type t, std::string fallback, std::string help, std::string scope) {
  Opt o;
  o.name = std::move(name);
  o.type = t;
  o.fallback = std::move(fallback);
  o.help = std::move(help);
  o.scope = std::move(scope);
  return o;
}
}  // namespace

Opt flag(std::string name, std::string help, std::string scope) {
  return make(std::move(name), Type::Flag, "", std::move(help), std::move(scope));
}
Opt integer(std::string name, int64_t fallback, int64_t lo, int64_t hi, std::string help, std::string scope) {
  return integer_words(std::move(name), std::to_string(fallback), lo, hi, std::move(help), std::move(scope));
}
Opt integer_words(std::string name, std::string fallback, int64_t lo, int64_t hi, std::string help, std::string scope) {
  Opt o = make(std::move(name), Type::Int, std::move(fallback), std::move(help), std::move(scope));
  o.imin = lo, o.imax = hi;
  return o;
}
Opt real(std::string name, std::string fallback, double lo, double hi, std::string help, std::string scope) {
  Opt o = make(std::move(name), Type::Real, std::move(fallback), std::move(help), std::move(scope));
  o.rmin = lo, o.rmax = hi;
  return o;
}
Opt choice(std::string name, std::string fallback, std::string choices, std::string help, std::string scope) {
  Opt o = make(std::move(name), Type::Choice, std::move(fallback), std::move(help), std::move(scope));
  o.choices = std::move(choices);
  return o;
}
Opt path(std::string name, std::string fallback, std::string help, std::string scope) {
  return make(std::move(name), Type::Path, std::move(fallback), std::move(help), std::move(scope));
}
Opt text(std::string name, std::string fallback, std::string help, std::string scope) {
  return make(std::move(name), Type::Text, std::move(fallback), std::move(help), std::move(scope));
}

std::string help_text(const CommandSpec& spec) {
  std::ostringstream o;
  o << "usage: synoros " << spec.name << (spec.opts.empty() ? "" : " [options]") << "\n" << spec.summary << "\n";
  if (!spec.details.empty()) o << "\n" << spec.details << "\n";
  if (!spec.opts.empty()) o << "\noptions:\n";
  for (const Opt& f : spec.opts) {
    std::string head = "  --" + f.name + (f.type == Type::Flag ? "" : std::string(" ") + type_name(f.type));
    o << head;
    if (head.size() < 26) o << std::string(26 - head.size(), ' ');
    else o << "\n" << std::string(26, ' ');
    o << f.help;
    std::string range = range_text(f);
    if (!range.empty()) o << "; " << range;
    if (!f.fallback.empty()) o << " (default: " << f.fallback << ")";
    if (!f.scope.empty()) {
      auto it = spec.scopes.find(f.scope);
      o << " [" << (it == spec.scopes.end() ? f.scope : it->second) << "]";
    }
    o << "\n";
  }
  o << "  --help                  print this help and exit\n";
  return o.str();
}

bool wants_help(const CommandSpec& spec, int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
    if (a.rfind("--", 0) != 0 || a.find('=') != std::string::npos) continue;
    for (const Opt& f : spec.opts)
      if ("--" + f.name == a && f.type != Type::Flag) ++i;  // its value, whatever it reads
  }
  return false;
}

Args::Args(const CommandSpec& spec, int argc, char** argv) : spec_(spec) {
  const std::string& cmd = spec.name;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) throw UsageError(cmd + ": unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    size_t eq = name.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    const Opt* o = nullptr;
    for (const Opt& f : spec.opts)
      if (f.name == name) o = &f;
    if (!o) throw UsageError(cmd + ": unknown option '--" + name + "' (see synoros " + cmd + " --help)");
    if (values_.count(name)) throw UsageError(cmd + ": --" + name + " is given twice");
    if (o->type == Type::Flag) {
      if (inline_value) throw UsageError(cmd + ": --" + name + " takes no value");
      values_[name] = "1";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(cmd + ": --" + name + " needs a value");
      value = argv[++i];
    }
    check_value(cmd, *o, value);
    values_[name] = value;
  }
}

const Opt& Args::row(const std::string& name) const {
  for (const Opt& f : spec_.opts)
    if (f.name == name) return f;
  throw Error(spec_.name + ": internal: no option --" + name);
}

std::string Args::str(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() ? it->second : row(name).fallback;
}
std::string Args::str(const std::string& name, const std::string& fallback) const {
  row(name);
  auto it = values_.find(name);
  return it != values_.end() ? it->second : fallback;
}
int64_t Args::integer(const std::string& name) const { return parse_int(spec_.name, row(name), str(name)); }
int64_t Args::integer(const std::string& name, int64_t fallback) const {
  return has(name) ? integer(name) : (row(name), fallback);
}
double Args::real(const std::string& name) const { return parse_real(spec_.name, row(name), str(name)); }
double Args::real(const std::string& name, double fallback) const {
  return has(name) ? real(name) : (row(name), fallback);
}

void Args::require_scope(const std::string& scope, const std::string& what) const {
  for (const auto& [name, v] : values_) {
    const Opt& o = row(name);
    if (!o.scope.empty() && o.scope != scope) {
      auto it = spec_.scopes.find(o.scope);
      throw UsageError(spec_.name + ": --" + name + " does not apply to " + what +
                       (it == spec_.scopes.end() ? "" : " (only " + it->second + ")"));
    }
  }
}

void Args::refuse(const std::string& name, const std::string& why) const {
  if (has(name)) throw UsageError(spec_.name + ": --" + name + " " + why);
}

}  // namespace synoros::cli
