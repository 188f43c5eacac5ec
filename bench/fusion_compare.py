#!/usr/bin/env python3
"""Fused elementwise rows side by side: the engine as users run it (Recompile: generated kernels
where they win), the engine's interpreter (SYNOROS_NO_JIT=1) or, for attention, the unfused graph the fused op
replaces, PyTorch eager and torch.compile.

PyTorch: scripts/install_peers.sh's PyTorch 2.x environment (.peers/bin/python) when it exists,
eager and torch.compile; otherwise Debian's /usr/bin/python3 (eager only). Rounds interleave the
sides; medians are printed with ratios (above 1: the engine is faster) and each row's traffic as a
share of the one-core streaming bandwidth `synoros peak` measures in the same run.
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
# One GPT-2 block (pre-LayerNorm, causal attention through scaled_dot_product_attention, tanh-GELU
# MLP) at width 768, 12 heads, over x [1, 512, 768], as the engine's nn::GptBlock.
GPT_BLOCK = """
C, H, T = 768, 12, 512
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
        self.c_attn, self.c_proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
        self.c_fc, self.m_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
    def forward(self, x):
        q, k, v = (t.view(1, T, H, C // H).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(1, T, C))
        return x + self.m_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
blk = Block()
x = torch.randn(1, T, C)
"""
# name: (bytes moved per run, PyTorch setup code defining f). Backward rows take the gradient of
# sum(y * g), as the engine's rows do.
ROWS = {
    "EltwiseChain": (2 * 1024 * 1024 * 4,
                     "x = torch.randn(1024, 1024)\n"
                     "def f(): return torch.tanh((torch.sigmoid(torch.relu(x * 1.5 + 0.5) * x) - 0.25) * 2)\n"),
    "BiasGeluTanh": (2 * 4096 * 3072 * 4,
                     "x = torch.randn(4096, 3072); b = torch.randn(3072)\n"
                     "def f(): return torch.nn.functional.gelu(x + b, approximate='tanh')\n"),
    "Softmax": (2 * 8 * 12 * 512 * 512 * 4,
                "x = torch.randn(8 * 12 * 512, 512)\n"
                "def f(): return torch.softmax(x, -1)\n"),
    "LayerNorm": (2 * 4096 * 768 * 4,
                  "x = torch.randn(4096, 768); w = torch.randn(768); b = torch.randn(768)\n"
                  "def f(): return torch.nn.functional.layer_norm(x, (768,), w, b)\n"),
    "LayerNormFwdBwd": (5 * 4096 * 768 * 4,
                        "x, w, b = (torch.randn(*s, requires_grad=True) for s in ((4096, 768), (768,), (768,)))\n"
                        "g = torch.randn(4096, 768)\n"
                        "def fwd(x, w, b): return torch.nn.functional.layer_norm(x, (768,), w, b)\n"
                        "def f():\n"
                        "    x.grad = w.grad = b.grad = None\n"
                        "    y = fwd(x, w, b)\n"
                        "    (y * g).sum().backward()\n"
                        "    return y\n"),
    "CrossEntropyFwdBwd": (3 * 512 * 50257 * 4,
                           "x = torch.randn(512, 50257, requires_grad=True)\n"
                           "t = torch.arange(512) * 7919 % 50257\n"
                           "s = torch.randn(())\n"
                           "def fwd(x, t, s): return torch.nn.functional.cross_entropy(x, t) * s\n"
                           "def f():\n"
                           "    x.grad = None\n"
                           "    loss = fwd(x, t, s)\n"
                           "    loss.backward()\n"
                           "    return loss\n"),
    "AttentionFwd": (4 * 8 * 12 * 512 * 64 * 4,
                     "q, k, v = (torch.randn(8, 12, 512, 64) for _ in range(3))\n"
                     "def f(): return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"),
    "AttentionFwdBwd": (8 * 8 * 12 * 512 * 64 * 4,
                        "q, k, v = (torch.randn(8, 12, 512, 64, requires_grad=True) for _ in range(3))\n"
                        "g = torch.randn(8, 12, 512, 64)\n"
                        "def fwd(q, k, v): return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
                        "def f():\n"
                        "    q.grad = k.grad = v.grad = None\n"
                        "    o = fwd(q, k, v)\n"
                        "    (o * g).sum().backward()\n"
                        "    return o\n"),
    "GptBlockFwd": (0, GPT_BLOCK + "for p in blk.parameters(): p.requires_grad_(False)\n"
                       "def f(): return blk(x)\n"),
    "GptBlockTrain": (0, GPT_BLOCK + "x.requires_grad_(True)\n"
                         "g = torch.randn(1, T, C)\n"
                         "fwd = blk\n"
                         "def f():\n"
                         "    blk.zero_grad(set_to_none=True)\n"
                         "    x.grad = None\n"
                         "    y = fwd(x)\n"
                         "    (y * g).sum().backward()\n"
                         "    return y\n"),
}
# Rows that count FLOPs (the causal half of attention's products: two forward, five backward; a
# GPT-2 block's four projections, 24 T C^2 forward and three times that with the backward).
BLOCK_PROJ, BLOCK_ATT = 24 * 512 * 768 * 768, 2 * 512 * 512 * 768
FLOPS = {"AttentionFwd": 2 * 8 * 12 * 512 * 512 * 64, "AttentionFwdBwd": 7 * 8 * 12 * 512 * 512 * 64,
         "GptBlockFwd": BLOCK_PROJ + BLOCK_ATT, "GptBlockTrain": 3 * BLOCK_PROJ + 3.5 * BLOCK_ATT}

TORCH = r"""
import json, sys, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
out = {}
for name, (setup, compiled) in json.loads(sys.argv[1]).items():
    scope = {"torch": torch}
    exec(setup, scope)
    # A row with a forward `fwd` and a backward in `f` compiles the forward (AOTAutograd then
    # compiles its backward too); otherwise `f` itself is compiled.
    if compiled and "fwd" in scope:
        scope["fwd"] = torch.compile(scope["fwd"])
    fn = torch.compile(scope["f"]) if compiled and "fwd" not in scope else scope["f"]
    for _ in range(20):
        fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= %(min_time)f:
            break
        n *= 2
    out[name + (":compile" if compiled else "")] = dt * 1e9 / n
print(json.dumps({"version": torch.__version__, "times": out}))
"""


def engine(bench, min_time):
    flt = "^(" + "|".join(ROWS) + ")(/interpreter|/composed)?/real_time$"
    env = dict(os.environ, SYNOROS_NUM_THREADS="1")
    res = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_filter={flt}",
                          f"--benchmark_min_time={min_time}"], env=env, check=True, capture_output=True, text=True)
    return {b["name"].replace("/real_time", ""): b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
            for b in json.loads(res.stdout)["benchmarks"]}


def torch_times(python, min_time, compiled):
    spec = {name: (setup, compiled) for name, (_, setup) in ROWS.items()}
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = subprocess.run([python, "-c", TORCH % {"min_time": min_time}, json.dumps(spec)], env=env, check=True,
                         capture_output=True, text=True)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    return data["version"], data["times"]


def main():
    ap = argparse.ArgumentParser()
    peers = os.path.join(HERE, "..", ".peers", "bin", "python")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "synoros_bench"))
    ap.add_argument("--python", default=peers if os.path.exists(peers) else "/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--json", default="fusion_results.json")
    ap.add_argument("--only", nargs="+", metavar="ROW", choices=list(ROWS), help="these rows only")
    args = ap.parse_args()
    if args.only:
        for name in [r for r in ROWS if r not in args.only]:
            del ROWS[name]
    compiled = os.path.abspath(args.python) == os.path.abspath(peers)
    samples, peaks, version = {}, [], ""
    for _ in range(args.rounds):
        for k, v in engine(args.bench, args.min_time).items():
            samples.setdefault(k, []).append(v)
        for c in ([False, True] if compiled else [False]):
            version, t = torch_times(args.python, args.min_time, c)
            for k, v in t.items():
                samples.setdefault("torch:" + k, []).append(v)
        cli = os.path.join(os.path.dirname(args.bench), "synoros")
        peaks.append(json.loads(subprocess.run([cli, "peak", "--threads", "1"], check=True, capture_output=True, text=True).stdout))
    gbps = max(p["gbps"] for p in peaks)
    gflops = max(p["gflops"] for p in peaks)
    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"one thread; PyTorch {version} eager{' and torch.compile' if compiled else ''}; "
          f"streaming bandwidth {gbps:.1f} GB/s, FMA peak {gflops:.1f} GFLOP/s (one core, synoros peak)")
    rows = []
    for name, (nbytes, _) in ROWS.items():
        e, i = med[name], med.get(name + "/interpreter")
        row = {"row": name, "engine_ns": e, "eager_ns": med["torch:" + name]}
        line = f"{name:16s} engine {e / 1e6:8.3f} ms"
        if i is not None:
            row["interpreter_ns"] = i
            line += f" (interpreter {i / 1e6:8.3f}, {i / e:4.2f}x)"
        c = med.get(name + "/composed")
        if c is not None:
            row["composed_ns"] = c
            line += f" (unfused graph {c / 1e6:8.3f}, {c / e:4.2f}x)"
        line += f"  eager {row['eager_ns'] / 1e6:8.3f} ms = {row['eager_ns'] / e:4.2f}x"
        if compiled:
            row["compile_ns"] = med["torch:" + name + ":compile"]
            line += f"  torch.compile {row['compile_ns'] / 1e6:8.3f} ms = {row['compile_ns'] / e:4.2f}x"
        if name in FLOPS:
            row["share_of_peak"] = FLOPS[name] / e / gflops
            line += f"  {FLOPS[name] / e:5.1f} GFLOP/s = {row['share_of_peak']:.0%} of peak"
        else:
            row["share_of_bandwidth"] = nbytes / e / gbps
            line += f"  {nbytes / e:5.1f} GB/s = {row['share_of_bandwidth']:.0%} of bandwidth"
        print(line)
        rows.append(row)
    with open(args.json, "w") as f:
        json.dump({"torch": version, "gbps": gbps, "gflops": gflops, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
