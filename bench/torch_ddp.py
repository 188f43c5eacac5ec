#!/usr/bin/env python3
"""PyTorch DistributedDataParallel (gloo backend, CPU) on the models of the data-parallel
comparison: `world` processes of `threads` threads each train one model with a fixed global batch
(global / world rows per process; DDP averages the gradients in buckets during the backward pass).
Prints one JSON line from rank 0: the steady-state steps per second (the first two steps, which
build DDP's buckets and warm the allocator, are left out). The data is random: the input pipeline
is not what is measured."""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402
import torch_models  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, a, port, out):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world)
    local = a.global_batch // a.world
    g = torch.Generator().manual_seed(rank)
    if a.model == "gpt2-11m":
        model = torch_gpt.make(a.model)
        ctx = torch_gpt.PRESETS[a.model][1]
        x = torch.randint(0, 256, (local, ctx), generator=g)
        y = torch.randint(0, 256, (local, ctx), generator=g)
        opt_cls = lambda p: torch.optim.AdamW(p, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.01)
        loss_fn = lambda m: torch.nn.functional.cross_entropy(m(x).reshape(-1, 256), y.reshape(-1))
    else:
        torch.manual_seed(0)
        model = torch_models.make(a.model)
        x = torch.randn(local, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (local,), generator=g)
        opt_cls = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4)
        loss_fn = lambda m: torch.nn.functional.cross_entropy(m(x), y)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = opt_cls(ddp.parameters())
    ends = []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp).backward()
        opt.step()
        ends.append(time.perf_counter())
    dist.barrier()
    if rank == 0:
        steady = (len(ends) - 2) / (ends[-1] - ends[1])
        out.put({"model": a.model, "world": a.world, "threads": a.threads, "global_batch": a.global_batch,
                 "steady_steps_per_s": steady, "torch": torch.__version__})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet-mini", choices=["resnet-mini", "lenet", "mlp", "gpt2-11m"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    if a.steps < 3 or a.global_batch % a.world:
        sys.exit("need at least 3 steps and a global batch the world size divides")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.spawn(worker, args=(a, free_port(), out), nprocs=a.world, join=True)
    print(json.dumps(out.get()))


if __name__ == "__main__":
    main()
