#!/usr/bin/env python3
"""Data-parallel training side by side, in one run: `mpirun -np 2 synoros train` (2 ranks x 1
thread) against one rank x 1 thread and one rank x 2 threads at the same global batch and the
same micro-shards (the three give the same checkpoint bytes, which this script checks), and the
fused single-process step; PyTorch DistributedDataParallel (gloo, CPU; bench/torch_ddp.py) with
2 processes x 1 thread against 1 x 1 and against plain PyTorch with 2 threads. Rates are
steady-state steps per second; `comm` is the share of rank 0's step time spent in the fold and
waiting for the other rank, from the engine's own step profile. Scaling efficiency is the 2-rank
speedup over one rank x 1 thread divided by 2 (two cores). Two cores that share caches and memory
bandwidth do not each run as fast as one core alone: "2 independent 1 x 1 runs at once" measures
that limit (the mean rate of two single-process runs started together), and the 2 ranks' share
of twice it is the efficiency the data-parallel machinery itself reaches."""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = {
    # model: (synoros arguments of one step layout, global batch, steps)
    "resnet-mini": (["--batch", "64", "--shards", "2", "--train-limit", "6400", "--test-limit", "100"], 64, 60),
    "gpt2-11m": (["--batch", "4", "--accum", "2", "--eval-every", "1000000", "--sample", "0"], 8, 7),
}


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON result in:\n" + text)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def synoros_cmd(cli, model, ranks, threads, fused, steps, out):
    args, _, _ = MODELS[model]
    args = list(args)
    if fused:  # one step over the whole global batch
        if model == "gpt2-11m":
            args = ["--batch", "8", "--eval-every", "1000000", "--sample", "0"]
        else:
            args[args.index("--shards") + 1] = "1"
    cmd = [cli, "train", "--model", model, "--steps", str(steps), "--threads", str(threads), "--no-progress",
           "--json", "--out", out] + args
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--bind-to", "none"] + cmd
    return cmd


ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def synoros(cli, model, ranks, threads, fused, steps, d):
    out = os.path.join(d, f"{model}-{ranks}x{threads}{'-fused' if fused else ''}")
    cmd = synoros_cmd(cli, model, ranks, threads, fused, steps, out)
    r = last_json(subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV).stdout)
    r["sha"] = sha(os.path.join(out, "checkpoint.safetensors"))
    return r


def twins(cli, model, steps, d):
    """Two independent 1 x 1 runs started together: each one's rate with the other core busy."""
    procs = [subprocess.Popen(synoros_cmd(cli, model, 1, 1, False, steps, os.path.join(d, f"twin{i}")),
                              stdout=subprocess.PIPE, text=True, env=ENV) for i in range(2)]
    rates = [last_json(p.communicate()[0])["steady_steps_per_s"] for p in procs]
    return {"steady_steps_per_s": sum(rates) / 2}


def torch_ddp(python, model, world, threads, steps):
    _, batch, _ = MODELS[model]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return last_json(subprocess.run(
        [python, os.path.join(HERE, "torch_ddp.py"), "--model", model, "--world", str(world), "--threads",
         str(threads), "--global-batch", str(batch), "--steps", str(steps)],
        check=True, capture_output=True, text=True, env=env).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    peers = os.path.join(ROOT, ".peers", "bin", "python")
    ap.add_argument("--python", default=peers if os.path.exists(peers) else "/usr/bin/python3",
                    help="the Python whose PyTorch runs DDP (default: scripts/install_peers.sh's)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="rounds of every run, interleaved; medians are compared (this VM's speed drifts)")
    ap.add_argument("--json", default="ddp_results.json")
    a = ap.parse_args()
    cli = os.path.join(a.build, "synoros")
    rows = []
    print(f"{'model':12} {'run':42} {'steps/s':>8} {'vs 1x1':>7} {'comm':>6}  (every round)")
    for model in a.models:
        steps = MODELS[model][2]
        rounds = []
        for _ in range(max(1, a.repeats)):
            with tempfile.TemporaryDirectory() as d:
                r = {
                    "synoros 1 rank x 1 thread": synoros(cli, model, 1, 1, False, steps, d),
                    "synoros 1 rank x 2 threads": synoros(cli, model, 1, 2, False, steps, d),
                    "synoros 2 ranks x 1 thread": synoros(cli, model, 2, 1, False, steps, d),
                    "synoros 1 x 1, fused whole batch": synoros(cli, model, 1, 1, True, steps, d),
                    "synoros 2 independent 1 x 1 runs at once": twins(cli, model, steps, d),
                    "DDP 1 process x 1 thread": torch_ddp(a.python, model, 1, 1, steps),
                    "DDP 1 process x 2 threads": torch_ddp(a.python, model, 1, 2, steps),
                    "DDP 2 processes x 1 thread": torch_ddp(a.python, model, 2, 1, steps),
                }
            rounds.append(r)
        # Each run's median round by rate (its other figures, the time split, come with it).
        runs = {}
        for name in rounds[0]:
            ordered = sorted((r[name] for r in rounds), key=lambda x: x["steady_steps_per_s"])
            runs[name] = dict(ordered[len(ordered) // 2], rates=[x["steady_steps_per_s"] for x in ordered])
        same = all(len({r[k]["sha"] for k in list(r)[:3]}) == 1 for r in rounds)
        limit = 2 * runs["synoros 2 independent 1 x 1 runs at once"]["steady_steps_per_s"]
        tor = {k: v for k, v in runs.items() if k.startswith("DDP")}
        runs = {k: v for k, v in runs.items() if not k.startswith("DDP")}
        base_s = runs["synoros 1 rank x 1 thread"]["steady_steps_per_s"]
        base_t = tor["DDP 1 process x 1 thread"]["steady_steps_per_s"]
        for name, r in list(runs.items()) + list(tor.items()):
            rate = r["steady_steps_per_s"]
            base = base_s if name.startswith("synoros") else base_t
            comm = ""
            if "communication_s" in r:
                total = r["compute_s"] + r["communication_s"] + r["update_s"]
                comm = f"{100 * r['communication_s'] / total:5.1f}%"
            spread = "/".join(f"{x:.2f}" for x in r["rates"])
            print(f"{model:12} {name:42} {rate:8.2f} {rate / base:6.2f}x {comm:>6}  ({spread})")
            rows.append(dict(r, model=model, run=name))
        s2 = runs["synoros 2 ranks x 1 thread"]["steady_steps_per_s"]
        t2 = tor["DDP 2 processes x 1 thread"]["steady_steps_per_s"]
        print(f"{model:12} 2 ranks: {s2 / base_s:.2f}x one rank (scaling efficiency {s2 / base_s / 2:.0%}; "
              f"{s2 / limit:.0%} of two busy cores' limit), {s2 / t2:.2f}x DDP's 2 processes; "
              f"same checkpoint bytes for 1x1, 1x2, 2x1: {same}")
        rows.append({"model": model, "speedup_2_ranks": s2 / base_s, "share_of_limit": s2 / limit,
                     "vs_ddp_2": s2 / t2, "same_bytes": same})
    with open(a.json, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
