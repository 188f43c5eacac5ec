"""The same GPT-style model as include/synoros/gpt.hpp, in PyTorch, and the peak memory of one
training step (forward + backward with all parameter gradients)."""
import ctypes
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def live_bytes():
    m = _libc.mallinfo2()
    return m.uordblks + m.hblkhd


class PeakAfterEachOp(TorchDispatchMode):
    """Samples the heap's live bytes after every ATen op (forward and backward)."""

    def __init__(self):
        super().__init__()
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, live_bytes())
        return out


class Gpt(torch.nn.Module):
    def __init__(self, vocab=256, context=128, width=256, heads=4, layers=4):
        super().__init__()
        self.h, self.c = heads, width
        self.tok = torch.nn.Parameter(torch.randn(vocab, width) * 0.02)
        self.pos = torch.nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
            b.qkv, b.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
            b.fc, b.out = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
            self.blocks.append(b)
        self.lnf = torch.nn.LayerNorm(width)
        self.register_buffer("mask", torch.triu(torch.full((context, context), -1e9), 1))

    def forward(self, tokens):
        B, T = tokens.shape
        C, H = self.c, self.h
        D = C // H
        x = self.tok[tokens] + self.pos
        for b in self.blocks:
            q, k, v = b.qkv(b.ln1(x)).split(C, dim=2)
            q, k, v = [t.reshape(B, T, H, D).permute(0, 2, 1, 3) for t in (q, k, v)]
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D)) + self.mask
            y = (att.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
            x = x + b.proj(y)
            x = x + b.out(torch.nn.functional.gelu(b.fc(b.ln2(x))))
        return self.lnf(x) @ self.tok.t()


def step_peak_bytes(batch=8, context=128):
    torch.manual_seed(0)
    model = Gpt(context=context)
    tokens = torch.randint(0, 256, (batch, context))
    targets = torch.randint(0, 256, (batch, context))
    base = live_bytes()
    with PeakAfterEachOp() as p:
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        loss.backward()
    return p.peak - base
