"""Activation checkpointing, as torch.utils.checkpoint."""

from __future__ import annotations

from typing import Any, Callable

from .. import _C


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               preserve_rng_state: bool = True, **kwargs: Any) -> Any:
    """Runs ``function(*args, **kwargs)`` now, but ``backward()`` keeps none of the values it
    computes except its results: what the gradients need of them is computed again from the
    inputs, right before it is needed. Memory for a second forward pass of ``function``; the
    gradients are the same bits. Works eagerly and inside ``synoros.compile``.

    ``use_reentrant`` and ``preserve_rng_state`` are accepted for code written for PyTorch and
    change nothing: the recomputation is part of the one traced graph, and random ops draw from
    seeds recorded with them, so they draw the same values again."""
    del use_reentrant, preserve_rng_state
    _C._recompute_enter()
    try:
        return function(*args, **kwargs)
    finally:
        _C._recompute_exit()
