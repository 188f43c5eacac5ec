#!/usr/bin/env python3
"""Side by side: the GPT-2 family in the engine (Google Benchmark's Gpt/ rows) against the same
models in PyTorch eager, in one run, at 1 and 2 threads.

Prefill and the training step print achieved GFLOP/s and the share of the measured FMA peak of
the row's thread count (`synoros peak --threads N`: N threads running FMA chains at once, so a
core's clock with every core busy; at two threads the share against twice the one-core peak is
printed beside it); decoding prints the bytes a step must read (every weight but the
position table, and the keys and values of the positions attended over) per second against the measured
DRAM bandwidth of the row's threads, both as `synoros peak` measures it: a streaming copy (bytes read and
written) and a streaming read (what a decoding step does), over buffers twice the last-level
cache. The peak and the bandwidths are measured again right before each engine row (a virtual
machine's speed can change within minutes), and each run's share is taken against its own
measurement; the medians are reported. Ratios are PyTorch time / engine time (above 1: the
engine is faster).
Each side runs in --processes fresh processes, alternating; medians are reported.
PyTorch: scripts/install_peers.sh's PyTorch 2.x environment (.peers/bin/python) when it exists,
eager and torch.compile (prefill and training); otherwise Debian's /usr/bin/python3 (1.13, eager);
--python names another interpreter.
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = {"gpt2-11m": (256, 512, 384, 6, 6), "gpt2-98m": (16384, 1024, 768, 12, 12)}
# (engine benchmark name, kind, preset, a, batch): a is the sequence (prefill, train) or the
# position decoded at (decode: positions 0..a attended); the LoRA step's "preset" is its width and
# a its rank.
ROWS = [("Gpt/prefill/gpt2-11m/seq:128/batch:1", "prefill", "gpt2-11m", 128, 1),
        ("Gpt/prefill/gpt2-98m/seq:256/batch:1", "prefill", "gpt2-98m", 256, 1),
        ("Gpt/prefill/gpt2-98m/seq:512/batch:1", "prefill", "gpt2-98m", 512, 1),
        ("Gpt/prefill/gpt2-11m/seq:128/batch:8", "prefill", "gpt2-11m", 128, 8),
        ("Gpt/prefill/gpt2-98m/seq:256/batch:8", "prefill", "gpt2-98m", 256, 8),
        ("Gpt/prefill/gpt2-98m/seq:512/batch:8", "prefill", "gpt2-98m", 512, 8),
        ("Gpt/decode/gpt2-98m/context:512/batch:1", "decode", "gpt2-98m", 512, 1),
        ("Gpt/decode/gpt2-98m/context:512/batch:8", "decode", "gpt2-98m", 512, 8),
        ("Gpt/train/gpt2-98m/seq:256/batch:1", "train", "gpt2-98m", 256, 1),
        ("Lora/step/batch:128/width:768/rank:8", "lora", "768", 8, 128)]


def params(preset, context=None):
    V, T, C, H, L = PRESETS[preset]
    T = context or T
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def forward_flops(preset, T, B):
    V, _, C, _, L = PRESETS[preset]
    return 2.0 * B * T * (L * 12 * C * C + C * V) + L * 4.0 * B * T * T * C


def decode_bytes(preset, used, B):
    # The step at position `used` attends over positions 0..used (both sides decode there).
    V, T, C, _, L = PRESETS[preset]
    return 4.0 * (params(preset) - T * C + 2 * L * B * (used + 1) * C)


def measure_peak(bench, threads):
    return json.loads(subprocess.run([os.path.join(os.path.dirname(bench), "synoros"), "peak", "--threads", str(threads)],
                                     check=True, capture_output=True, text=True).stdout)


def engine_run(bench, threads, min_time, name):
    """One row's time in seconds, and the peak measured right before it."""
    peak = measure_peak(bench, threads)
    env = dict(os.environ, SYNOROS_NUM_THREADS=str(threads))
    res = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_filter=^{name}(/real_time)?$",
                          f"--benchmark_min_time={min_time}"], env=env, check=True, capture_output=True, text=True)
    b = json.loads(res.stdout)["benchmarks"][0]
    return b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]], peak


def torch_run(python, threads, min_time, compiled=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    specs = [f"{k}:{p}:{a}:{b}" + (":compile" if compiled else "") for _, k, p, a, b in ROWS]
    res = subprocess.run([python, os.path.join(HERE, "torch_gpt.py"), str(threads), str(min_time)] + specs,
                         env=env, check=True, capture_output=True, text=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return out["torch"], {ROWS[i][0]: out["times"][s] for i, s in enumerate(specs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "build", "synoros_bench"))
    peers = os.path.join(HERE, "..", ".peers", "bin", "python")
    ap.add_argument("--python", default=peers if os.path.exists(peers) else "/usr/bin/python3",
                    help="the PyTorch interpreter (default: scripts/install_peers.sh's when it exists)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--only", default="", help="regex: only the rows it matches")
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile (PyTorch 2.x; on by default with the peers' interpreter)")
    ap.add_argument("--json", default="transformer_results.json")
    args = ap.parse_args()
    args.compile = args.compile or os.path.abspath(args.python) == os.path.abspath(peers)
    if args.only:
        import re
        ROWS[:] = [r for r in ROWS if re.search(args.only, r[0])]
        if not ROWS:
            raise SystemExit(f"no row matches --only {args.only!r}")
    results, version, peaks = [], "?", []
    for th in args.threads:
        eng, tor, com, pk = ({r[0]: [] for r in ROWS} for _ in range(4))
        for _ in range(args.processes):
            for name, *_ in ROWS:
                t, peak = engine_run(args.bench, th, args.min_time, name)
                eng[name].append(t)
                pk[name].append(peak)
                peaks.append(peak)
            version, times = torch_run(args.python, th, args.min_time)
            for name, t in times.items():
                tor[name].append(t)
            if args.compile:
                for name, t in torch_run(args.python, th, args.min_time, compiled=True)[1].items():
                    if t is not None:
                        com[name].append(t)
        for name, kind, preset, a, b in ROWS:
            e, p = statistics.median(eng[name]), statistics.median(tor[name])
            row = {"name": name, "threads": th, "engine_s": e, "torch_s": p, "ratio": p / e}
            if com[name]:
                row.update(compile_s=statistics.median(com[name]), ratio_compile=statistics.median(com[name]) / e)
            # Each run's share against the peak measured right before it, then the median.
            share = lambda work, key, scale=1: statistics.median(
                work / t / 1e9 / (q[key] * scale) for t, q in zip(eng[name], pk[name]))
            if kind == "decode":
                work = decode_bytes(preset, a, b)
                row.update(engine_gbps=work / e / 1e9, share_of_bandwidth=share(work, "gbps_threads"),
                           share_of_read_bandwidth=share(work, "read_gbps_threads"),
                           engine_tokens_per_s=b / e, torch_tokens_per_s=b / p)
            else:
                if kind == "lora":
                    C, r = int(preset), a  # the base GEMM forward and for dX, the adapter's six small GEMMs
                    work = 2.0 * b * C * C * 2 + 6 * 2.0 * b * C * r
                else:
                    work = forward_flops(preset, a, b) * (3 if kind == "train" else 1)
                row.update(engine_gflops=work / e / 1e9, share_of_peak=share(work, "gflops_threads"),
                           share_of_one_core_peak_times_threads=share(work, "gflops", th))
            results.append(row)
    # One core's figures come with every measurement; the threads' ones with their thread count's.
    span = lambda key, th=None: "-".join(f"{f(q[key] for q in peaks if th is None or q['threads'] == th):.1f}"
                                         for f in (min, max))
    print(f"machine: {peaks[0]['isa']}, one core {span('gflops')} GFLOP/s, {span('gbps')} GB/s copying and "
          f"{span('read_gbps')} GB/s reading from DRAM"
          + "".join(f"; {th} threads at once {span('gflops_threads', th)} GFLOP/s, {span('gbps_threads', th)} GB/s "
                    f"copying, {span('read_gbps_threads', th)} GB/s reading" for th in args.threads if th > 1)
          + " (measured before each engine row); "
          f"PyTorch {version} eager{' and torch.compile' if args.compile else ''}; "
          f"medians of {args.processes} processes per side")
    print(f"{'row':44} {'thr':>3} {'engine':>10} {'PyTorch':>10} {'ratio':>6}  limit")
    for r in results:
        lim = (f"{r['engine_gflops']:.1f} GFLOP/s, {100 * r['share_of_peak']:.0f}% of peak"
               + (f" ({100 * r['share_of_one_core_peak_times_threads']:.0f}% of {r['threads']}x one core's)"
                  if r["threads"] > 1 else "") if "engine_gflops" in r else
               f"{r['engine_gbps']:.1f} GB/s, {100 * r['share_of_bandwidth']:.0f}% of copy bandwidth, "
               f"{100 * r['share_of_read_bandwidth']:.0f}% of read bandwidth, "
               f"{r['engine_tokens_per_s']:.1f} vs {r['torch_tokens_per_s']:.1f} tokens/s")
        comp = (f"  torch.compile {1e3 * r['compile_s']:.1f}ms = {r['ratio_compile']:.2f}x" if "compile_s" in r else "")
        print(f"{r['name']:44} {r['threads']:3d} {1e3 * r['engine_s']:8.1f}ms {1e3 * r['torch_s']:8.1f}ms "
              f"{r['ratio']:5.2f}x  {lim}{comp}")
    with open(args.json, "w") as f:
        json.dump({"peaks": peaks, "torch": version, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
