"""Trains an MLP on Fashion-MNIST from Python: modules, AdamW, a compiled step, a checkpoint.

    python examples/python/train_fashion_mnist.py --steps 300
"""

import argparse
import time

import numpy as np

import synoros
import synoros.nn as nn
import synoros.nn.functional as F


class MLP(nn.Module):
    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, hidden, seed=1)
        self.fc2 = nn.Linear(hidden, 10, seed=2)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.reshape(x.shape[0], -1))))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--limit", type=int, default=None, help="use only this many training images")
    p.add_argument("--save", default="", help="write the trained weights here (safetensors)")
    args = p.parse_args()

    train = synoros.data.FashionMNIST(train=True, limit=args.limit)
    test = synoros.data.FashionMNIST(train=False, limit=2000)
    model = MLP()
    opt = synoros.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)

    @synoros.compile  # forward, backward and update, traced once and replayed
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    loader = synoros.data.DataLoader(train, batch_size=args.batch, shuffle=True, drop_last=True, seed=5)
    done, start = 0, time.perf_counter()
    while done < args.steps:
        for x, y in loader:
            loss = step(x, y)
            done += 1
            if done % 100 == 0 or done == args.steps:
                print(f"step {done}  loss {float(loss):.4f}")
            if done == args.steps:
                break
    elapsed = time.perf_counter() - start

    with synoros.no_grad():
        logits = model(synoros.tensor(test.images)).numpy()
    accuracy = float((logits.argmax(1) == test.labels).mean())
    print(f"{args.steps} steps in {elapsed:.2f} s; test accuracy {accuracy:.4f}")
    if args.save:
        synoros.save(model, args.save, metadata={"steps": str(args.steps)})
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
