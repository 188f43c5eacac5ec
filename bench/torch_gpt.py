"""The GPT-2 family of include/synoros/gpt.hpp in PyTorch, with Hugging Face's parameter names and
layouts (Conv1D weights are [in, out]); a safetensors writer; and the peak memory of one training
step (forward + backward with all parameter gradients)."""
import ctypes
import json
import math
import struct

import torch
import torch.utils.checkpoint
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


class Conv1D(torch.nn.Module):
    def __init__(self, n_in, n_out, std):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out) * std)
        self.bias = torch.nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Block(torch.nn.Module):
    def __init__(self, width, heads, layers):
        super().__init__()
        proj_std = 0.02 / math.sqrt(2 * layers)
        self.heads = heads
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attn, self.mlp = torch.nn.Module(), torch.nn.Module()
        self.attn.c_attn, self.attn.c_proj = Conv1D(width, 3 * width, 0.02), Conv1D(width, width, proj_std)
        self.mlp.c_fc, self.mlp.c_proj = Conv1D(width, 4 * width, 0.02), Conv1D(4 * width, width, proj_std)

    def forward(self, x, mask):
        B, T, C = x.shape
        H = self.heads
        D = C // H
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = [t.reshape(B, T, H, D).permute(0, 2, 1, 3) for t in (q, k, v)]
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D)) + mask[:T, :T]
        y = (att.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(torch.nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, vocab=256, context=128, width=256, heads=4, layers=4):
        super().__init__()
        self.vocab = vocab
        self.transformer = torch.nn.Module()
        t = self.transformer
        t.wte = torch.nn.Embedding(vocab, width)
        t.wpe = torch.nn.Embedding(context, width)
        torch.nn.init.normal_(t.wte.weight, std=0.02)
        torch.nn.init.normal_(t.wpe.weight, std=0.02)
        t.h = torch.nn.ModuleList([Block(width, heads, layers) for _ in range(layers)])
        t.ln_f = torch.nn.LayerNorm(width)
        self.register_buffer("mask", torch.triu(torch.full((context, context), -1e9), 1), persistent=False)
        self.checkpoint_blocks = False  # torch.utils.checkpoint per block (activation checkpointing)

    def forward(self, tokens):
        t = self.transformer
        x = t.wte(tokens) + t.wpe.weight[:tokens.shape[1]]
        for b in t.h:
            if self.checkpoint_blocks:
                x = torch.utils.checkpoint.checkpoint(b, x, self.mask)
            else:
                x = b(x, self.mask)
        return t.ln_f(x) @ t.wte.weight.t()


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: float32 tensor} in the safetensors format."""
    header, blobs, pos = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        data = tensors[name].detach().contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [pos, pos + len(data)]}
        blobs.append(data)
        pos += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def step_peak_bytes(batch=8, context=128, preset=None, checkpoint_blocks=False, optimizer=None, clip=0.0):
    """Peak heap bytes of one training step (forward and backward) beyond the model and inputs:
    the benchmark GPT, or a named configuration at this context; optionally with each block under
    torch.utils.checkpoint. With optimizer="adamw", the whole step: clip_grad_norm_ (when clip > 0),
    AdamW's step and zero_grad, measured on the second step, so the optimizer's state, like the
    parameters, is not counted."""
    torch.manual_seed(0)
    model = make(preset, context) if preset else Gpt(context=context)
    model.checkpoint_blocks = checkpoint_blocks
    vocab = model.vocab
    tokens = torch.randint(0, vocab, (batch, context))
    targets = torch.randint(0, vocab, (batch, context))
    # The learning rate and weight decay `synoros train` starts from (train::LmConfig).
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.01) if optimizer == "adamw" else None

    def step():
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        if opt is not None:
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad(set_to_none=True)

    if opt is not None:
        step()
    base = live_bytes()
    with PeakAfterEachOp() as p:
        step()
    return p.peak - base


# ---- timing, for transformer_compare.py (same configurations as nn::GptConfig::preset)
PRESETS = {"gpt2-11m": (256, 512, 384, 6, 6), "gpt2-98m": (16384, 1024, 768, 12, 12),
           "gpt2-124m": (50257, 1024, 768, 12, 12)}


def make(preset, context=None):
    vocab, ctx, width, heads, layers = PRESETS[preset]
    torch.manual_seed(0)
    return Gpt(vocab, context or ctx, width, heads, layers)


def decode_step(model, cache, tokens, pos):
    """One token per row at position pos against a static cache [layers][2] of [B, H, context, D]:
    the new keys and values are written at pos and attention reads positions 0..pos."""
    t = model.transformer
    x = t.wte(tokens) + t.wpe.weight[pos]
    for layer, b in enumerate(t.h):
        B, _, C = x.shape
        H = b.heads
        D = C // H
        q, k, v = b.attn.c_attn(b.ln_1(x)).split(C, dim=2)
        q, k, v = [u.reshape(B, 1, H, D).permute(0, 2, 1, 3) for u in (q, k, v)]
        kc, vc = cache[layer]
        kc[:, :, pos:pos + 1] = k
        vc[:, :, pos:pos + 1] = v
        att = (q @ kc[:, :, :pos + 1].transpose(-1, -2)) * (1.0 / math.sqrt(D))
        y = (att.softmax(-1) @ vc[:, :, :pos + 1]).permute(0, 2, 1, 3).reshape(B, 1, C)
        x = x + b.attn.c_proj(y)
        x = x + b.mlp.c_proj(torch.nn.functional.gelu(b.mlp.c_fc(b.ln_2(x)), approximate="tanh"))
    return t.ln_f(x) @ t.wte.weight.t()


def median_time(fn, min_time):
    import time
    fn()
    times, start = [], time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def lora_step(batch, width, rank, compiled=False):
    """A LoRA training step on one projection, as the engine's Lora/step row: x [batch, width] (its
    gradient computed, as for a layer inside a network) through a frozen Conv1D with a rank-r
    adapter (PEFT's forward, alpha = 2r), mean squared error to a target, AdamW on the adapter."""
    torch.manual_seed(0)
    layer = Conv1D(width, width, 0.02)
    layer.requires_grad_(False)
    A = torch.nn.Parameter(torch.empty(rank, width).uniform_(-width ** -0.5, width ** -0.5))
    B = torch.nn.Parameter(torch.randn(width, rank) * 0.02)
    x = torch.randn(1, batch, width, requires_grad=True)
    target = torch.randn(1, batch, width)
    opt = torch.optim.AdamW([A, B], lr=1e-4, weight_decay=0.0)

    def loss_fn(x, A, B):
        y = layer(x) + (x @ A.t()) @ B.t() * 2.0
        return torch.nn.functional.mse_loss(y, target)
    run = torch.compile(loss_fn) if compiled else loss_fn

    def step():
        opt.zero_grad(set_to_none=True)
        x.grad = None
        run(x, A, B).backward()
        opt.step()
    return step


def time_scenario(kind, preset, a, b, min_time, compiled=False):
    """Seconds per call: prefill (a = sequence, b = batch), decode (a = the position decoded at, b = batch),
    train (a = sequence, b = batch), lora (preset = width, a = rank, b = batch). compiled: through
    torch.compile (prefill, train and lora; PyTorch 2.x), its compilation outside the timing."""
    if kind == "lora":
        return median_time(lora_step(b, int(preset), a, compiled), min_time)
    if kind == "train":
        model = make(preset, context=a)
        run = torch.compile(model) if compiled else model
        tokens = torch.randint(0, model.vocab, (b, a))
        targets = torch.randint(0, model.vocab, (b, a))

        def step():
            for p in model.parameters():
                p.grad = None
            logits = run(tokens)
            torch.nn.functional.cross_entropy(logits.reshape(-1, model.vocab), targets.reshape(-1)).backward()
        return median_time(step, min_time)
    model = make(preset)
    model.eval()
    with torch.no_grad():
        if kind == "prefill":
            tokens = torch.randint(0, model.vocab, (b, a))
            run = torch.compile(model) if compiled else model
            return median_time(lambda: run(tokens), min_time)
        if compiled:
            return None  # decoding's changing position is not compiled here
        t = model.transformer
        H, C = t.h[0].heads, t.wte.weight.shape[1]
        ctx = t.wpe.weight.shape[0]
        cache = [(torch.zeros(b, H, ctx, C // H), torch.zeros(b, H, ctx, C // H)) for _ in t.h]
        tok = torch.ones(b, 1, dtype=torch.long)
        return median_time(lambda: decode_step(model, cache, tok, a), min_time)


if __name__ == "__main__":
    import sys
    threads, min_time = int(sys.argv[1]), float(sys.argv[2])
    torch.set_num_threads(threads)
    out = {}
    for spec in sys.argv[3:]:
        kind, preset, a, b, *mode = spec.split(":")
        out[spec] = time_scenario(kind, preset, int(a), int(b), min_time, compiled=mode == ["compile"])
    print(json.dumps({"torch": torch.__version__, "times": out}))
