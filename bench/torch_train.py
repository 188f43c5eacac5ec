#!/usr/bin/env python3
"""The PyTorch twin of `synoros train` for Fashion-MNIST classifiers: same model tree, the same
initial weights (read from the engine's safetensors file), hyper-parameters, schedule,
normalisation and augmentation. Prints one JSON line: seconds per epoch and test accuracy."""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import make  # noqa: E402

DATA = os.environ.get("SYNOROS_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    magic, n = struct.unpack(">II", raw[:8])
    if magic == 2051:
        h, w = struct.unpack(">II", raw[8:16])
        return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, h, w)
    return np.frombuffer(raw, dtype=np.uint8, offset=8)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    base = 8 + hl
    dt = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + b:base + e]), dtype=dt[v["dtype"]]) if e > b else \
            torch.zeros(0, dtype=dt[v["dtype"]])
        out[k] = t.reshape(v["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet-mini")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--augment", action="store_true")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", default="")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(a.threads)
    except ImportError:
        pass
    xtr, ytr = idx("train-images-idx3-ubyte.gz"), idx("train-labels-idx1-ubyte.gz")
    xte, yte = idx("t10k-images-idx3-ubyte.gz"), idx("t10k-labels-idx1-ubyte.gz")
    if a.train_limit:
        xtr, ytr = xtr[:a.train_limit], ytr[:a.train_limit]
    if a.test_limit:
        xte, yte = xte[:a.test_limit], yte[:a.test_limit]
    norm = lambda x: (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530  # noqa: E731
    xtr, xte = norm(xtr), norm(xte)
    ytr, yte = torch.from_numpy(ytr.astype(np.int64)), torch.from_numpy(yte.astype(np.int64))
    model = make(a.model)
    if a.init:
        sd = {k[len("model."):]: v for k, v in load_safetensors(a.init).items() if k.startswith("model.")}
        missing = model.load_state_dict(sd, strict=True)
        assert not missing.missing_keys and not missing.unexpected_keys
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay)
    steps_per_epoch = len(xtr) // a.batch
    total = steps_per_epoch * a.epochs
    gen = torch.Generator().manual_seed(a.seed)
    step, seconds = 0, 0.0
    for epoch in range(a.epochs):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), generator=gen)
        for b in range(steps_per_epoch):
            sel = perm[b * a.batch:(b + 1) * a.batch]
            x, y = xtr[sel], ytr[sel]
            if a.augment:  # random crop with 2 pixels of zero padding, and horizontal flips
                x = torch.nn.functional.pad(x, (2, 2, 2, 2), value=(0 - 0.2860) / 0.3530)
                dx, dy = torch.randint(0, 5, (2,), generator=gen).tolist()
                x = x[:, :, dy:dy + 28, dx:dx + 28]
                flip = torch.rand(len(x), generator=gen) < 0.5
                x = torch.where(flip[:, None, None, None], x.flip(3), x)
            lr = a.lr * 0.5 * (1 + math.cos(math.pi * step / total))
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
        seconds += time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum()) for i in range(0, len(xte), 500))
    print(json.dumps({"model": a.model, "epochs": a.epochs, "seconds_per_epoch": seconds / a.epochs,
                      "test_acc": correct / len(xte), "threads": a.threads}))


if __name__ == "__main__":
    main()
