#!/usr/bin/env python3
"""Side-by-side: the engine's Google Benchmark cases against PyTorch eager, in one run.

Each side runs in several fresh processes; medians are reported, with the ratio
PyTorch time / engine time (above 1: the engine is faster). Results go to a JSON file.
--mode default,fast also runs the engine in fast mode (SYNOROS_FAST=1) in the same processes'
rounds and prints default-mode speed as a share of fast mode's per row.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scenario_list import MATMUL_SHAPES, matmul_name  # noqa: E402

SCENARIOS = ["TinyMLP/FwdBwd", "TinyMLP/SgdStep", "EltwiseChain", "BiasGeluTanh", "Conv3x3", "Conv3x3/winograd", "Depthwise3x3", "Train/mlp/batch:64",
             "Train/lenet/batch:64", "Train/resnet-mini/batch:64", "Infer/resnet-mini/batch:1",
             "Infer/resnet-mini/batch:64"] + \
    [matmul_name(s) for s in MATMUL_SHAPES]
# Glibc heap trimming off: otherwise eager PyTorch suffers page-fault storms in some runs.
TUNABLES = "glibc.malloc.trim_threshold=4294967296:glibc.malloc.mmap_threshold=4294967296"


def engine_run(bench, threads, min_time, mode="default"):
    env = dict(os.environ, SYNOROS_NUM_THREADS=str(threads), SYNOROS_FAST="1" if mode == "fast" else "0")
    flt = "^(" + "|".join(x.replace("/", "/") for x in SCENARIOS) + ")(/real_time)?$"
    res = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_filter={flt}",
                          f"--benchmark_min_time={min_time}"], env=env, check=True,
                         capture_output=True, text=True)
    data = json.loads(res.stdout)
    out = {}
    for b in data["benchmarks"]:
        name = b["name"].replace("/real_time", "")
        out[name] = b["real_time"] * {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        KERNELS[(name, mode)] = b.get("label", "")
    return out


KERNELS = {}


def torch_run(threads, min_time):
    env = dict(os.environ, GLIBC_TUNABLES=TUNABLES, OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    res = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_scenarios.py"), str(threads)]
                         + SCENARIOS, env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


# (label, `synoros memory` flags, torch_gpt.step_peak_bytes arguments)
MEMORY_CASES = [("GPT training step (4 layers, width 256, 4 heads, sequence 128, batch 8)", [], (8, 128, None, False)),
                ("gpt2-98m training step (sequence 256, batch 1)", ["--model", "gpt2-98m", "--context", "256"],
                 (1, 256, "gpt2-98m", False)),
                ("gpt2-98m training step (sequence 256, batch 8)",
                 ["--model", "gpt2-98m", "--context", "256", "--batch", "8"], (8, 256, "gpt2-98m", False)),
                ("gpt2-98m training step (sequence 256, batch 8), each block checkpointed on both sides",
                 ["--model", "gpt2-98m", "--context", "256", "--batch", "8", "--checkpoint-activations"],
                 (8, 256, "gpt2-98m", True)),
                # The whole step, as `synoros train` runs it: AdamW's update included (its state,
                # like the parameters, is not counted), with the gradients clipped and without.
                ("gpt2-98m whole step with AdamW, clipping at 1 (sequence 256, batch 1)",
                 ["--model", "gpt2-98m", "--context", "256", "--optimizer", "adamw", "--clip", "1"],
                 (1, 256, "gpt2-98m", False, "adamw", 1.0)),
                ("gpt2-98m whole step with AdamW, no clipping (sequence 256, batch 1)",
                 ["--model", "gpt2-98m", "--context", "256", "--optimizer", "adamw", "--clip", "0"],
                 (1, 256, "gpt2-98m", False, "adamw", 0.0))]


def memory_rows(bench):
    """Peak bytes of GPT training steps: the engine's plan against PyTorch eager."""
    cli = os.path.join(os.path.dirname(bench), "synoros")
    rows = []
    for label, flags, args in MEMORY_CASES:
        eng = json.loads(subprocess.run([cli, "memory"] + flags, check=True, capture_output=True,
                                        text=True).stdout)
        env = dict(os.environ, GLIBC_TUNABLES=TUNABLES, OMP_NUM_THREADS="1")
        code = ("import sys; sys.path.insert(0, %r); import torch, torch_gpt; torch.set_num_threads(1); "
                "print(torch_gpt.step_peak_bytes(*%r))" % (HERE, args))
        torch_peak = int(subprocess.run(["/usr/bin/python3", "-c", code], env=env, check=True,
                                        capture_output=True, text=True).stdout.strip().splitlines()[-1])
        rows.append({"case": label, "engine_planned_bytes": eng["planned_bytes"],
                     "engine_unplanned_bytes": eng["unplanned_bytes"], "torch_peak_bytes": torch_peak,
                     "param_bytes": eng["param_bytes"], "engine_scratch_bytes": eng["scratch_bytes"],
                     "planned_over_unplanned": eng["planned_bytes"] / eng["unplanned_bytes"],
                     "planned_over_torch": eng["planned_bytes"] / torch_peak})
    return rows


def run_peak(bench):
    return json.loads(subprocess.run([os.path.join(os.path.dirname(bench), "synoros"), "peak", "--threads", "1"],
                                     check=True, capture_output=True, text=True).stdout)


def measured_peak(bench, peaks):
    """The one-core FMA peak: the best of the measurements taken through the run (and one more)."""
    peaks = peaks + [run_peak(bench)]
    best = max(peaks, key=lambda p: p["gflops"])
    return dict(best, gbps=max(p["gbps"] for p in peaks))


def provider_rows(bench, min_time, peak_gflops):
    """The GemmProvider cases: every provider alone, one thread, against the measured peak."""
    env = dict(os.environ, SYNOROS_NUM_THREADS="1")
    res = subprocess.run([bench, "--benchmark_format=json", "--benchmark_filter=^GemmProvider/",
                          f"--benchmark_min_time={min_time}"], env=env, check=True,
                         capture_output=True, text=True)
    out = []
    for b in json.loads(res.stdout)["benchmarks"]:
        if "GFLOP/s" in b:
            g = b["GFLOP/s"] / 1e9
            out.append({"name": b["name"].replace("/real_time", ""), "gflops": g, "share_of_peak": g / peak_gflops})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "synoros_bench"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--json", default="bench_results.json")
    ap.add_argument("--only", default="", help="regex: run only the scenarios it matches")
    ap.add_argument("--no-memory", action="store_true", help="skip the GPT memory comparison")
    ap.add_argument("--mode", default="default",
                    help="engine kernel modes, comma-separated: default (canonical kernels), fast (SYNOROS_FAST=1)")
    args = ap.parse_args()
    modes = [m for m in args.mode.split(",") if m]
    if not modes or any(m not in ("default", "fast") for m in modes):
        ap.error("--mode takes default, fast or default,fast")
    if args.only:
        import re
        SCENARIOS[:] = [x for x in SCENARIOS if re.search(args.only, x)]
    rows = []
    peaks = []  # measured between the processes: a noisy minute can only lower one of them
    for th in args.threads:
        eng = {(s, m): [] for s in SCENARIOS for m in modes}
        tor = {s: [] for s in SCENARIOS}
        for rnd in range(args.processes):  # interleaved, so drift hits both sides alike
            # The modes swap places every round: the first engine process of a round tends to run
            # slower (measured: 20-30% on rows whose kernels are the same in both modes).
            for m in (modes if rnd % 2 == 0 else modes[::-1]):
                for k, v in engine_run(args.bench, th, args.min_time, m).items():
                    eng[(k, m)].append(v)
            for k, v in torch_run(th, args.min_time).items():
                tor[k].append(v)
            peaks.append(run_peak(args.bench))
        for s in SCENARIOS:
            t = statistics.median(tor[s])
            for m in modes:
                e = statistics.median(eng[(s, m)])
                rows.append({"scenario": s, "threads": th, "mode": m, "engine_ns": e, "torch_ns": t, "ratio": t / e})
    print(f"{'scenario':<36}{'threads':>8}{'mode':>8}{'engine ns/iter':>17}{'PyTorch ns/iter':>17}{'ratio':>9}  kernel")
    for r in rows:
        r["kernel"] = KERNELS.get((r["scenario"], r["mode"]), "")
        print(f"{r['scenario']:<36}{r['threads']:>8}{r['mode']:>8}{r['engine_ns']:>17.1f}{r['torch_ns']:>17.1f}"
              f"{r['ratio']:>8.2f}x  {r['kernel']}")
    if len(modes) > 1:
        print("\ndefault mode's speed as a share of fast mode's (fast ns / default ns; target >= 0.95):")
        by = {(r["scenario"], r["threads"], r["mode"]): r["engine_ns"] for r in rows}
        for th in args.threads:
            for s in SCENARIOS:
                share = by[(s, th, "fast")] / by[(s, th, "default")]
                for r in rows:
                    if r["scenario"] == s and r["threads"] == th:
                        r["default_over_fast_speed"] = share
                print(f"  {s:<36}{th:>3} threads {share:6.2f}{'' if share >= 0.95 else '  below'}")
    peak = measured_peak(args.bench, peaks)
    print(f"\nmeasured one-core peak: {peak['gflops']:.1f} GFLOP/s ({peak['isa']}), {peak['gbps']:.1f} GB/s")
    for r in rows:
        for sh in MATMUL_SHAPES:
            if r["scenario"] == matmul_name(sh):
                r["engine_gflops"] = 2.0 * sh[0] * sh[1] * sh[2] * sh[3] / r["engine_ns"]
                r["share_of_peak"] = r["engine_gflops"] / peak["gflops"]
                if r["threads"] == 1:
                    print(f"  {r['scenario']:<34} {r['mode']:<8}{r['engine_gflops']:7.1f} GFLOP/s = "
                          f"{100 * r['share_of_peak']:5.1f}% of peak ({r['kernel']})")
    providers = provider_rows(args.bench, args.min_time, peak["gflops"])
    if providers:
        print("\neach GEMM provider alone, one thread (no selection):")
        for r in providers:
            print(f"  {r['name']:<34} {r['gflops']:7.1f} GFLOP/s = {100 * r['share_of_peak']:5.1f}% of peak")
    mem = None if args.no_memory else memory_rows(args.bench)
    for m in mem or []:
        print(f"\n{m['case']}, peak bytes beyond parameters and inputs:")
        print(f"  engine planned   {m['engine_planned_bytes'] / 1e6:9.1f} MB "
              f"(arena; {m['planned_over_unplanned']:.2f}x unplanned, {m['planned_over_torch']:.2f}x PyTorch)")
        print(f"  engine unplanned {m['engine_unplanned_bytes'] / 1e6:9.1f} MB; kernel scratch beside the arena "
              f"{m['engine_scratch_bytes'] / 1e6:.1f} MB")
        print(f"  PyTorch eager    {m['torch_peak_bytes'] / 1e6:9.1f} MB (heap live bytes, sampled after every op)")
    with open(args.json, "w") as f:
        json.dump({"medians_over_processes": args.processes, "modes": modes, "rows": rows, "memory": mem, "peak": peak,
                   "providers": providers},
                  f, indent=2)
    print(f"results written to {args.json}")


if __name__ == "__main__":
    sys.exit(main())
