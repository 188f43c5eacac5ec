"""Activation checkpointing: synoros.utils.checkpoint and GPT.checkpoint_blocks give the same
gradients, bit for bit, as the same computation without it."""

import numpy as np

import synoros
from synoros.models import GPT, GPTConfig
from synoros.utils.checkpoint import checkpoint


def test_checkpointed_gradients_are_the_same_bits():
    r = np.random.default_rng(3)
    a0 = r.standard_normal((6, 10)).astype(np.float32)
    b0 = r.standard_normal((10, 10)).astype(np.float32)

    def grads(checkpointed):
        a = synoros.tensor(a0, requires_grad=True)
        b = synoros.tensor(b0, requires_grad=True)

        def body(x, w):
            u = synoros.sigmoid(x @ w)
            return u * synoros.tanh(u), u.exp()

        y, z = checkpoint(body, a, b) if checkpointed else body(a, b)
        loss = (y * z).sum() + y.mean()
        loss.backward()
        return loss.item(), a.grad.numpy().copy(), b.grad.numpy().copy()

    with_, without = grads(True), grads(False)
    assert with_[0] == without[0]
    for g, h in zip(with_[1:], without[1:]):
        assert g.tobytes() == h.tobytes()


def test_a_gpt_with_checkpointed_blocks_trains_the_same_bits():
    cfg = GPTConfig(vocab_size=32, block_size=8, n_embd=16, n_head=2, n_layer=2)
    seq = np.random.default_rng(0).integers(0, 32, (4, 9))
    x, y = synoros.tensor(seq[:, :-1]), synoros.tensor(seq[:, 1:])

    def run(checkpointed):
        m = GPT(cfg, seed=1)
        m.checkpoint_blocks = checkpointed
        opt = synoros.optim.AdamW(m.parameters(), lr=3e-3)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = m.loss(x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.numpy().tobytes() for p in m.parameters()]

    assert run(True) == run(False)
