"""Trains a small byte-level GPT on a text file for a few steps, then samples from it.

    python examples/python/generate_text.py --text /usr/share/games/fortunes/fortunes --steps 200
"""

import argparse

import numpy as np

import synoros
from synoros.models import GPT, GPTConfig


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--text", default="/usr/share/games/fortunes/fortunes")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--prompt", default="The ")
    p.add_argument("--tokens", type=int, default=80)
    args = p.parse_args()

    data = np.frombuffer(open(args.text, "rb").read(), dtype=np.uint8).astype(np.int64)
    cfg = GPTConfig(vocab_size=256, block_size=64, n_embd=128, n_head=4, n_layer=2)
    model = GPT(cfg, seed=1)
    opt = synoros.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)

    @synoros.compile
    def step(x, y):
        opt.zero_grad()
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        return loss

    for i in range(args.steps):
        starts = rng.integers(0, len(data) - cfg.block_size - 1, 16)
        x = np.stack([data[s:s + cfg.block_size] for s in starts])
        y = np.stack([data[s + 1:s + cfg.block_size + 1] for s in starts])
        loss = step(x, y)
        if (i + 1) % 50 == 0:
            print(f"step {i + 1}  loss {float(loss):.3f}")
    print(repr(args.prompt + model.generate(args.prompt, args.tokens, temperature=0.8, top_k=40, seed=3)))


if __name__ == "__main__":
    main()
