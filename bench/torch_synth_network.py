#!/usr/bin/env python3
"""A discovered operator in PyTorch: the small ResNet with its exported modules in place of the
stride-1 3x3 convolutions of the classes the search replaced, against the convolutional network,
eval-mode forward at batch 64 (at another --batch, the convolutional network alone), timed interleaved in one process (PyTorch eager; with --compile,
both networks through torch.compile, which needs PyTorch 2.x: run it with .peers/bin/python from
scripts/install_peers.sh).

usage: torch_synth_network.py PREFIX [--threads N] [--batch N] [--repeats N] [--compile]
Reads PREFIX_b64_class<c>.py (written by `synoros trials` for operators on the Pareto front as
REPORT/op<i>_b64_class<c>.py, or by `synoros export --operator ACTIONS --out DIR` as
DIR/op_b64_class<c>.py). Prints one JSON line: baseline and candidate ms (medians), speedup.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_models import ResNetMini  # noqa: E402

# Layer classes of the search spec, in binding order: (channels, size); width 16.
CLASSES = [(16, 28), (32, 14), (64, 7)]


def load_module(path, cls):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, cls)()


def replaced_network(prefix):
    net = ResNetMini()
    found = []
    for c, (ch, size) in enumerate(CLASSES):
        path = "%s_b64_class%d.py" % (prefix, c)
        if not os.path.exists(path):
            continue
        found.append(c)
        # The stride-1 ch -> ch convolutions at this size: layer1's two, conv2 of the other stages.
        for stage in (net.layer1, net.layer2, net.layer3):
            for block in stage:
                for name in ("conv1", "conv2"):
                    conv = getattr(block, name)
                    if (isinstance(conv, torch.nn.Conv2d) and conv.stride == (1, 1) and conv.in_channels == ch
                            and conv.out_channels == ch and conv.kernel_size == (3, 3) and
                            size == {16: 28, 32: 14, 64: 7}[ch]):
                        m = load_module(path, "SynthOp")
                        with torch.no_grad():
                            for p in m.parameters():
                                p.mul_(0.1)
                        setattr(block, name, m)
    if not found:
        raise SystemExit("no %s_b64_class<c>.py" % prefix)
    return net, found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64,
                    help="images per call; the exported modules check for batch 64, so at any other batch only the "
                         "convolutional network is timed")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--compile", action="store_true", help="time both networks through torch.compile")
    a = ap.parse_args()
    if a.compile and not hasattr(torch, "compile"):
        raise SystemExit("--compile needs PyTorch 2.x (this is %s): use .peers/bin/python" % torch.__version__)
    torch.set_num_threads(a.threads)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(a.threads)
    except ImportError:
        pass
    torch.manual_seed(0)
    base = ResNetMini().eval()
    cand, classes = replaced_network(a.prefix) if a.batch == 64 else (None, [])
    nets = [base] if cand is None else [base, cand.eval()]
    x = torch.randn(a.batch, 1, 28, 28)
    if a.compile:  # compiled on the first calls below, which are not timed
        nets = [torch.compile(n) for n in nets]
    times = [[] for _ in nets]
    with torch.no_grad():
        for _ in range(3):
            for n in nets:
                n(x)
        for r in range(a.repeats):  # ABBA order
            order = list(range(len(nets))) if r % 2 == 0 else list(reversed(range(len(nets))))
            for k in order:
                t0 = time.perf_counter()
                nets[k](x)
                times[k].append((time.perf_counter() - t0) * 1e3)
    b = statistics.median(times[0])
    c = statistics.median(times[1]) if cand is not None else None
    print(json.dumps({"operator": a.prefix, "classes": classes, "threads": a.threads, "torch": torch.__version__,
                      "compiled": a.compile, "batch": a.batch, "baseline_ms": b, "candidate_ms": c,
                      "speedup": b / c if c else None}))


if __name__ == "__main__":
    main()
