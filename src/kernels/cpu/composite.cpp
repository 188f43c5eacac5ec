// Fused kernels for composites: softmax family, layernorm, cross-entropy, embedding.
// Each line (a softmax row, a sample) is handled by one thread in a fixed order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/cpu/line_fn.hpp"
#include "ir/scalar_ops.hpp"

#include "kernels/cpu/cpu_kernels.hpp"

namespace synoros::kernels {

namespace {
constexpr int64_t kLinesPerChunk = 32;

struct LineArgs {
  int64_t outer, n, inner;  // lines are (o, i); elements along n at stride inner
  const void* in[3];
  void* out;
  double eps;
  int n_in;
  int op;  // which composite
  bool f64;
  bool avx2;  // the AVX2 builds of the float softmax steps may run
  // The launch as a row kernel (float rows of n, contiguous: softmax, layer norm and its gradient;
  // else null), and the generated run Recompile installed for it (null: the code below).
  const jit::LoopKernel* loop;
  jit::RunFn jit;
};

// A row whose statistic (a softmax's sum, a layernorm's mean or scale) is NaN is NaN throughout
// (ops.def); it is written as the one quiet NaN, so that its sign does not depend on which of
// two NaN operands an instruction set's code happened to return.
void fill_nan(float* y, int64_t n, int64_t st) {
  for (int64_t k = 0; k < n; ++k) y[k * st] = std::numeric_limits<float>::quiet_NaN();
}

// Float softmax, in the canonical order on every instruction set: m = the row's maximum (a NaN
// element is skipped here and makes the sum NaN), e = exp(x - m) with scalar_ops.hpp's exp, and
// s = the sum of e as the reductions sum a row: element t into lane t % 8 of its 4096-element
// segment, lanes combined pairwise, segments added in order. Softmax: e / s; log-softmax:
// (x - m) - log(s) with scalar_ops.hpp's log. A contiguous row takes the vector builds of the same
// steps.
void softmax_line_f32(const LineArgs& a, const float* x, float* y, int64_t st, bool log_out) {
  const int64_t n = a.n;
  float m, s;
  if (st == 1 && a.avx2) {
    m = row_steps(int(active_isa())).max(x, n);
    s = softmax_exp_sum_vec(x, log_out ? nullptr : y, n, m);  // y may be x: log-softmax reads x again
  } else {
    m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, x[k * st]);
    s = 0;
    for (int64_t seg = 0; seg < n; seg += 4096) {
      float l[8] = {};
      for (int64_t k = seg; k < std::min(n, seg + 4096); ++k) {
        const float e = fn::exp_f32(x[k * st] - m);
        if (!log_out) y[k * st] = e;
        l[(k - seg) % 8] += e;
      }
      s += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    }
  }
  if (std::isnan(s)) return fill_nan(y, n, st);
  if (log_out) {
    const float ls = fn::Log::f(s);
    for (int64_t k = 0; k < n; ++k) y[k * st] = x[k * st] - m - ls;
  } else if (st == 1 && a.avx2) {
    row_steps(int(active_isa())).divide(y, n, s);
  } else {
    for (int64_t k = 0; k < n; ++k) y[k * st] /= s;
  }
}

template <class T>
void softmax_line(const LineArgs& a, const T* x, T* y, int64_t st, bool log_out) {
  if constexpr (std::is_same_v<T, float>) return softmax_line_f32(a, x, y, st, log_out);
  T m = -INFINITY;
  for (int64_t k = 0; k < a.n; ++k) m = std::max(m, x[k * st]);
  T s = 0;
  for (int64_t k = 0; k < a.n; ++k) s += std::exp(x[k * st] - m);
  if (log_out) {
    T ls = std::log(s);
    for (int64_t k = 0; k < a.n; ++k) y[k * st] = x[k * st] - m - ls;
  } else {
    for (int64_t k = 0; k < a.n; ++k) y[k * st] = std::exp(x[k * st] - m) / s;
  }
}

// Softmax's gradient: s = the sum of y g, dx = y (g - s); log-softmax's: s = the sum of g,
// dx = g - exp(y) s. Float sums take the canonical order, float exp scalar_ops.hpp's, and a float
// row whose s is NaN is the one quiet NaN (the row's every element is NaN then anyway; this fixes
// its sign, which y (g - s) with two NaN operands would leave to the compiler).
template <class T>
void softmax_grad_line(const LineArgs& a, const T* yv, const T* g, T* dx, int64_t st, bool log_in) {
  if constexpr (std::is_same_v<T, float>) {
    const float s = log_in ? canonical_sum(a.n, [&](int64_t k) { return g[k * st]; })
                           : canonical_sum(a.n, [&](int64_t k) { return yv[k * st] * g[k * st]; });
    if (std::isnan(s)) return fill_nan(dx, a.n, st);
    for (int64_t k = 0; k < a.n; ++k)
      dx[k * st] = log_in ? g[k * st] - fn::Exp::f(yv[k * st]) * s : yv[k * st] * (g[k * st] - s);
    return;
  }
  T s = 0;
  if (log_in) {
    for (int64_t k = 0; k < a.n; ++k) s += g[k * st];
    for (int64_t k = 0; k < a.n; ++k) dx[k * st] = g[k * st] - std::exp(yv[k * st]) * s;
  } else {
    for (int64_t k = 0; k < a.n; ++k) s += yv[k * st] * g[k * st];
    for (int64_t k = 0; k < a.n; ++k) dx[k * st] = yv[k * st] * (g[k * st] - s);
  }
}

// Float layernorm in the canonical order on every instruction set: mean = the sum of x / n and
// var = the sum of (x - mean)^2 / n, each summed as the reductions sum a row (element t into lane
// t % 8 of its 4096-element segment, lanes combined pairwise, segments added in order), r =
// 1 / sqrt(var + eps), y = ((x - mean) r) w + b. The gradient's two sums, of gw = g w and of
// gw xh with xh = (x - mean) r, take the same order. A row takes the AVX2 builds of the same steps
// where they run (line_fn.hpp); the scalar loops below (canonical_sum) are the definition.

// The mean and 1 / sqrt(var + eps) of `rows` consecutive rows of n.
void layernorm_stats_f32(bool vec, const float* x, int64_t n, int64_t rows, float eps, float* mean, float* r) {
  if (vec) return avx2::layernorm_stats(x, n, rows, eps, mean, r);
  for (int64_t j = 0; j < rows; ++j) {
    const float* xr = x + j * n;
    mean[j] = canonical_sum(n, [&](int64_t k) { return xr[k]; }) / float(n);
    const float m = mean[j];
    const float var = canonical_sum(n, [&](int64_t k) { return (xr[k] - m) * (xr[k] - m); }) / float(n);
    r[j] = 1.0f / std::sqrt(var + eps);
  }
}

// Lines [l0, l1) of a float layernorm (grad: its input gradient). Lines are consecutive rows
// of n; the AVX2 build takes the row statistics and sums four rows at a time.
void layernorm_lines_f32(const LineArgs& a, int64_t l0, int64_t l1, bool grad) {
  const int64_t n = a.n, rows = l1 - l0;
  const float* x = static_cast<const float*>(a.in[0]) + l0 * n;
  float* y = static_cast<float*>(a.out) + l0 * n;
  float mean[kLinesPerChunk], r[kLinesPerChunk], mg[kLinesPerChunk], mgx[kLinesPerChunk];
  layernorm_stats_f32(a.avx2, x, n, rows, float(a.eps), mean, r);
  if (!grad) {
    const float* w = a.n_in == 3 ? static_cast<const float*>(a.in[1]) : nullptr;
    const float* b = a.n_in == 3 ? static_cast<const float*>(a.in[2]) : nullptr;
    for (int64_t j = 0; j < rows; ++j) {
      const float *xr = x + j * n, m = mean[j], rj = r[j];
      float* yr = y + j * n;
      if (std::isnan(m) || std::isnan(rj)) {
        fill_nan(yr, n, 1);
      } else if (a.avx2) {
        avx2::layernorm_apply(xr, yr, n, m, rj, w, b);
      } else {
        for (int64_t k = 0; k < n; ++k) {
          const float v = (xr[k] - m) * rj;
          yr[k] = w ? v * w[k] + b[k] : v;
        }
      }
    }
    return;
  }
  const float* g = static_cast<const float*>(a.in[1]) + l0 * n;
  const float* w = a.n_in == 3 ? static_cast<const float*>(a.in[2]) : nullptr;
  if (a.avx2) {
    avx2::layernorm_grad_sums(x, g, w, n, rows, mean, r, mg, mgx);
  } else {
    for (int64_t j = 0; j < rows; ++j) {
      const float *xr = x + j * n, *gr = g + j * n, m = mean[j], rj = r[j];
      auto gw = [&](int64_t k) { return w ? gr[k] * w[k] : gr[k]; };
      mg[j] = canonical_sum(n, gw) / float(n);
      mgx[j] = canonical_sum(n, [&](int64_t k) { return gw(k) * ((xr[k] - m) * rj); }) / float(n);
    }
  }
  for (int64_t j = 0; j < rows; ++j) {
    const float *xr = x + j * n, *gr = g + j * n, m = mean[j], rj = r[j];
    float* dx = y + j * n;
    if (std::isnan(m) || std::isnan(rj) || std::isnan(mg[j]) || std::isnan(mgx[j])) {
      fill_nan(dx, n, 1);
    } else if (a.avx2) {
      avx2::layernorm_grad_apply(xr, gr, w, dx, n, m, rj, mg[j], mgx[j]);
    } else {
      for (int64_t k = 0; k < n; ++k) {
        const float gw = w ? gr[k] * w[k] : gr[k];
        dx[k] = rj * ((gw - mg[j]) - ((xr[k] - m) * rj) * mgx[j]);
      }
    }
  }
}

// Float64 layernorm: mean and 1/sqrt(var + eps) of one row, summed in index order.
template <class T>
void row_stats(const LineArgs& a, const T* x, T& mean, T& r) {
  mean = 0;
  for (int64_t k = 0; k < a.n; ++k) mean += x[k];
  mean /= T(a.n);
  T var = 0;
  for (int64_t k = 0; k < a.n; ++k) var += (x[k] - mean) * (x[k] - mean);
  var /= T(a.n);
  r = T(1) / std::sqrt(var + T(a.eps));
}

template <class T>
void layernorm_line(const LineArgs& a, const T* x, T* y) {
  T mean, r;
  row_stats(a, x, mean, r);
  const T* w = static_cast<const T*>(a.in[1]);
  const T* b = static_cast<const T*>(a.in[2]);
  if (a.n_in == 3) {
    for (int64_t k = 0; k < a.n; ++k) y[k] = (x[k] - mean) * r * w[k] + b[k];
  } else {
    for (int64_t k = 0; k < a.n; ++k) y[k] = (x[k] - mean) * r;
  }
}

// dx = r (gw - mean(gw) - xh mean(gw xh)) with xh = (x - mean) r and gw = g * weight.
template <class T>
void layernorm_grad_line(const LineArgs& a, const T* x, const T* g, T* dx) {
  T mean, r;
  row_stats(a, x, mean, r);
  const T* w = static_cast<const T*>(a.in[2]);
  T mg = 0, mgx = 0;
  for (int64_t k = 0; k < a.n; ++k) {
    T gw = a.n_in == 3 ? g[k] * w[k] : g[k];
    mg += gw;
    mgx += gw * ((x[k] - mean) * r);
  }
  mg /= T(a.n);
  mgx /= T(a.n);
  for (int64_t k = 0; k < a.n; ++k) {
    T gw = a.n_in == 3 ? g[k] * w[k] : g[k];
    dx[k] = r * (gw - mg - ((x[k] - mean) * r) * mgx);
  }
}

// Input j of a launch with a row kernel at line l: its memory inputs are the launch's inputs in
// order (row_kernel builds them so), each with its row stride (0: a per-column weight).
const float* input_at_line(const LineArgs& a, int j, int64_t l) {
  return static_cast<const float*>(a.in[j]) + l * a.loop->inputs[size_t(j)].row_stride;
}

// Lines [l0, l1) through the generated row kernel.
void generated_lines(const LineArgs& a, int64_t l0, int64_t l1) {
  const char* ext[3] = {};
  for (int j = 0; j < a.n_in; ++j) ext[j] = reinterpret_cast<const char*>(input_at_line(a, j, l0));
  a.jit(ext, reinterpret_cast<char*>(static_cast<float*>(a.out) + l0 * a.n), l1 - l0);
}

template <class T>
void line_chunk_t(const LineArgs& a, int64_t chunk) {
  int64_t lines = a.outer * a.inner;
  int64_t l1 = std::min(lines, (chunk + 1) * kLinesPerChunk);
  if (a.jit) return generated_lines(a, chunk * kLinesPerChunk, l1);
  if constexpr (std::is_same_v<T, float>) {
    if (a.op == 4 || a.op == 5) return layernorm_lines_f32(a, chunk * kLinesPerChunk, l1, a.op == 5);
  }
  for (int64_t l = chunk * kLinesPerChunk; l < l1; ++l) {
    int64_t o = l / a.inner, i = l % a.inner;
    int64_t base = o * a.n * a.inner + i;
    const T* x0 = static_cast<const T*>(a.in[0]) + base;
    T* y = static_cast<T*>(a.out) + base;
    switch (a.op) {
      case 0: softmax_line<T>(a, x0, y, a.inner, false); break;
      case 1: softmax_line<T>(a, x0, y, a.inner, true); break;
      case 2: softmax_grad_line<T>(a, x0, static_cast<const T*>(a.in[1]) + base, y, a.inner, false); break;
      case 3: softmax_grad_line<T>(a, x0, static_cast<const T*>(a.in[1]) + base, y, a.inner, true); break;
      case 4: layernorm_line<T>(a, x0, y); break;
      case 5: layernorm_grad_line<T>(a, x0, static_cast<const T*>(a.in[1]) + base, y); break;
    }
  }
}

void line_chunk(const void* p, int64_t chunk) {
  const LineArgs& a = *static_cast<const LineArgs*>(p);
  a.f64 ? line_chunk_t<double>(a, chunk) : line_chunk_t<float>(a, chunk);
}

void line_launch(const void* p, ThreadPool& pool) {
  const LineArgs& a = *static_cast<const LineArgs*>(p);
  pool.run((a.outer * a.inner + kLinesPerChunk - 1) / kLinesPerChunk, line_chunk, p);
}

// Builds a row kernel (loop_ir.hpp): its inputs, each named as a statement's argument names it,
// and its steps, each body a list of statements.
struct RowBuilder {
  using Src = jit::LoopInput::Src;
  using Kind = jit::RowStep::Kind;
  struct Body {
    std::vector<jit::LoopStmt> s;
    int operator()(Op op, int x) { return add({op, 1, {x, 0, 0}}); }
    int operator()(Op op, int x, int y) { return add({op, 2, {x, y, 0}}); }
    int add(jit::LoopStmt st) {
      s.push_back(st);
      return int(s.size()) - 1;
    }
  };
  std::unique_ptr<jit::LoopKernel> k = std::make_unique<jit::LoopKernel>();
  explicit RowBuilder(int64_t row_n) { k->row_n = row_n; }
  int input(jit::LoopInput in) {
    k->inputs.push_back(in);
    return -int(k->inputs.size());
  }
  int scalar(int step) { return input({0, Src::Step, 0, step}); }
  int constant(float v) { return input({0, Src::Const, 0, -1, v}); }
  // The body by reference: its statements are taken once every argument is evaluated.
  int step(Kind kind, const Body& b, int value, bool store = false, int at = -1) {
    k->steps.push_back({kind, store, b.s, value, at});
    return int(k->steps.size()) - 1;
  }
};

// A line launch as a row kernel (loop_ir.hpp): the steps of softmax_line_f32, softmax_grad_line
// and layernorm_lines_f32 above, statement for statement, in their order; param_sums (a layer
// norm's gradient): then the weight's and bias's column sums, g xh and g, as layernorm_param_rows
// takes them. Null where the launch is not float or its rows are not contiguous.
const jit::LoopKernel* row_kernel(const LineArgs& a, PlanStorage& storage, bool param_sums = false) {
  if (a.f64 || a.inner != 1 || a.n == 0) return nullptr;
  using Src = jit::LoopInput::Src;
  using Kind = jit::RowStep::Kind;
  using Body = RowBuilder::Body;
  RowBuilder rb(a.n);
  auto& k = rb.k;
  auto input = [&](jit::LoopInput in) { return rb.input(in); };
  // The memory inputs first, in the launch's order (generated_lines passes them so): the rows
  // (x, and the gradient's g) and the per-column weight and bias.
  const bool grad = a.op == 5, affine = a.n_in == 3;
  std::vector<int> mem;
  for (int j = 0; j < a.n_in; ++j) {
    const bool per_column = affine && j >= (grad ? 2 : 1);
    mem.push_back(input({1, Src::Memory, per_column ? 0 : a.n}));
  }
  auto scalar = [&](int step) { return rb.scalar(step); };
  auto constant = [&](float v) { return rb.constant(v); };
  auto step = [&](Kind kind, const Body& b, int value, bool store = false) { return rb.step(kind, b, value, store); };
  const int x = mem[0];
  if (a.op <= 1) {  // m = max x; s = sum of e = exp(x - m); y = e / s (e stored) or (x - m) - log s
    const bool log_out = a.op == 1;
    const int m = scalar(step(Kind::Max, {}, x));
    Body e;
    const int sum = step(Kind::Sum, e, e(Op::Exp, e(Op::Sub, x, m)), !log_out);
    Body y;
    if (log_out) {
      Body ls;
      const int l = scalar(step(Kind::Scalar, ls, ls(Op::Log, scalar(sum))));
      step(Kind::Store, y, y(Op::Sub, y(Op::Sub, x, m), l));
    } else {
      const int out = input({0, Src::Out}), s = scalar(sum);
      step(Kind::Store, y, y(Op::Div, out, s));
    }
    k->nan_guard = {sum};
    return storage.own(std::move(k));
  }
  if (a.op <= 3) {  // the gradients: x is y, mem[1] the upstream g
    const int g = mem[1];
    Body t, dx;
    const int sum = a.op == 2 ? step(Kind::Sum, t, t(Op::Mul, x, g)) : step(Kind::Sum, t, g);
    const int s = scalar(sum);
    if (a.op == 2) {  // s = sum y g; dx = y (g - s)
      step(Kind::Store, dx, dx(Op::Mul, x, dx(Op::Sub, g, s)));
    } else {  // s = sum g; dx = g - exp(y) s
      step(Kind::Store, dx, dx(Op::Sub, g, dx(Op::Mul, dx(Op::Exp, x), s)));
    }
    k->nan_guard = {sum};
    return storage.own(std::move(k));
  }
  // mean = sum x / n; r = 1 / sqrt(sum (x - mean)^2 / n + eps)
  const int n = constant(float(a.n));
  Body mean_b;
  const int mean_s = step(Kind::Scalar, mean_b, mean_b(Op::Div, scalar(step(Kind::Sum, {}, x)), n));
  const int mean = scalar(mean_s);
  Body sq;
  const int d = sq(Op::Sub, x, mean);
  const int var = scalar(step(Kind::Sum, sq, sq(Op::Mul, d, d)));
  Body r_b;
  const int r_s = step(Kind::Scalar, r_b, r_b(Op::Rsqrt, r_b(Op::Add, r_b(Op::Div, var, n), constant(float(a.eps)))));
  const int r = scalar(r_s);
  if (!grad) {  // y = ((x - mean) r) w + b
    Body y;
    int v = y(Op::Mul, y(Op::Sub, x, mean), r);
    if (affine) v = y(Op::Add, y(Op::Mul, v, mem[1]), mem[2]);
    step(Kind::Store, y, v);
    k->nan_guard = {mean_s, r_s};
    return storage.own(std::move(k));
  }
  // gw = g w; mg = sum gw / n; mgx = sum gw xh / n with xh = (x - mean) r;
  // dx = r ((gw - mg) - xh mgx)
  const int g = mem[1];
  auto gw = [&](Body& b) { return affine ? b(Op::Mul, g, mem[2]) : g; };
  Body mg_sum, mg_b;
  const int mg_total = scalar(step(Kind::Sum, mg_sum, gw(mg_sum)));
  const int mg_s = step(Kind::Scalar, mg_b, mg_b(Op::Div, mg_total, n));
  Body mgx_sum, mgx_b;
  const int t = mgx_sum(Op::Mul, gw(mgx_sum), mgx_sum(Op::Mul, mgx_sum(Op::Sub, x, mean), r));
  const int mgx_total = scalar(step(Kind::Sum, mgx_sum, t));
  const int mgx_s = step(Kind::Scalar, mgx_b, mgx_b(Op::Div, mgx_total, n));
  const int mg = scalar(mg_s), mgx = scalar(mgx_s);
  Body dx;
  const int w_g = gw(dx);
  const int xh = dx(Op::Mul, dx(Op::Sub, x, mean), r);
  step(Kind::Store, dx, dx(Op::Mul, r, dx(Op::Sub, dx(Op::Sub, w_g, mg), dx(Op::Mul, xh, mgx))));
  if (param_sums) {
    Body dw;
    step(Kind::Column, dw, dw(Op::Mul, g, dw(Op::Mul, dw(Op::Sub, x, mean), r)));
    step(Kind::Column, {}, g);
  }
  k->nan_guard = {mean_s, r_s, mg_s, mgx_s};
  return storage.own(std::move(k));
}

const LineArgs& lines_of(const void* p) { return *static_cast<const LineArgs*>(p); }

// Output elements [begin, end), whole rows, into dst: the launch's chunks over those rows alone.
void lines_eval(const void* p, int64_t begin, int64_t end, void* dst) {
  LineArgs c = lines_of(p);
  const int64_t r0 = begin / c.n;
  for (int j = 0; j < c.n_in; ++j) c.in[j] = input_at_line(c, j, r0);
  c.outer = end / c.n - r0;
  c.out = dst;
  for (int64_t ch = 0; ch * kLinesPerChunk < c.outer; ++ch) line_chunk(&c, ch);
}

const JitSite::Ops kLinesSite = {
    [](const void*) {},
    lines_eval,
    [](void* p, jit::RunFn run) { static_cast<LineArgs*>(p)->jit = run; },
    [](const void* p) { return lines_of(p).jit; },
};

Launch lower_lines(LowerCtx& c, int op, int axis) {
  const Shape& s = c.node.shape;
  auto* a = c.args<LineArgs>();
  a->n = s[size_t(axis)];
  a->outer = 1;
  for (int d = 0; d < axis; ++d) a->outer *= s[size_t(d)];
  a->inner = 1;
  for (size_t d = size_t(axis) + 1; d < s.size(); ++d) a->inner *= s[d];
  for (size_t k = 0; k < c.in.size() && k < 3; ++k) a->in[k] = c.in[k];
  a->n_in = int(c.in.size());
  a->out = c.out;
  const bool norm = c.node.op == Op::LayerNorm || c.node.op == Op::LayerNormGrad;
  a->eps = norm ? c.node.attr<attr::Eps>().eps : 0.0;  // softmax has none
  a->op = op;
  a->f64 = c.node.dtype == DType::F64;
  a->avx2 = active_isa() != Isa::Scalar;
  a->jit = nullptr;
  a->loop = row_kernel(*a, c.storage);
  if (a->loop)
    c.storage.register_jit_site(
        {c.id, a, a->loop, a->outer * a->n, a->n, "rows" + std::to_string(kLinesPerChunk), &kLinesSite});
  return {line_launch, a, c.id};
}

int axis_attr(const LowerCtx& c) {
  return normalize_axis(c.node.attr<attr::Axis>().axis, c.node.shape.size(), op_name(c.node.op), c.node.shape);
}


// ---- cross entropy (mean over the samples whose target is not the ignored one, if any); its
// gradient scales by the upstream scalar and is zero on ignored rows. Rows are independent tasks
// of kXentRows; the forward's per-row losses are added in row order afterwards, so the bits do
// not depend on the thread count. Float rows take the canonical softmax steps (the row's maximum,
// exp(x - m) with scalar_ops.hpp's exp, their sum in the reductions' lane order), AVX2 where it
// runs; a row whose sum is NaN has a NaN loss and gradient (the one quiet NaN). A float forward
// whose gradient is in the graph keeps each row's m and s beside its loss, and where the plan
// launches the gradient after it, the gradient reads them instead of taking the row's maximum and
// sum again: one pass over the logits instead of three, with the same bits.
constexpr int64_t kXentRows = 8;
struct XentArgs {
  int64_t N, C;
  const void* logits;
  const void* target;
  const void* gout;
  void* out;
  bool f64, i64;
  bool has_ignore;
  int64_t ignore;
  bool avx2;
  bool grad;
  // forward: per row, the loss (res_n 1) or the loss, m and s (res_n 3: a gradient reads them)
  void* losses;
  int64_t res_n;
  const float* stats;  // gradient: its forward's `losses` with m and s (float; else null)
  double gscale;  // gradient: the upstream scalar over the rows counted
  // The launch as a row kernel (float, fewer than 2^24 classes; else null), the generated run
  // Recompile installed for it (null: the code below), and the kernel's per-row inputs: each
  // row's target as a float (0 on an ignored row), then the gradient's scale (scratch, N + 1).
  const jit::LoopKernel* loop;
  jit::RunFn jit;
  float* rowvals;
};

bool xent_ignored(const XentArgs& a, int64_t r) { return a.has_ignore && index_at(a.target, a.i64, r) == a.ignore; }

// Values per row of a launch's output: a gradient row, or the forward's per-row results.
int64_t xent_per_row(const XentArgs& a) { return a.grad ? a.C : a.res_n; }

// The row's maximum m and the sum s of exp(x - m) (written to e when it is not null).
void xent_row_f32(const XentArgs& a, const float* x, float* e, float& m, float& s) {
  if (a.avx2) {
    m = row_steps(int(active_isa())).max(x, a.C);
    s = softmax_exp_sum_vec(x, e, a.C, m);
    return;
  }
  m = -INFINITY;
  for (int64_t k = 0; k < a.C; ++k) m = std::max(m, x[k]);
  s = canonical_sum(a.C, [&](int64_t k) {
    const float v = fn::exp_f32(x[k] - m);
    if (e) e[k] = v;
    return v;
  });
}

// Rows [r0, r1) through the generated row kernel, into out (the results or the gradient at r0);
// an ignored row's results and gradient are zero, as the code below writes them.
void xent_generated(const XentArgs& a, int64_t r0, int64_t r1, float* out) {
  const char* ext[5] = {reinterpret_cast<const char*>(static_cast<const float*>(a.logits) + r0 * a.C),
                        reinterpret_cast<const char*>(a.rowvals + r0), reinterpret_cast<const char*>(a.rowvals + a.N),
                        reinterpret_cast<const char*>(a.stats ? a.stats + r0 * 3 + 1 : nullptr),
                        reinterpret_cast<const char*>(a.stats ? a.stats + r0 * 3 + 2 : nullptr)};
  a.jit(ext, reinterpret_cast<char*>(out), r1 - r0);
  const int64_t per_row = xent_per_row(a);
  for (int64_t r = r0; r < r1; ++r)
    if (xent_ignored(a, r)) std::fill(out + (r - r0) * per_row, out + (r - r0 + 1) * per_row, 0.0f);
}

// The gradient from a row of exps e in d: d = e / s * g, then its target's element (e_t / s - 1) g.
template <class T>
void xent_scale_row(T* d, int64_t C, int64_t t, T s, T g) {
  const T et = d[t];
  for (int64_t k = 0; k < C; ++k) d[k] = d[k] / s * g;
  d[t] = (et / s - T(1)) * g;
}

// A float gradient row d from its forward's m and s: d = exp(x - m) / s * g, then its target's
// element (exp(x[t] - m) / s - 1) g; the exps are xent_row_f32's (its vector build's sum unused).
void xent_grad_row_from_stats(const XentArgs& a, const float* x, float* d, int64_t t, float m, float s) {
  if (std::isnan(s)) return fill_nan(d, a.C, 1);
  if (a.avx2) {
    (void)softmax_exp_sum_vec(x, d, a.C, m);
  } else {
    for (int64_t k = 0; k < a.C; ++k) d[k] = fn::exp_f32(x[k] - m);
  }
  xent_scale_row(d, a.C, t, s, float(a.gscale));
}

template <class T>
void xent_rows(const XentArgs& a, int64_t chunk) {
  const T* l = static_cast<const T*>(a.logits);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const int64_t r0 = chunk * kXentRows, r1 = std::min(a.N, (chunk + 1) * kXentRows), per_row = xent_per_row(a);
  if (a.jit)
    return xent_generated(a, r0, r1, static_cast<float*>(a.grad ? a.out : a.losses) + r0 * per_row);
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = l + r * a.C;
    T* d = a.grad ? static_cast<T*>(a.out) + r * a.C : nullptr;
    T* res = a.grad ? nullptr : static_cast<T*>(a.losses) + r * per_row;
    if (xent_ignored(a, r)) {
      if (d) std::fill(d, d + a.C, T(0));
      if (res) std::fill(res, res + per_row, T(0));
      continue;
    }
    const int64_t t = index_at(a.target, a.i64, r);
    if constexpr (std::is_same_v<T, float>) {
      if (d && a.stats) {
        xent_grad_row_from_stats(a, row, d, t, a.stats[r * 3 + 1], a.stats[r * 3 + 2]);
        continue;
      }
    }
    T m, s;
    if constexpr (std::is_same_v<T, float>) {
      xent_row_f32(a, row, d, m, s);
    } else {
      m = -INFINITY;
      for (int64_t k = 0; k < a.C; ++k) m = std::max(m, row[k]);
      s = 0;
      for (int64_t k = 0; k < a.C; ++k) s += std::exp(row[k] - m);
      if (d)
        for (int64_t k = 0; k < a.C; ++k) d[k] = std::exp(row[k] - m);
    }
    if (res) {  // a float row's log is scalar_ops.hpp's, as the row kernel's
      T ls;
      if constexpr (std::is_same_v<T, float>) ls = fn::Log::f(s);
      else ls = std::log(s);
      if (std::isnan(s)) std::fill(res, res + per_row, nan);
      else res[0] = m + ls - row[t];
      if (per_row == 3 && !std::isnan(s)) res[1] = m, res[2] = s;
      continue;
    }
    if (std::isnan(s)) {
      std::fill(d, d + a.C, nan);
      continue;
    }
    xent_scale_row(d, a.C, t, s, T(a.gscale));
  }
}

void xent_task(const void* p, int64_t chunk) {
  const XentArgs& a = *static_cast<const XentArgs*>(p);
  a.f64 ? xent_rows<double>(a, chunk) : xent_rows<float>(a, chunk);
}

// Checks the targets (with `check`) and returns the rows counted; fills the row kernel's per-row
// inputs where the launch has one.
template <class T>
int64_t xent_prepare(XentArgs& a, bool check) {
  int64_t counted = a.N;
  for (int64_t r = 0; r < a.N; ++r) {
    const bool ignored = xent_ignored(a, r);
    const int64_t t = ignored ? 0 : index_at(a.target, a.i64, r);
    counted -= ignored;
    const bool bad = t < 0 || t >= a.C;
    if (bad && check) bad_index(a.grad ? "cross_entropy_grad" : "cross_entropy", t, a.C);
    if (a.rowvals) a.rowvals[r] = bad ? 0.0f : float(t);
  }
  if (a.grad) a.gscale = double(static_cast<const T*>(a.gout)[0] / T(counted));
  if (a.rowvals) a.rowvals[a.N] = float(a.gscale);
  return counted;
}

// Checks the targets, then runs the rows; the forward adds the row losses in row order.
template <class T>
void xent_run(const XentArgs& in, ThreadPool& pool) {
  XentArgs a = in;
  const int64_t counted = xent_prepare<T>(a, true);
  pool.run((a.N + kXentRows - 1) / kXentRows, xent_task, &a);
  if (a.grad) return;
  const T* losses = static_cast<const T*>(a.losses);
  T total = 0;
  for (int64_t r = 0; r < a.N; ++r)
    if (!xent_ignored(a, r)) total += losses[r * a.res_n];
  static_cast<T*>(a.out)[0] = total / T(counted);
}

void xent_launch(const void* p, ThreadPool& pool) {
  const XentArgs& a = *static_cast<const XentArgs*>(p);
  a.f64 ? xent_run<double>(a, pool) : xent_run<float>(a, pool);
}

// Cross-entropy as a row kernel (loop_ir.hpp): the steps of xent_rows above, in their order.
// Inputs: the logits' rows, the row's target (a per-row float), the gradient's scale, and for a
// gradient reading its forward's statistics, each row's m and s (per-row values 3 apart).
//   forward:  m = max x; s = sum exp(x - m); loss = (m + log s) - x[t]   (a result per row; with
//             m and s as two more where the gradient reads them)
//   gradient: m; s = sum of e = exp(x - m) (e stored); e_t = out[t]; d = (e / s) g;
//             then d[t] = (e_t / s - 1) g                                  (a patch)
//   gradient from m and s: d = (exp(x - m) / s) g; then d[t] = (exp(x[t] - m) / s - 1) g
const jit::LoopKernel* xent_row_kernel(const XentArgs& a, PlanStorage& storage) {
  using Src = jit::LoopInput::Src;
  using Kind = jit::RowStep::Kind;
  using Body = RowBuilder::Body;
  RowBuilder rb(a.C);
  const int x = rb.input({1, Src::Memory, a.C}), t = rb.input({0, Src::Memory, 1}), g = rb.input({0, Src::Memory, 0});
  const bool from_stats = a.grad && a.stats;
  const int m_in = from_stats ? rb.input({0, Src::Memory, 3}) : 0, s_in = from_stats ? rb.input({0, Src::Memory, 3}) : 0;
  const int one = rb.constant(1.0f);
  auto gather = [&](int of) { return rb.input({0, Src::Gather, 0, -1, 0, of, -t - 1}); };  // of: -1 the output
  Body b, p;
  if (from_stats) {  // the guard: s, as a step
    const int s_step = rb.step(Kind::Scalar, {}, s_in);
    const int s = rb.scalar(s_step);
    rb.step(Kind::Store, b, b(Op::Mul, b(Op::Div, b(Op::Exp, b(Op::Sub, x, m_in)), s), g));
    const int et = p(Op::Exp, p(Op::Sub, gather(-x - 1), m_in));
    rb.step(Kind::Patch, p, p(Op::Mul, p(Op::Sub, p(Op::Div, et, s), one), g), false, -t - 1);
    rb.k->nan_guard = {s_step};
    return storage.own(std::move(rb.k));
  }
  const int m = rb.scalar(rb.step(Kind::Max, {}, x));
  Body e;
  const int sum = rb.step(Kind::Sum, e, e(Op::Exp, e(Op::Sub, x, m)), a.grad);
  const int s = rb.scalar(sum);
  if (!a.grad) {
    rb.step(Kind::Result, b, b(Op::Sub, b(Op::Add, m, b(Op::Log, s)), gather(-x - 1)));
    if (a.res_n == 3) rb.step(Kind::Result, {}, m), rb.step(Kind::Result, {}, s);
  } else {
    const int et = rb.scalar(rb.step(Kind::Scalar, {}, gather(-1)));
    rb.step(Kind::Store, b, b(Op::Mul, b(Op::Div, rb.input({0, Src::Out}), s), g));
    rb.step(Kind::Patch, p, p(Op::Mul, p(Op::Sub, p(Op::Div, et, s), one), g), false, -t - 1);
  }
  rb.k->nan_guard = {sum};
  return storage.own(std::move(rb.k));
}

const XentArgs& xent_of(const void* p) { return *static_cast<const XentArgs*>(p); }

// Recompile's probes, on whatever the launch's inputs hold after the plan's last run (the
// statistics a gradient reads are its forward's from that run): output values [begin, end)
// (whole gradient rows, or each row's results) into dst, and nothing written anywhere else. The
// targets may since have been overwritten (a computed one in the arena), so both candidates read
// a copy with every target out of range made 0; the per-row inputs are the probe's own.
void xent_eval(const void* p, int64_t begin, int64_t end, void* dst) {
  XentArgs a = xent_of(p);
  const int64_t per_row = xent_per_row(a), r0 = begin / per_row, r1 = end / per_row;
  std::vector<int64_t> targets(static_cast<size_t>(a.N));
  for (int64_t r = 0; r < a.N; ++r) {
    const int64_t t = index_at(a.target, a.i64, r);
    targets[size_t(r)] = xent_ignored(a, r) || (t >= 0 && t < a.C) ? t : 0;
  }
  std::vector<float> rowvals(static_cast<size_t>(a.N + 1));
  a.target = targets.data(), a.i64 = true, a.rowvals = rowvals.data();
  xent_prepare<float>(a, false);
  for (int64_t r = r0; r < r1; r += kXentRows) {
    const int64_t e = std::min(r1, r + kXentRows);
    float* at = static_cast<float*>(dst) + (r - r0) * per_row;
    if (a.jit) {
      xent_generated(a, r, e, at);
      continue;
    }
    XentArgs c = a;  // the interpreter's rows r..e, written at dst
    c.logits = static_cast<const float*>(a.logits) + r * a.C;
    c.target = targets.data() + r;
    if (c.stats) c.stats += r * 3;
    c.N = e - r;
    (a.grad ? c.out : c.losses) = at;
    xent_rows<float>(c, 0);
  }
}

const JitSite::Ops kXentSite = {
    [](const void*) {},
    xent_eval,
    [](void* p, jit::RunFn run) { static_cast<XentArgs*>(p)->jit = run; },
    [](const void* p) { return xent_of(p).jit; },
};

// The forward node and the gradient node of one cross-entropy: the same logits, targets, attributes
// and dtype.
bool xent_pair(const Node& fwd, const Node& grad) {
  return fwd.op == Op::CrossEntropy && grad.op == Op::CrossEntropyGrad && fwd.dtype == grad.dtype &&
         fwd.in[0] == grad.in[0] && fwd.in[1] == grad.in[1] &&
         fwd.attr<attr::CrossEntropy>() == grad.attr<attr::CrossEntropy>();
}

XentArgs* xent_args(LowerCtx& c) {
  auto* a = c.args<XentArgs>();
  const Shape& ls = c.in_shape(0);
  const auto& ignore = c.node.attr<attr::CrossEntropy>().ignore_index;
  const bool grad = c.node.op == Op::CrossEntropyGrad;
  *a = {ls[0], ls[1], c.in[0], c.in[1], c.in.size() > 2 ? c.in[2] : nullptr, c.out,
        c.node.dtype == DType::F64, c.in_dtype(1) == DType::I64, ignore.has_value(), ignore.value_or(0),
        active_isa() != Isa::Scalar, grad, nullptr, 1, nullptr, 0.0, nullptr, nullptr, nullptr};
  const bool row_kernel = !a->f64 && a->C > 0 && a->C < (int64_t(1) << 24);
  if (!grad) {
    // Where a gradient of this loss is in the graph, m and s go beside each loss, outside the
    // arena: they live from this launch to that one.
    bool read = false;
    for (const Node& n : c.g.nodes()) read = read || (row_kernel && xent_pair(c.node, n));
    a->res_n = read ? 3 : 1;
    const size_t bytes = size_t(ls[0] * a->res_n) * dtype_size(c.node.dtype);
    a->losses = read ? c.storage.persistent(bytes) : c.storage.scratch(bytes);
    if (read) c.storage.share(c.id, a->losses);
  } else if (row_kernel) {  // the forward kept m and s, if it launches before this on every run
    const auto& nodes = c.g.nodes();
    for (size_t v = 0; v < size_t(c.id) && !a->stats; ++v)
      if (xent_pair(nodes[v], c.node) && c.storage.launches_before(ValueId(v), c.id))
        a->stats = static_cast<const float*>(c.storage.shared(ValueId(v)));
  }
  if (row_kernel) {
    a->rowvals = static_cast<float*>(c.storage.scratch(size_t(a->N + 1) * sizeof(float)));
    a->loop = xent_row_kernel(*a, c.storage);
    c.storage.register_jit_site({c.id, a, a->loop, a->N * xent_per_row(*a), xent_per_row(*a),
                                 "xent" + std::to_string(kXentRows), &kXentSite});
  }
  return a;
}

// ---- embedding and its deterministic gradient
struct EmbArgs {
  int64_t V, D, P;
  const void* table;  // weight [V, D] (forward) or upstream gradient [P, D] (backward)
  const void* idx;
  void* out;
  int64_t* order;  // backward: positions sorted by vocabulary row (counting sort), P entries
  int64_t* start;  // backward: V + 1 row starts
  bool f64, i64;
  const void* base = nullptr;  // backward with a third input: out = base + the rows' sums (out may be base)
};

template <class T>
void emb_t(const EmbArgs& a) {
  const T* w = static_cast<const T*>(a.table);
  T* out = static_cast<T*>(a.out);
  for (int64_t p = 0; p < a.P; ++p) {
    int64_t v = index_at(a.idx, a.i64, p);
    if (v < 0 || v >= a.V) bad_index("embedding", v, a.V);
    std::copy(w + v * a.D, w + v * a.D + a.D, out + p * a.D);
  }
}
void emb_launch(const void* p, ThreadPool&) {
  const EmbArgs& a = *static_cast<const EmbArgs*>(p);
  a.f64 ? emb_t<double>(a) : emb_t<float>(a);
}

template <class T>
void emb_grad_rows(const EmbArgs& a, int64_t v0, int64_t v1) {
  // Each element is its row's sum taken from zero in ascending positions, plus, with a third
  // input, the value there (a tied table's other contribution: base + the sum, as the two-input
  // form and an add would give). 64 columns at a time, so `out` may be `base` itself.
  const T* g = static_cast<const T*>(a.table);
  const T* base = static_cast<const T*>(a.base);
  T* out = static_cast<T*>(a.out);
  constexpr int64_t kCols = 64;
  T acc[kCols];
  for (int64_t v = v0; v < v1; ++v)
    for (int64_t d0 = 0; d0 < a.D; d0 += kCols) {
      const int64_t w = std::min(kCols, a.D - d0);
      std::fill(acc, acc + w, T(0));
      for (int64_t q = a.start[v]; q < a.start[v + 1]; ++q) {
        const T* src = g + a.order[q] * a.D + d0;
        for (int64_t d = 0; d < w; ++d) acc[d] += src[d];
      }
      T* o = out + v * a.D + d0;
      if (base)
        for (int64_t d = 0; d < w; ++d) o[d] = base[v * a.D + d0 + d] + acc[d];
      else
        std::copy(acc, acc + w, o);
    }
}
void emb_grad_chunk(const void* p, int64_t chunk) {
  const EmbArgs& a = *static_cast<const EmbArgs*>(p);
  int64_t v0 = chunk * 64, v1 = std::min(a.V, v0 + 64);
  a.f64 ? emb_grad_rows<double>(a, v0, v1) : emb_grad_rows<float>(a, v0, v1);
}
void emb_grad_launch(const void* p, ThreadPool& pool) {
  const EmbArgs& a = *static_cast<const EmbArgs*>(p);
  std::fill(a.start, a.start + a.V + 1, 0);
  for (int64_t q = 0; q < a.P; ++q) {
    int64_t v = index_at(a.idx, a.i64, q);
    if (v < 0 || v >= a.V) bad_index("embedding_grad", v, a.V);
    ++a.start[v + 1];
  }
  for (int64_t v = 0; v < a.V; ++v) a.start[v + 1] += a.start[v];
  // Stable counting sort: a.order holds positions grouped by row, ascending within each row.
  // The last row's start is used as a running cursor and restored afterwards.
  for (int64_t q = 0; q < a.P; ++q) {
    int64_t v = index_at(a.idx, a.i64, q);
    a.order[a.start[v]++] = q;
  }
  for (int64_t v = a.V; v > 0; --v) a.start[v] = a.start[v - 1];
  a.start[0] = 0;
  pool.run((a.V + 63) / 64, emb_grad_chunk, p);
}
}  // namespace

Launch lower_softmax(LowerCtx& c) { return lower_lines(c, c.node.op == Op::Softmax ? 0 : 1, axis_attr(c)); }
Launch lower_softmax_grad(LowerCtx& c) {
  return lower_lines(c, c.node.op == Op::SoftmaxGrad ? 2 : 3, axis_attr(c));
}
Launch lower_layernorm(LowerCtx& c) {
  return lower_lines(c, c.node.op == Op::LayerNorm ? 4 : 5, int(c.node.shape.size()) - 1);
}
namespace {
// ---- layernorm's weight and bias gradients: [sum over rows of g xh; sum over rows of g], with
// xh = (x - mean) r recomputed from x with the layernorm's own statistics (so xh has the
// forward's bits). Phase 1 takes the rows in fixed chunks of kLinesPerChunk: each chunk's partial
// sums run over its rows in ascending order, one chain per column (a multiply, then an add) while
// the rows are in cache; phase 2 adds the chunks' partials in chunk order, per column.
constexpr int64_t kParamCols = 256;
struct LnParamArgs {
  int64_t rows, n, chunks;
  double eps;
  const void *x, *g;
  void *out, *partial;  // partial: [chunks][2][n]
  bool f64, avx2;
};

template <class T>
void ln_param_partial(const LnParamArgs& a, int64_t chunk) {
  const int64_t l0 = chunk * kLinesPerChunk, rows = std::min(a.rows, l0 + kLinesPerChunk) - l0, n = a.n;
  const T* x = static_cast<const T*>(a.x) + l0 * n;
  const T* g = static_cast<const T*>(a.g) + l0 * n;
  T mean[kLinesPerChunk], r[kLinesPerChunk];
  if constexpr (std::is_same_v<T, float>) {
    layernorm_stats_f32(a.avx2, x, n, rows, float(a.eps), mean, r);
  } else {
    LineArgs la{};
    la.n = n;
    la.eps = a.eps;
    for (int64_t j = 0; j < rows; ++j) row_stats(la, x + j * n, mean[j], r[j]);
  }
  T* dw = static_cast<T*>(a.partial) + chunk * 2 * n;
  T* db = dw + n;
  std::fill(dw, dw + 2 * n, T(0));
  if constexpr (std::is_same_v<T, float>) {
    if (a.avx2) return avx2::layernorm_param_rows(x, g, n, rows, mean, r, dw, db);
  }
  for (int64_t j = 0; j < rows; ++j) {
    const T *xr = x + j * n, *gr = g + j * n, m = mean[j], rj = r[j];
    for (int64_t c = 0; c < n; ++c) {
      dw[c] += gr[c] * ((xr[c] - m) * rj);
      db[c] += gr[c];
    }
  }
}

template <class T>
void ln_param_combine(const LnParamArgs& a, int64_t block) {
  const int64_t c0 = block * kParamCols, c1 = std::min(2 * a.n, c0 + kParamCols);
  const T* part = static_cast<const T*>(a.partial);
  T* out = static_cast<T*>(a.out);  // [2][n]: the partials' layout per chunk
  if (a.chunks == 0) return std::fill(out + c0, out + c1, T(0));  // no rows: empty sums
  for (int64_t c = c0; c < c1; ++c) out[c] = part[c];
  for (int64_t ch = 1; ch < a.chunks; ++ch)
    for (int64_t c = c0; c < c1; ++c) out[c] += part[ch * 2 * a.n + c];
  for (int64_t c = c0; c < c1; ++c)  // a NaN sum is the one quiet NaN (its operands' signs vary by ISA)
    if (std::isnan(out[c])) out[c] = std::numeric_limits<T>::quiet_NaN();
}

// ---- layernorm_backward: per chunk of kLinesPerChunk rows, dx (the lines of layernorm_grad, the
// same code) and the chunk's partial weight and bias sums while the rows are in cache; then the
// partials combined in chunk order. The result is dx's rows, then the two gradient rows.
struct LnBackArgs {
  LineArgs dx;
  LnParamArgs param;
  // The launch as a row kernel with the two column sums (float; else null), and the generated run
  // Recompile installed for it (null: the code below).
  const jit::LoopKernel* loop;
  jit::RunFn jit;
};
constexpr size_t kLnBackExt = 32;  // the generated kernel's ext entries at most

// A chunk through the generated kernel: dx's rows, then the chunk's partial sums.
void ln_back_generated(const LnBackArgs& a, int64_t chunk) {
  const LnParamArgs& pa = a.param;
  const int64_t l0 = chunk * kLinesPerChunk, rows = std::min(pa.rows, l0 + kLinesPerChunk) - l0, n = pa.n;
  const char* ext[kLnBackExt] = {};
  const size_t in = a.loop->inputs.size();
  for (int j = 0; j < a.dx.n_in; ++j) ext[j] = reinterpret_cast<const char*>(input_at_line(a.dx, j, l0));
  ext[in] = static_cast<const char*>(pa.partial) + size_t(chunk * 2 * n) * sizeof(float);
  ext[in + 1] = ext[in] + size_t(n) * sizeof(float);
  a.jit(ext, reinterpret_cast<char*>(static_cast<float*>(a.dx.out) + l0 * n), rows);
}

// A float chunk with the AVX2 steps: the statistics and the gradient's sums once, then dx and the
// partial sums in one pass per row; the same operations as the two paths below, so the same bits.
void ln_back_chunk_f32(const LnBackArgs& a, int64_t chunk) {
  const LnParamArgs& pa = a.param;
  const int64_t l0 = chunk * kLinesPerChunk, rows = std::min(pa.rows, l0 + kLinesPerChunk) - l0, n = pa.n;
  const float* x = static_cast<const float*>(pa.x) + l0 * n;
  const float* g = static_cast<const float*>(pa.g) + l0 * n;
  const float* w = static_cast<const float*>(a.dx.in[2]);
  float* dx = static_cast<float*>(a.dx.out) + l0 * n;
  float mean[kLinesPerChunk], r[kLinesPerChunk], mg[kLinesPerChunk], mgx[kLinesPerChunk];
  layernorm_stats_f32(true, x, n, rows, float(pa.eps), mean, r);
  avx2::layernorm_grad_sums(x, g, w, n, rows, mean, r, mg, mgx);
  float* dw = static_cast<float*>(pa.partial) + chunk * 2 * n;
  float* db = dw + n;
  std::fill(dw, dw + 2 * n, 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const float *xr = x + j * n, *gr = g + j * n;
    if (std::isnan(mean[j]) || std::isnan(r[j]) || std::isnan(mg[j]) || std::isnan(mgx[j])) {
      fill_nan(dx + j * n, n, 1);
      avx2::layernorm_param_rows(xr, gr, n, 1, mean + j, r + j, dw, db);
    } else {
      avx2::layernorm_grad_apply_param(xr, gr, w, dx + j * n, n, mean[j], r[j], mg[j], mgx[j], dw, db);
    }
  }
}

void ln_back_chunk(const void* p, int64_t chunk) {
  const LnBackArgs& a = *static_cast<const LnBackArgs*>(p);
  if (a.jit) return ln_back_generated(a, chunk);
  if (!a.param.f64 && a.param.avx2) return ln_back_chunk_f32(a, chunk);
  if (a.param.f64) {
    line_chunk_t<double>(a.dx, chunk);
    ln_param_partial<double>(a.param, chunk);
  } else {
    line_chunk_t<float>(a.dx, chunk);
    ln_param_partial<float>(a.param, chunk);
  }
}
void ln_param_cols(const void* p, int64_t block) {
  const LnParamArgs& a = static_cast<const LnBackArgs*>(p)->param;
  a.f64 ? ln_param_combine<double>(a, block) : ln_param_combine<float>(a, block);
}
void ln_back_launch(const void* p, ThreadPool& pool) {
  const LnParamArgs& a = static_cast<const LnBackArgs*>(p)->param;
  pool.run(a.chunks, ln_back_chunk, p);
  pool.run((2 * a.n + kParamCols - 1) / kParamCols, ln_param_cols, p);
}

// Rows [begin, end) / n (a float launch's) into dst: dx's rows, then each chunk's partial sums,
// the chunks counted from begin's row.
void ln_back_eval(const void* p, int64_t begin, int64_t end, void* dst) {
  LnBackArgs c = *static_cast<const LnBackArgs*>(p);
  const int64_t n = c.param.n, r0 = begin / n, rows = (end - begin) / n;
  const float* x = static_cast<const float*>(c.param.x) + r0 * n;
  const float* g = static_cast<const float*>(c.param.g) + r0 * n;
  c.param.x = c.dx.in[0] = x;
  c.param.g = c.dx.in[1] = g;
  c.dx.out = dst;
  c.dx.outer = c.param.rows = rows;
  c.param.chunks = (rows + kLinesPerChunk - 1) / kLinesPerChunk;
  c.param.partial = static_cast<float*>(dst) + rows * n;
  for (int64_t ch = 0; ch < c.param.chunks; ++ch) ln_back_chunk(&c, ch);
}

const JitSite::Ops kLnBackSite = {
    [](const void*) {},
    ln_back_eval,
    [](void* p, jit::RunFn run) { static_cast<LnBackArgs*>(p)->jit = run; },
    [](const void* p) { return static_cast<const LnBackArgs*>(p)->jit; },
};
}  // namespace

Launch lower_layernorm_backward(LowerCtx& c) {
  auto* a = c.args<LnBackArgs>();
  const Shape& x = c.in_shape(0);
  const bool f64 = c.node.dtype == DType::F64, avx2 = active_isa() != Isa::Scalar;
  const int64_t n = x.back(), rows = numel(x) / n;
  const double eps = c.node.attr<attr::Eps>().eps;
  a->dx = LineArgs{};
  a->dx.n = n;
  a->dx.outer = rows;
  a->dx.inner = 1;
  for (int k = 0; k < 3; ++k) a->dx.in[k] = c.in[size_t(k)];
  a->dx.n_in = 3;
  a->dx.out = c.out;
  a->dx.eps = eps;
  a->dx.op = 5;  // layernorm_grad's lines
  a->dx.f64 = f64;
  a->dx.avx2 = avx2;
  LnParamArgs& pa = a->param;
  pa.n = n;
  pa.rows = rows;
  pa.eps = eps;
  pa.x = c.in[0];
  pa.g = c.in[1];
  pa.out = static_cast<char*>(c.out) + size_t(rows * n) * dtype_size(c.node.dtype);
  pa.f64 = f64;
  pa.avx2 = avx2;
  pa.chunks = (rows + kLinesPerChunk - 1) / kLinesPerChunk;
  pa.partial = c.storage.scratch(size_t(pa.chunks * 2 * n) * dtype_size(c.node.dtype));
  a->jit = nullptr;
  a->loop = row_kernel(a->dx, c.storage, true);
  if (a->loop && a->loop->inputs.size() + size_t(a->loop->columns()) > kLnBackExt) a->loop = nullptr;
  a->dx.loop = a->loop;  // input_at_line's strides
  if (a->loop) {
    JitSite site{c.id, a, a->loop, rows * n, n, "rows" + std::to_string(kLinesPerChunk), &kLnBackSite};
    site.column_rows = kLinesPerChunk;
    c.storage.register_jit_site(site);
  }
  return {ln_back_launch, a, c.id};
}


Launch lower_cross_entropy(LowerCtx& c) { return {xent_launch, xent_args(c), c.id}; }
Launch lower_cross_entropy_grad(LowerCtx& c) { return {xent_launch, xent_args(c), c.id}; }

Launch lower_embedding(LowerCtx& c) {
  auto* a = c.args<EmbArgs>();
  const Shape& w = c.in_shape(0);
  *a = {w[0], w[1], numel(c.in_shape(1)), c.in[0], c.in[1], c.out, nullptr, nullptr,
        c.node.dtype == DType::F64, c.in_dtype(1) == DType::I64};
  return {emb_launch, a, c.id};
}

Launch lower_embedding_grad(LowerCtx& c) {
  auto* a = c.args<EmbArgs>();
  int64_t V = c.node.shape[0], P = numel(c.in_shape(1));
  *a = {V, c.node.shape[1], P, c.in[0], c.in[1], c.out,
        static_cast<int64_t*>(c.storage.scratch(size_t(P + 1) * 8)),
        static_cast<int64_t*>(c.storage.scratch(size_t(V + 2) * 8)), c.node.dtype == DType::F64,
        c.in_dtype(1) == DType::I64, c.in.size() > 2 ? c.in[2] : nullptr};
  return {emb_grad_launch, a, c.id};
}

}  // namespace synoros::kernels

// ---- batchnorm: y = (x - mean[c]) * (rsqrt(var[c] + eps) * weight[c]) + bias[c], over planes
// of the elements after axis 1. The operations and their order are those of the same formula
// written as elementwise ops (add, rsqrt = 1/sqrt, mul; then sub, mul, add per element), so the
// bits are the unfused graph's. The launch is a fixed list of plane chunks (OutputChunks), so a
// fused epilogue (the ReLU after it) runs on each chunk while it is in cache.
namespace synoros::kernels {
namespace {
struct BnArgs {
  int64_t planes, C, inner, planes_per_chunk;
  const void *x, *mean, *var, *w, *b;
  void* y;
  double eps;
  bool f64;
};
template <class T>
void bn_chunk_t(const BnArgs& a, int64_t chunk) {
  const T *x = static_cast<const T*>(a.x), *m = static_cast<const T*>(a.mean), *v = static_cast<const T*>(a.var),
          *w = static_cast<const T*>(a.w), *b = static_cast<const T*>(a.b);
  T* y = static_cast<T*>(a.y);
  const T eps = T(a.eps);
  for (int64_t p = chunk * a.planes_per_chunk; p < std::min(a.planes, (chunk + 1) * a.planes_per_chunk); ++p) {
    int64_t c = p % a.C;
    T s = (T(1) / std::sqrt(v[c] + eps)) * w[c], mc = m[c], bc = b[c];
    const T* xp = x + p * a.inner;
    T* yp = y + p * a.inner;
    for (int64_t i = 0; i < a.inner; ++i) {
      T t = xp[i] - mc;
      t = t * s;
      yp[i] = t + bc;
    }
  }
}
void bn_chunk(const void* p, int64_t chunk) {
  const BnArgs& a = *static_cast<const BnArgs*>(p);
  a.f64 ? bn_chunk_t<double>(a, chunk) : bn_chunk_t<float>(a, chunk);
}
void bn_launch(const void* p, ThreadPool& pool) {
  const BnArgs& a = *static_cast<const BnArgs*>(p);
  pool.run((a.planes + a.planes_per_chunk - 1) / a.planes_per_chunk, bn_chunk, p);
}
}  // namespace

Launch lower_batchnorm(LowerCtx& c) {
  const Node& n = c.node;
  auto* a = c.args<BnArgs>();
  a->C = n.shape[1];
  a->inner = 1;
  for (size_t d = 2; d < n.shape.size(); ++d) a->inner *= n.shape[d];
  a->planes = numel(n.shape) / std::max<int64_t>(a->inner, 1);
  a->planes_per_chunk = std::max<int64_t>(1, 16384 / std::max<int64_t>(a->inner, 1));
  a->x = c.in[0], a->mean = c.in[1], a->var = c.in[2], a->w = c.in[3], a->b = c.in[4];
  a->y = c.out;
  a->eps = n.attr<attr::BatchNorm>().eps;
  a->f64 = n.dtype == DType::F64;
  if (a->inner > 0 && a->planes > 0)
    c.chunks = {bn_chunk, a, (a->planes + a->planes_per_chunk - 1) / a->planes_per_chunk, a->planes_per_chunk * a->inner};
  return {bn_launch, a, c.id};
}

}  // namespace synoros::kernels

