"""Activation checkpointing, as torch.utils.checkpoint."""

from __future__ import annotations

from typing import Any, Callable

from .. import _C


def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Runs ``function(*args, **kwargs)`` now, but ``backward()`` keeps none of the values it
    computes except its results: what the gradients need of them is computed again from the
    inputs, right before it is needed. Memory for a second forward pass of ``function``; the
    gradients are the same bits. Works eagerly and inside ``synoros.compile``."""
    _C._recompute_enter()
    try:
        return function(*args, **kwargs)
    finally:
        _C._recompute_exit()
