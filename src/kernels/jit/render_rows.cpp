// The C++ renderer for row kernels: each step of loop_ir.hpp's row form as a loop over the row, in
// the canonical order of the hand-written row kernels (composite.cpp, map_lines_avx2.cpp), so the
// generated code gives their bits. Vector instruction sets take their 8-lane AVX2 steps (lane t % 8
// of a segment is a lane of one vector), the scalar instruction set their scalar loops. On AVX-512
// the bodies of sums and stores run 16 lanes at a time, a sum adding the low 8 lanes and then the
// high 8 to its 8-lane accumulator: elements in the same order as the 8-lane steps, so the same
// bits (every vector form gives its scalar definition's bits at every width). Four rows go through
// each reduction together (four independent chains, as the hand-written layer norm does), which
// changes no bit. Column steps come last: each adds its value down the columns, row after row, into
// sums the caller passes after the inputs.
#include <cstring>
#include <sstream>

#include "kernels/jit/render_forms.hpp"

namespace synoros::kernels::jit {

namespace {

using Src = LoopInput::Src;
using Kind = RowStep::Kind;

enum class Mode { Wide, Vec, Tail, Scalar };  // 16 lanes at k; 8; m < 8; one element at k

constexpr int kRowsTogether = 4;

std::string constant(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  std::ostringstream o;
  o << "bits(0x" << std::hex << u << "u)";
  return o.str();
}

std::string vec_type(Mode m) { return m == Mode::Wide ? "VecW" : "VecF"; }

// An op's vector form at the mode's width.
std::string form_at(const char* form, Mode m) {
  std::string f = form;
  if (m != Mode::Wide) return f;
  for (size_t p = 0; (p = f.find("VecF", p)) != std::string::npos; p += 4) f[p + 3] = 'W';
  return f;
}

// Per-row input j's value at row r (a scalar expression).
std::string row_value(const LoopKernel& k, int j) {
  const LoopInput& in = k.inputs[size_t(j)];
  return "in[" + std::to_string(j) + "][r * " + std::to_string(in.row_stride) + "]";
}

// Input j of row r at element k.
std::string input_expr(const LoopKernel& k, size_t j, Mode m) {
  const LoopInput& in = k.inputs[j];
  std::string at, one;  // an element along the row; one value for the row
  switch (in.src) {
    case Src::Memory:
      if (in.stride == 0) one = row_value(k, int(j));
      else at = "in[" + std::to_string(j) + "] + r * " + std::to_string(in.row_stride) + " + k";
      break;
    case Src::Out: at = "out + r * N + k"; break;
    case Src::Step: one = "s" + std::to_string(in.step) + "[r]"; break;
    case Src::Const: one = constant(in.value); break;
    case Src::Gather: {
      const std::string row = in.of < 0 ? "out + r * N"
                                        : "in[" + std::to_string(in.of) + "] + r * " +
                                              std::to_string(k.inputs[size_t(in.of)].row_stride);
      one = "(" + row + ")[int64_t(" + row_value(k, in.at) + ")]";
      break;
    }
  }
  if (!one.empty()) return m == Mode::Scalar ? one : vec_type(m) + "::set(" + one + ")";
  if (m == Mode::Scalar) return "*(" + at + ")";
  return m == Mode::Tail ? "VecF::load_n(" + at + ", m)" : vec_type(m) + "::load(" + at + ")";
}

// The step's body at row r, element k (inputs read first, then the statements in order, each kept
// from folding with the next); returns the name of the step's value.
std::string emit_body(std::ostringstream& o, const LoopKernel& k, const RowStep& st, Mode m, const std::string& ind) {
  const bool vec = m != Mode::Scalar;
  const std::string T = vec ? vec_type(m) + "::R" : "float";
  std::vector<bool> used(k.inputs.size(), false);
  for (const LoopStmt& s : st.body)
    for (int j = 0; j < s.nargs; ++j)
      if (s.arg[j] < 0) used[size_t(-s.arg[j] - 1)] = true;
  if (st.value < 0) used[size_t(-st.value - 1)] = true;
  for (size_t j = 0; j < k.inputs.size(); ++j)
    if (used[j]) o << ind << "const " << T << " x" << j << " = " << input_expr(k, j, m) << ";\n";
  for (size_t i = 0; i < st.body.size(); ++i) {
    const LoopStmt& s = st.body[i];
    const std::string v = "v" + std::to_string(i);
    const char* form = vector_form(s.op);
    if (vec && form) {
      o << ind << T << " " << v << " = " << substitute(form_at(form, m).c_str(), s, value_name) << ";\n";
    } else if (vec) {  // no vector form: lane by lane through the scalar definition
      lane_by_lane(o, s, vec_type(m), v, ind, value_name);
    } else {
      o << ind << "float " << v << " = fn::" << fn_name(s.op) << "::f(";
      for (int j = 0; j < s.nargs; ++j) o << (j ? ", " : "") << value_name(s.arg[j]);
      o << ");\n";
    }
    o << ind << "SYNOROS_KEEP(" << v << ");\n";
  }
  return value_name(st.value);
}

// Reads ahead: each memory row and the output row of the next R rows at element k (one cache line
// per 16 elements), while this step computes; a prefetch never faults past the buffer's end.
std::string prefetch_next(const LoopKernel& k, const std::string& ind) {
  bool rows_out = false;  // the output is rows (a store), not results
  for (const RowStep& s : k.steps) rows_out = rows_out || s.kind == RowStep::Kind::Store;
  std::string o = rows_out ? ind + "prefetch(out, (r + R) * N + k);\n" : "";
  for (size_t j = 0; j < k.inputs.size(); ++j)
    if (k.inputs[j].src == Src::Memory && k.inputs[j].stride == 1 && k.inputs[j].row_stride > 0)
      o += ind + "prefetch(in[" + std::to_string(j) + "], (r + R) * " + std::to_string(k.inputs[j].row_stride) + " + k);\n";
  return o;
}

// The canonical sum of the step's value into s<i>[r] for the R rows; prefetch: the step reads
// ahead (the sum with the most work, see rows_source).
void emit_sum(std::ostringstream& o, const LoopKernel& k, const RowStep& st, size_t i, bool vec, bool wide,
              bool prefetch) {
  const std::string s = "s" + std::to_string(i);
  const std::string ahead = prefetch ? prefetch_next(k, "        ") : "";
  o << "  for (int r = 0; r < R; ++r) " << s << "[r] = 0.0f;\n";
  o << "  for (int64_t seg = 0; seg < N; seg += 4096) {\n";
  o << "    const int64_t end = N < seg + 4096 ? N : seg + 4096;\n";
  auto fold = [&](const std::string& lanes) {
    o << "    for (int r = 0; r < R; ++r) {\n";
    if (vec) o << "      alignas(32) float l[8];\n      VecF::store(l, acc[r]);\n";
    o << "      " << s << "[r] += ((" << lanes << "[0] + " << lanes << "[1]) + (" << lanes << "[2] + " << lanes
      << "[3])) + ((" << lanes << "[4] + " << lanes << "[5]) + (" << lanes << "[6] + " << lanes << "[7]));\n    }\n";
  };
  if (!vec) {
    o << "    float acc[R][8] = {};\n    for (int64_t k = seg; k < end; ++k) {\n";
    o << "      for (int r = 0; r < R; ++r) {\n";
    std::string v = emit_body(o, k, st, Mode::Scalar, "        ");
    if (st.store) o << "        out[r * N + k] = " << v << ";\n";
    o << "        acc[r][(k - seg) % 8] += " << v << ";\n      }\n    }\n";
    fold("acc[r]");
    o << "  }\n";
    return;
  }
  o << "    VecF::R acc[R];\n    for (int r = 0; r < R; ++r) acc[r] = VecF::set(0.0f);\n";
  o << "    int64_t k = seg;\n";
  std::string v;
  if (wide) {  // 16 lanes: the low 8 added first, as the 8-lane steps add elements k..k+7 first
    o << "    for (; k + 16 <= end; k += 16) {\n#pragma GCC unroll 4\n      for (int r = 0; r < R; ++r) {\n";
    o << ahead;
    v = emit_body(o, k, st, Mode::Wide, "        ");
    if (st.store) o << "        VecW::store(out + r * N + k, " << v << ");\n";
    o << "        acc[r] = VecF::add(acc[r], _mm512_castps512_ps256(" << v << "));\n";
    o << "        acc[r] = VecF::add(acc[r], _mm512_extractf32x8_ps(" << v << ", 1));\n      }\n    }\n";
  }
  o << "    for (; k + 8 <= end; k += 8) {\n#pragma GCC unroll 4\n";
  o << "      for (int r = 0; r < R; ++r) {\n";
  if (!ahead.empty()) o << "        if (k % 16 == 0) {\n" << ahead << "        }\n";
  v = emit_body(o, k, st, Mode::Vec, "        ");
  if (st.store) o << "        VecF::store(out + r * N + k, " << v << ");\n";
  o << "        acc[r] = VecF::add(acc[r], " << v << ");\n      }\n    }\n";
  o << "    if (k < end) {  // the tail: lanes past it add +0\n      const int64_t m = end - k;\n";
  o << "      const VecF::R keep = _mm256_castsi256_ps(VecF::edge(m));\n";
  o << "      for (int r = 0; r < R; ++r) {\n";
  v = emit_body(o, k, st, Mode::Tail, "        ");
  if (st.store) o << "        VecF::store_n(out + r * N + k, " << v << ", m);\n";
  o << "        acc[r] = VecF::add(acc[r], _mm256_and_ps(" << v << ", keep));\n      }\n    }\n";
  fold("l");
  o << "  }\n";
}

// The row's maximum into s<i>[r]: the vector build takes 8 lanes over whole vectors, folds them in
// lane order and then the tail; the scalar one goes element by element. std::max skips a NaN value.
void emit_max(std::ostringstream& o, const LoopKernel& k, const RowStep& st, size_t i, bool vec) {
  const std::string s = "s" + std::to_string(i);
  o << "  for (int r = 0; r < R; ++r) " << s << "[r] = -INFINITY;\n  int64_t k = 0;\n";
  if (vec) {
    o << "  {\n    VecF::R mv[R];\n    for (int r = 0; r < R; ++r) mv[r] = VecF::set(-INFINITY);\n";
    o << "    for (; k + 8 <= N; k += 8) {\n#pragma GCC unroll 4\n      for (int r = 0; r < R; ++r) {\n";
    std::string v = emit_body(o, k, st, Mode::Vec, "        ");
    o << "        mv[r] = VecF::max(" << v << ", mv[r]);\n      }\n    }\n";
    o << "    for (int r = 0; r < R; ++r) {\n      alignas(32) float l[8];\n      VecF::store(l, mv[r]);\n";
    o << "      for (float x : l) " << s << "[r] = std::max(" << s << "[r], x);\n    }\n  }\n";
  }
  o << "  for (; k < N; ++k) {\n    for (int r = 0; r < R; ++r) {\n";
  std::string v = emit_body(o, k, st, Mode::Scalar, "      ");
  o << "      " << s << "[r] = std::max(" << s << "[r], " << v << ");\n    }\n  }\n";
}

// The test that any of row r's guarded scalars is NaN.
std::string nan_test(const LoopKernel& k) {
  std::string t;
  for (size_t g = 0; g < k.nan_guard.size(); ++g)
    t += (g ? " || " : "") + std::string("std::isnan(s") + std::to_string(k.nan_guard[g]) + "[r])";
  return t;
}

// A step over the row's scalars, once per row: a scalar into s<i>[r], a result into its place
// among the row's outputs (the quiet NaN where the row is guarded), a patch into its position of
// the output row (none on a guarded row, which is NaN throughout).
void emit_scalar(std::ostringstream& o, const LoopKernel& k, const RowStep& st, size_t i) {
  o << "  for (int r = 0; r < R; ++r) {\n";
  const bool guarded = st.kind != Kind::Scalar && !k.nan_guard.empty();
  size_t result = 0;  // a result's place among the row's outputs
  for (size_t j = 0; j < i; ++j) result += k.steps[j].kind == Kind::Result;
  const std::string res = "out[r * OUT + " + std::to_string(result) + "]";
  if (guarded && st.kind == Kind::Result) o << "    if (" << nan_test(k) << ") {\n      " << res << " = NAN;\n      continue;\n    }\n";
  if (guarded && st.kind == Kind::Patch) o << "    if (" << nan_test(k) << ") continue;\n";
  std::string v = emit_body(o, k, st, Mode::Scalar, "    ");
  if (st.kind == Kind::Scalar) o << "    s" << i << "[r] = " << v << ";\n  }\n";
  if (st.kind == Kind::Result) o << "    " << res << " = " << v << ";\n  }\n";
  if (st.kind == Kind::Patch) o << "    out[r * N + int64_t(" << row_value(k, st.at) << ")] = " << v << ";\n  }\n";
}

// The output row, or the quiet NaN throughout where a guarded scalar is NaN.
void emit_store(std::ostringstream& o, const LoopKernel& k, const RowStep& st, bool vec, bool wide) {
  o << "  for (int r = 0; r < R; ++r) {\n";
  if (!k.nan_guard.empty()) {
    o << "    if (" << nan_test(k) << ") {\n      for (int64_t k = 0; k < N; ++k) out[r * N + k] = NAN;\n";
    o << "      continue;\n    }\n";
  }
  o << "    int64_t k = 0;\n";
  if (wide) {
    o << "    for (; k + 16 <= N; k += 16) {\n";
    std::string v = emit_body(o, k, st, Mode::Wide, "      ");
    o << "      VecW::store(out + r * N + k, " << v << ");\n    }\n";
  }
  if (vec) {
    o << "    for (; k + 8 <= N; k += 8) {\n";
    std::string v = emit_body(o, k, st, Mode::Vec, "      ");
    o << "      VecF::store(out + r * N + k, " << v << ");\n    }\n";
    o << "    if (k < N) {\n      const int64_t m = N - k;\n";
    v = emit_body(o, k, st, Mode::Tail, "      ");
    o << "      VecF::store_n(out + r * N + k, " << v << ", m);\n    }\n";
  } else {
    o << "    for (; k < N; ++k) {\n";
    std::string v = emit_body(o, k, st, Mode::Scalar, "      ");
    o << "      out[r * N + k] = " << v << ";\n    }\n";
  }
  o << "  }\n";
}

// The split form's second pass: element k of every column step's sums over rows [0, n), each row's
// scalars read from keep (S per row) and its inputs at the row; rows in ascending order.
std::string columns_at(const LoopKernel& k) {
  std::ostringstream o;
  o << "inline void columns_at(const char* const* ext, const float* out_, const float* keep, float* const* col, "
       "int64_t n, int64_t k) {\n";
  const int64_t c = k.columns();
  o << "  float acc[" << c << "] = {};\n  const float* in[" << k.inputs.size() << "] = {};\n";
  o << "  for (int64_t row = 0; row < n; ++row) {\n" << rows_pointers(k, "row", "    ");
  o << "    const float* out = out_ + row * OUT;\n    const int r = 0;\n    (void)out;\n    (void)r;\n";
  for (size_t i = 0, q = 0; i < k.steps.size(); ++i)
    if (k.steps[i].defines_scalar()) o << "    const float s" << i << "[1] = {keep[row * S + " << q++ << "]};\n";
  for (size_t i = 0, j = 0; i < k.steps.size(); ++i) {
    if (k.steps[i].kind != Kind::Column) continue;
    o << "    {\n";
    std::string v = emit_body(o, k, k.steps[i], Mode::Scalar, "      ");
    o << "      acc[" << j++ << "] += " << v << ";\n    }\n";
  }
  o << "  }\n";
  for (int64_t j = 0; j < c; ++j) o << "  col[" << j << "][k] = acc[" << j << "];\n";
  o << "}\n";
  return o.str();
}

// Column step i's value at every element of the R rows added to its sums, col[j] (the j-th column
// step), row after row: each column's chain takes the rows in order; elementwise adds give the
// same bits at every width.
void emit_column(std::ostringstream& o, const LoopKernel& k, const RowStep& st, size_t i, bool vec, bool wide) {
  int64_t j = 0;
  for (size_t s = 0; s < i; ++s) j += k.steps[s].kind == Kind::Column;
  const std::string c = "col[" + std::to_string(j) + "] + k";
  o << "  for (int r = 0; r < R; ++r) {\n    int64_t k = 0;\n";
  if (wide) {
    o << "    for (; k + 16 <= N; k += 16) {\n";
    std::string v = emit_body(o, k, st, Mode::Wide, "      ");
    o << "      VecW::store(" << c << ", VecW::add(VecW::load(" << c << "), " << v << "));\n    }\n";
  }
  if (vec) {
    o << "    for (; k + 8 <= N; k += 8) {\n";
    std::string v = emit_body(o, k, st, Mode::Vec, "      ");
    o << "      VecF::store(" << c << ", VecF::add(VecF::load(" << c << "), " << v << "));\n    }\n";
    o << "    if (k < N) {\n      const int64_t m = N - k;\n";
    v = emit_body(o, k, st, Mode::Tail, "      ");
    o << "      VecF::store_n(" << c << ", VecF::add(VecF::load_n(" << c << ", m), " << v << "), m);\n    }\n";
  } else {
    o << "    for (; k < N; ++k) {\n";
    std::string v = emit_body(o, k, st, Mode::Scalar, "      ");
    o << "      *(" << c << ") += " << v << ";\n    }\n";
  }
  o << "  }\n";
}

// Statements pointing col[j] at column step j's sums (ext after the inputs) and zeroing them
// (std::fill).
std::string columns_pointers(const LoopKernel& k, const std::string& ind) {
  std::ostringstream o;
  const int64_t c = k.columns();
  o << ind << "float* col[" << std::max<int64_t>(c, 1) << "] = {};\n";
  for (int64_t j = 0; j < c; ++j)  // the one entry of ext written: the caller's sums
    o << ind << "col[" << j << "] = reinterpret_cast<float*>(const_cast<char*>(ext[" << k.inputs.size() + size_t(j)
      << "]));\n" << ind << "std::fill(col[" << j << "], col[" << j << "] + N, 0.0f);\n";
  return o.str();
}

}  // namespace

std::string rows_source(const LoopKernel& k, bool vec, bool wide, bool split) {
  validate(k);
  if (k.row_n == 0) throw Error("jit: a run kernel is no row kernel");
  std::ostringstream o;
  int64_t scalars = 0;
  for (const RowStep& st : k.steps) scalars += st.defines_scalar();
  o << "namespace {\nconstexpr int64_t N = " << k.row_n << ", OUT = " << k.out_n() << ", S = " << scalars
    << ";  // per row: elements, outputs, scalars\n";
  o << "inline float bits(uint32_t u) {\n  float f;\n  memcpy(&f, &u, sizeof f);\n  return f;\n}\n";
  if (vec)
    o << "inline void prefetch(const float* p, int64_t i) {\n"
         "  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(i) * 4), _MM_HINT_T0);\n}\n";
  split = split && k.columns() > 0;
  if (split) {
    o << "\n// R rows: in[j] is input j at the first of them, out their first output; their scalars into keep.\n";
    o << "template <int R>\ninline void rows(const float* const* in, float* out, float* keep) {\n";
  } else {
    o << "\n// R rows: in[j] is input j at the first of them, out their first output, col[j] column step j's sums.\n";
    o << "template <int R>\ninline void rows(const float* const* in, float* out, float* const* col) {\n";
    if (k.columns() == 0) o << "  (void)col;\n";
  }
  for (size_t i = 0; i < k.steps.size(); ++i)
    if (k.steps[i].defines_scalar())
      o << "  float s" << i << "[R];\n";
  size_t ahead = k.steps.size();  // the sum with the most statements reads the next rows ahead
  for (size_t i = 0; i < k.steps.size(); ++i)
    if (vec && k.steps[i].kind == Kind::Sum && (ahead == k.steps.size() || k.steps[i].body.size() > k.steps[ahead].body.size()))
      ahead = i;
  for (size_t i = 0; i < k.steps.size(); ++i) {
    const RowStep& st = k.steps[i];
    o << "  {  // step " << i << "\n";
    switch (st.kind) {
      case Kind::Sum: emit_sum(o, k, st, i, vec, wide, i == ahead); break;
      case Kind::Max: emit_max(o, k, st, i, vec); break;
      case Kind::Scalar:
      case Kind::Patch:
      case Kind::Result: emit_scalar(o, k, st, i); break;
      case Kind::Store: emit_store(o, k, st, vec, wide); break;
      case Kind::Column:
        if (!split) emit_column(o, k, st, i, vec, wide);
        break;
    }
    o << "  }\n";
  }
  if (split) {
    for (size_t i = 0, q = 0; i < k.steps.size(); ++i)
      if (k.steps[i].defines_scalar())
        o << "  for (int r = 0; r < R; ++r) keep[r * S + " << q++ << "] = s" << i << "[r];\n";
  }
  o << "}\n";
  if (split) o << "\n" << columns_at(k);
  o << "}  // namespace\n\n";
  return o.str();
}

std::string rows_pointers(const LoopKernel& k, const std::string& row, const std::string& ind) {
  std::ostringstream o;
  for (size_t j = 0; j < k.inputs.size(); ++j)
    if (k.inputs[j].src == Src::Memory)
      o << ind << "in[" << j << "] = reinterpret_cast<const float*>(ext[" << j << "]) + " << row << " * "
        << k.inputs[j].row_stride << ";\n";
  return o.str();
}

std::string render_rows_cpp(const LoopKernel& k, Isa isa, const std::string& symbol, bool split) {
  const bool vec = isa != Isa::Scalar && !split, wide = isa == Isa::Avx512 && !split;
  std::ostringstream o;
  o << "// Generated by Synoros: " << k.text() << "\n";
  o << "#include <algorithm>\n#include <cmath>\n#include <cstdint>\n#include <cstring>\n";
  if (split) o << "#include <vector>\n";
  o << "#include \"ir/scalar_ops.hpp\"\n";
  if (vec) {
    o << "#include \"kernels/cpu/vec_math.hpp\"\n#include \"kernels/cpu/vec_avx2.hpp\"\n";
    o << "using VecF = synoros::kernels::avx2::VecF;\nnamespace vmath = synoros::kernels::vmath;\n";
  }
  if (wide) o << "#include \"kernels/cpu/vec_avx512.hpp\"\nusing VecW = synoros::kernels::avx512::VecF;\n";
  o << "namespace fn = synoros::fn;\n";
  o << "#define SYNOROS_KEEP(v) __asm__(\"\" : \"+v\"(v))\n\n";
  o << rows_source(k, vec, wide, split);
  o << "extern \"C\" void " << symbol << "(const char* const* ext, char* out_, int64_t n) {\n";
  o << "  float* out = reinterpret_cast<float*>(out_);\n  const float* in[" << k.inputs.size() << "] = {};\n";
  if (split && k.columns() > 0) {  // the CUDA form's two passes, one after the other
    o << "  std::vector<float> keep(size_t(n * S));\n" << columns_pointers(k, "  ");
    o << "  for (int64_t r = 0; r < n; ++r) {\n" << rows_pointers(k, "r", "    ");
    o << "    rows<1>(in, out + r * OUT, keep.data() + r * S);\n  }\n";
    o << "  for (int64_t k = 0; k < N; ++k) columns_at(ext, out, keep.data(), col, n, k);\n}\n";
    return o.str();
  }
  o << columns_pointers(k, "  ");
  o << "  int64_t r = 0;\n  auto at = [&](int64_t row) {\n" << rows_pointers(k, "row", "    ") << "  };\n";
  o << "  for (; r + " << kRowsTogether << " <= n; r += " << kRowsTogether << ") at(r), rows<" << kRowsTogether
    << ">(in, out + r * OUT, col);\n";
  o << "  for (; r < n; ++r) at(r), rows<1>(in, out + r * OUT, col);\n}\n";
  return o.str();
}

}  // namespace synoros::kernels::jit
