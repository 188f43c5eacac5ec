"""Utilities, as torch.utils: activation checkpointing."""

from . import checkpoint as checkpoint  # noqa: F401  (synoros.utils.checkpoint.checkpoint)
