#!/usr/bin/python3
"""PyTorch's results on special float32 inputs (NaN, +-inf, +-0, denormals), for
tests/nan_rules_test.cpp, which runs the same inputs through the engine and compares.

Each output line is one record, fields separated by spaces, every float as the hexadecimal bits
of its float32 (float64 for the cast record):

  unary OP N x[N] y[N]
  binary OP N a[N] b[N] y[N]
  where N c[N] a[N] b[N] y[N]
  reduce OP R x[R] y                      one row reduced (OP: sum, mean, amax)
  maxgrad R g x[R] dx[R]                  amax's input gradient for upstream g
  softmax OP R x[R] y[R]                  OP: softmax, log_softmax
  xent R t x[R] loss                      cross entropy of one row with target t
  layernorm R x[R] y[R]                   no weight or bias, eps 1e-5
  dropout N x[N] kept[N] dropped[N]       p = 0.5: x * 2 and x * 0, PyTorch's mask product
  matmul M K N a[M*K] b[K*N] y[M*N]
  cast N x[N] y64[N]                      float32 to float64

Elementwise results come from one-element tensors (PyTorch's element-by-element kernels). Where
PyTorch's vectorised kernels (long tensors) give another special value (NaN, infinity, a zero of
either sign), a comment line starting with '#' says so. NaN payloads and signs mean nothing.
"""

import itertools
import sys

import torch

torch.set_num_threads(1)
torch.set_grad_enabled(False)

NAN, INF = float("nan"), float("inf")
# Every unary op's inputs: the special values, small integers and halves, a tiny normal, values
# past the float range of exp and sigmoid, and gelu's far tail (where it is -0 in float64 too;
# nearer, around -5.6, float32 gives -0 where float64 has -5e-8, and nan_rules_test checks only
# the sign).
UNARY_IN = [NAN, INF, -INF, 0.0, -0.0, 1e-40, -1e-40, 1e-30, -1e-30, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5,
            3.0, -3.0, 100.0, -100.0, -10.0]
# Both operands of every binary op range over these (all pairs).
BINARY_IN = [NAN, INF, -INF, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0]

out = []


def hex32(t):
    t = t.to(torch.float32).contiguous().flatten()
    return ["%08x" % (v & 0xFFFFFFFF) for v in t.view(torch.int32).tolist()]


def hex64(t):
    t = t.to(torch.float64).contiguous().flatten()
    return ["%016x" % (v & 0xFFFFFFFFFFFFFFFF) for v in t.view(torch.int64).tolist()]


def f32(values):
    return torch.tensor(values, dtype=torch.float32)


def differ(x, y):
    """Indices where x and y differ in a special value: one is NaN, infinite or zero and the
    other has other bits (NaNs of any payload counting as equal), or their signs differ. (Finite
    nonzero results may differ in their last bits: those are accuracy, not rules.)"""
    bx, by = x.view(torch.int32), y.view(torch.int32)
    both_nan = torch.isnan(x) & torch.isnan(y)
    special = ~torch.isfinite(x) | ~torch.isfinite(y) | (x == 0) | (y == 0) | (torch.signbit(x) != torch.signbit(y))
    return [i for i in range(x.numel()) if bx[i] != by[i] and special[i] and not both_nan[i]]


def elementwise(name, fn, inputs):
    """fn over one-element tensors, and the same inputs as one long tensor (vectorised)."""
    n = inputs[0].numel()
    single = torch.cat([fn(*[t[i:i + 1].clone() for t in inputs]) for i in range(n)])
    reps = 64
    vec = fn(*[t.repeat(reps) for t in inputs])[:n]
    for i in differ(single, vec):
        args = ", ".join(repr(t[i].item()) for t in inputs)
        out.append("# %s(%s): PyTorch gives %r element by element, %r in a long tensor" %
                   (name, args, single[i].item(), vec[i].item()))
    return single.to(torch.float32)


F = torch.nn.functional
unary = {
    "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "abs": torch.abs, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "sigmoid": torch.sigmoid, "tanh": torch.tanh,
}
x = f32(UNARY_IN)
for name, fn in unary.items():
    y = elementwise(name, fn, [x])
    out.append(" ".join(["unary", name, str(x.numel())] + hex32(x) + hex32(y)))

pairs = list(itertools.product(BINARY_IN, BINARY_IN))
a, b = f32([p[0] for p in pairs]), f32([p[1] for p in pairs])
binary = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "max": torch.maximum, "min": torch.minimum,
    "cmp_lt": lambda p, q: torch.lt(p, q).float(), "cmp_eq": lambda p, q: torch.eq(p, q).float(),
    # The engine's relu_grad(g, y) and gelu_grad(g, x): the upstream gradient first.
    "relu_grad": lambda g, v: torch.ops.aten.threshold_backward(g, v, 0),
    "gelu_grad": lambda g, v: torch.ops.aten.gelu_backward(g, v),
    "gelu_tanh_grad": lambda g, v: torch.ops.aten.gelu_backward(g, v, approximate="tanh"),
}
for name, fn in binary.items():
    y = elementwise(name, fn, [a, b])
    out.append(" ".join(["binary", name, str(a.numel())] + hex32(a) + hex32(b) + hex32(y)))

# maximum and minimum's gradients over every pair (upstream gradient 1).
for name, fn in [("max", torch.maximum), ("min", torch.minimum)]:
    with torch.enable_grad():
        ga, gb = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
        fn(ga, gb).sum().backward()
    out.append(" ".join(["binarygrad", name, str(a.numel())] + hex32(a) + hex32(b) + hex32(ga.grad) + hex32(gb.grad)))

# where: every condition value against every first operand, the second a rotation.
n = len(pairs)
wc, wa = a, b
wb = f32([BINARY_IN[(i * 7 + 4) % len(BINARY_IN)] for i in range(n)])
wy = elementwise("where", lambda c, p, q: torch.where(c != 0, p, q), [wc, wa, wb])
out.append(" ".join(["where", str(n)] + hex32(wc) + hex32(wa) + hex32(wb) + hex32(wy)))

# Rows for the reductions and max's gradient: NaN first, last and among infinities, both
# infinities, zeros of both signs in every order, denormals, ties; and long rows that spread over
# several lanes of the engine's reduction tree.
rows = [
    [NAN, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, NAN], [INF, 1.0, NAN, -INF], [INF, -INF, 1.0, 2.0],
    [-INF, -INF, -INF, -INF], [-INF, 1.0, 2.0, 3.0], [INF, INF, 1.0, 1.0], [NAN, NAN, NAN, NAN],
    [-0.0, -0.0, -0.0, -0.0], [-0.0, 0.0, -0.0, -0.0], [0.0, -0.0, -0.0, -0.0], [-1.0, -0.0, 0.0, -2.0],
    [1e-40, 1e-40, -1e-40, 0.0], [-1e-40, -2.0, -3.0, -1e-40], [2.0, 2.0, 1.0, 2.0],
    [-3.0, 1.0, -0.5, 0.5, 2.0, -2.0],
    [float(i % 5) for i in range(13)] + [NAN] + [float(i) for i in range(6)],
    [-0.0] * 9 + [0.0] + [-0.0] * 10,
    [float(-i) for i in range(30)] + [INF] + [1.0] * 6,
    [-INF] * 17 + [NAN] + [-INF] * 6,
]
for r in rows:
    t = f32(r)
    for name, fn in [("sum", torch.sum), ("mean", torch.mean), ("amax", lambda v: torch.amax(v, 0))]:
        out.append(" ".join(["reduce", name, str(len(r))] + hex32(t) + hex32(fn(t).reshape(1))))
    for g in [1.0, 0.0, -0.5, INF]:
        with torch.enable_grad():
            v = t.clone().requires_grad_(True)
            torch.amax(v, 0).backward(f32(g))
        out.append(" ".join(["maxgrad", str(len(r))] + hex32(f32([g])) + hex32(t) + hex32(v.grad)))

soft_rows = [[INF, 1.0, 2.0], [-INF, 1.0, 2.0], [-INF, -INF, -INF], [NAN, 1.0, 2.0], [INF, INF, 1.0],
             [-0.0, 0.0, 1e-40], [1e-40, -1e-40, 0.0], [100.0, -100.0, 0.0], [-INF, 0.0, -INF]]
for r in soft_rows:
    t = f32(r)
    for name, fn in [("softmax", torch.softmax), ("log_softmax", torch.log_softmax)]:
        out.append(" ".join(["softmax", name, str(len(r))] + hex32(t) + hex32(fn(t, 0))))
    for target in range(len(r)):
        loss = F.cross_entropy(t.reshape(1, -1), torch.tensor([target]))
        out.append(" ".join(["xent", str(len(r)), str(target)] + hex32(t) + hex32(loss.reshape(1))))

ln_rows = [[INF, 1.0, 2.0, 3.0], [NAN, 1.0, 2.0, 3.0], [-INF, 0.0, 1.0, 2.0], [1e-40, 0.0, 0.0, 0.0],
           [-0.0, -0.0, -0.0, -0.0], [1.0, 1.0, 1.0, 1.0], [3.0, 1e-40, -1.0, 0.0]]
for r in ln_rows:
    t = f32(r)
    y = F.layer_norm(t.reshape(1, -1), (len(r),), eps=1e-5)
    out.append(" ".join(["layernorm", str(len(r))] + hex32(t) + hex32(y)))

# Dropout multiplies by the scaled mask: kept elements are x * 2 at p = 0.5, dropped ones x * 0.
x = f32(BINARY_IN)
torch.manual_seed(0)
d = F.dropout(x.repeat(64), 0.5, training=True).reshape(64, -1)
for i in range(x.numel()):  # check that claim on PyTorch's own output
    seen = {tuple(hex32(d[k, i:i + 1])) for k in range(64)}
    want = {tuple(hex32((x * 2.0)[i:i + 1])), tuple(hex32((x * 0.0)[i:i + 1]))}
    if not seen <= want and not torch.isnan(x[i] * 0.0):
        sys.exit("dropout(%r) gave %r, not x * 2 or x * 0" % (x[i].item(), seen))
out.append(" ".join(["dropout", str(x.numel())] + hex32(x) + hex32(x * 2.0) + hex32(x * 0.0)))

mats = [
    ([[INF, 1.0], [NAN, 0.0], [1.0, 2.0]], [[0.0, 1.0], [1.0, 0.0]]),
    ([[INF, -INF], [1e-40, 1e-40], [-0.0, 3.0]], [[1.0, 0.0], [1.0, 2.0]]),
]
for p, q in mats:
    tp, tq = f32(p), f32(q)
    y = tp @ tq
    out.append(" ".join(["matmul", str(tp.shape[0]), str(tp.shape[1]), str(tq.shape[1])] +
                        hex32(tp) + hex32(tq) + hex32(y)))

x = f32(UNARY_IN)
out.append(" ".join(["cast", str(x.numel())] + hex32(x) + hex64(x.double())))

print("\n".join(out))
