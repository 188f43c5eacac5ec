"""synoros.models: the GPT family (GPT-2's layout and parameter names) with generation."""

from __future__ import annotations

from typing import Sequence

from . import _C
from ._C.models import GPT, GPTConfig, GPTGenerator, LoRA, LoraConfig  # noqa: F401  (re-exported)


def _generate(self: GPT, prompts: Sequence[Sequence[int]] | str | bytes, max_new_tokens: int,
              temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int = 1) -> object:
    """Continues each prompt by ``max_new_tokens`` tokens with the KV-cached decoder. A prompt
    may be a string (its UTF-8 bytes are the tokens of a byte-level model; a string comes back);
    ``temperature=0`` is greedy. The same seed gives the same tokens on every machine."""
    text = isinstance(prompts, (str, bytes))
    if text:
        data = prompts.encode() if isinstance(prompts, str) else prompts
        if self.config.vocab_size < 256:
            raise _C.Error(f"generate: a text prompt needs a byte-level model (vocab 256), this one has "
                           f"{self.config.vocab_size}")
        prompts = [list(data)]
    prompts = [list(p) for p in prompts]
    cache = self.__dict__.setdefault("_generators", {})
    gen = cache.get(len(prompts))
    if gen is None:
        gen = cache[len(prompts)] = self._generator(len(prompts))
    gen.reset()
    out = gen.generate(prompts, max_new_tokens, temperature, top_k, top_p, seed)
    if text:
        return bytes(out[0]).decode("utf-8", errors="replace")
    return out


GPT.generate = _generate  # type: ignore[attr-defined]
