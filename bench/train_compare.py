#!/usr/bin/env python3
"""Side-by-side training: `synoros train` against the same model, initial weights,
hyper-parameters and schedule in PyTorch eager (bench/torch_train.py), at each thread count.
Reports seconds per epoch (training steps only) and final test accuracy for both. With
--repeats R each side runs R times, alternating engine and PyTorch, and the medians are compared
(this VM's speed drifts by tens of percent within minutes; one run each can land on different
stretches). Accuracies do not vary between repeats: both runs are deterministic."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TUNABLES = "glibc.malloc.trim_threshold=4294967296:glibc.malloc.mmap_threshold=4294967296"


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON result in:\n" + text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--models", nargs="+", default=["mlp", "lenet", "resnet-mini"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--augment", action="store_true")
    ap.add_argument("--repeats", type=int, default=1, help="runs per side, interleaved; medians are compared")
    ap.add_argument("--json", default="train_results.json")
    a = ap.parse_args()
    cli = os.path.join(a.build, "synoros")
    rows = []
    for model in a.models:
        for t in a.threads:
            eng_s, tor_s = [], []
            for _ in range(max(1, a.repeats)):
                with tempfile.TemporaryDirectory() as d:
                    init = os.path.join(d, "init.safetensors")
                    common = ["--epochs", str(a.epochs), "--train-limit", str(a.train_limit), "--test-limit",
                              str(a.test_limit)] + (["--augment"] if a.augment else [])
                    eng = last_json(subprocess.run(
                        [cli, "train", "--model", model, "--threads", str(t), "--out", d, "--save-init", init,
                         "--no-progress", "--json"] + common, check=True, capture_output=True, text=True).stdout)
                    env = dict(os.environ, GLIBC_TUNABLES=TUNABLES, OMP_NUM_THREADS=str(t),
                               OPENBLAS_NUM_THREADS=str(t))
                    tor = last_json(subprocess.run(
                        ["/usr/bin/python3", os.path.join(HERE, "torch_train.py"), "--model", model, "--threads",
                         str(t), "--init", init] + common, env=env, check=True, capture_output=True, text=True).stdout)
                eng_s.append(eng["seconds_per_epoch"])
                tor_s.append(tor["seconds_per_epoch"])
            e_med, t_med = statistics.median(eng_s), statistics.median(tor_s)
            row = {"model": model, "threads": t, "epochs": a.epochs,
                   "engine_s_per_epoch": e_med, "torch_s_per_epoch": t_med,
                   "engine_samples": eng_s, "torch_samples": tor_s,
                   "speedup": t_med / e_med,
                   "engine_test_acc": eng["test_acc"], "torch_test_acc": tor["test_acc"]}
            rows.append(row)
            spread = "" if len(eng_s) < 2 else "  (engine %.3f-%.3f, torch %.3f-%.3f)" % (
                min(eng_s), max(eng_s), min(tor_s), max(tor_s))
            print("%-12s threads %d  engine %8.3f s/epoch  torch %8.3f s/epoch  speedup %5.2fx  "
                  "acc engine %.4f torch %.4f%s" % (model, t, row["engine_s_per_epoch"], row["torch_s_per_epoch"],
                                                    row["speedup"], row["engine_test_acc"], row["torch_test_acc"],
                                                    spread),
                  flush=True)
    with open(a.json, "w") as f:
        json.dump(rows, f, indent=1)
    print("results written to", a.json)


if __name__ == "__main__":
    sys.exit(main())
