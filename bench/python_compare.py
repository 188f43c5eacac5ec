#!/usr/bin/env python3
"""The Python package's speed, in one run: per-call overhead of bound methods, the tiny MLP's
SGD step through synoros.compile against the same step from C++ (synoros_bench), and eager
Python loops of that step against PyTorch eager (Debian's 1.13, and PyTorch 2.x from .peers/
when scripts/install_peers.sh has put it there). Run it with the Python that has synoros
installed (scripts/test.sh leaves one in build/venv):

    build/venv/bin/python bench/python_compare.py [--bench build/synoros_bench] [--rounds N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import synoros
import synoros.nn as nn
import synoros.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def time_ns(fn, min_time=0.5):
    """Median over 5 rounds of the mean time per call, each round at least min_time / 5."""
    for _ in range(20):
        fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= min_time / 5:
            break
        n *= 2
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rounds.append((time.perf_counter() - t0) * 1e9 / n)
    return sorted(rounds)[2]


def per_call(stmt, setup_globals, n=200000):
    """ns per execution of stmt in a tight loop, minus the loop's own cost."""
    code = compile(f"for _ in range({n}):\n    {stmt}", "<bench>", "exec")
    empty = compile(f"for _ in range({n}):\n    pass", "<bench>", "exec")
    best, base = float("inf"), float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        exec(code, setup_globals)
        best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        exec(empty, setup_globals)
        base = min(base, time.perf_counter() - t0)
    return (best - base) * 1e9 / n


def tiny_mlp_data():
    r = np.random.default_rng(0)
    return r.standard_normal((8, 16)).astype(np.float32), r.standard_normal((8, 8)).astype(np.float32)


def synoros_steps():
    x, t = tiny_mlp_data()
    model = nn.Sequential(nn.Linear(16, 32, seed=1), nn.ReLU(), nn.Linear(32, 8, seed=2))
    opt = synoros.optim.SGD(model.parameters(), lr=1e-3)
    xs, ts = synoros.tensor(x), synoros.tensor(t)

    def eager():
        opt.zero_grad()
        loss = F.mse_loss(model(xs), ts)
        loss.backward()
        opt.step()

    @synoros.compile
    def compiled(x, t):
        opt.zero_grad()
        loss = F.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss

    return eager, lambda: compiled(x, t)


def cpp_step_ns(bench):
    res = subprocess.run([bench, "--benchmark_format=json", "--benchmark_filter=^TinyMLP/SgdStepModules$",
                          "--benchmark_min_time=0.5", "--benchmark_repetitions=5",
                          "--benchmark_report_aggregates_only=true"],
                         env=dict(os.environ, SYNOROS_NUM_THREADS="1"), check=True, capture_output=True, text=True)
    for b in json.loads(res.stdout)["benchmarks"]:
        if b["name"].endswith("_median"):
            return b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    raise RuntimeError("no TinyMLP/SgdStepModules median in the benchmark output")


TORCH_STEP = """
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
from torch_scenarios import tiny_mlp, time_ns
torch.set_num_threads(1)
print(json.dumps(time_ns(tiny_mlp(True))))
"""


def torch_step_ns(python):
    """PyTorch eager's step (bench/torch_scenarios.py's, as compare.py times it), one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    res = subprocess.run([python, "-c", TORCH_STEP, HERE], env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "synoros_bench"))
    ap.add_argument("--json", default="python_results.json")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every step row; medians are reported")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    synoros.set_num_threads(1)
    gflops, gbps, read_gbps = synoros.measure_peak()
    print(f"machine: one core {gflops:.1f} GFLOP/s FMA peak, {gbps:.1f} GB/s copying, {read_gbps:.1f} GB/s reading")

    t = synoros.randn(8, 16, seed=1)
    g = {"t": t, "synoros": synoros}
    calls = {
        "t.numel()": per_call("t.numel()", g),
        "t.shape": per_call("t.shape", g),
        "t.requires_grad": per_call("t.requires_grad", g),
        "t + t (records a lazy op)": per_call("t + t", g, n=50000),
        "t.relu() (records a lazy op)": per_call("t.relu()", g, n=50000),
    }
    print("\nPer-call overhead (one thread; loop cost subtracted)")
    print(f"{'call':32s} {'ns':>8s}")
    for k, v in calls.items():
        print(f"{k:32s} {v:8.0f}")

    eager, compiled = synoros_steps()
    peers = {"PyTorch " + torch_version("/usr/bin/python3") + " eager": "/usr/bin/python3"}
    peers_py = os.path.join(ROOT, ".peers", "bin", "python")
    if os.path.exists(peers_py):
        peers["PyTorch " + torch_version(peers_py) + " eager"] = peers_py
    # Every row once a round, the rounds one after the other: a virtual machine's speed drifts
    # within minutes, so each ratio is taken within its round and the medians are reported.
    rounds = []
    for _ in range(args.rounds):
        r = {"python compiled": time_ns(compiled), "python eager": time_ns(eager)}
        if os.path.exists(args.bench):
            r["C++ compiled (synoros_bench)"] = cpp_step_ns(args.bench)
        for label, py in peers.items():
            r[label] = torch_step_ns(py)
        rounds.append(r)
    median = statistics.median
    rows = {k: median([r[k] for r in rounds]) for k in rounds[0]}
    span = lambda xs: f"{min(xs):.2f}-{max(xs):.2f}" if len(xs) > 1 else ""
    ratio = lambda a, b: [r[a] / r[b] for r in rounds]

    print(f"\nTiny MLP SGD step (x[8,16] -> Linear 32 -> ReLU -> Linear 8 -> MSE), one thread, "
          f"medians of {args.rounds} rounds")
    print(f"{'engine':34s} {'us/step':>9s} {'range':>13s}")
    for k, v in rows.items():
        print(f"{k:34s} {v / 1e3:9.2f} {span([r[k] / 1e3 for r in rounds]):>13s}")
    ratios = {}
    if "C++ compiled (synoros_bench)" in rows:
        x = ratio("python compiled", "C++ compiled (synoros_bench)")
        ratios["python compiled / C++ compiled"] = median(x)
        print(f"\npython compiled / C++ compiled: {median(x):.2f}x {span(x)} (target <= 2)")
    for label in peers:
        e, c = ratio(label, "python eager"), ratio(label, "python compiled")
        ratios[f"{label} / python eager"], ratios[f"{label} / python compiled"] = median(e), median(c)
        print(f"{label} / python eager: {median(e):.2f}x {span(e)};  / python compiled: {median(c):.2f}x {span(c)}")
    with open(args.json, "w") as f:
        json.dump({"calls_ns": calls, "steps_ns": rows, "rounds_ns": rounds, "ratios": ratios, "peak_gflops": gflops,
                   "peak_gbps": gbps}, f, indent=1)


if __name__ == "__main__":
    main()
