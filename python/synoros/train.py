"""synoros.train: the engine's language-model trainer, the loop behind ``synoros train`` and
``synoros finetune`` (AdamW, warmup and cosine decay, gradient clipping and accumulation,
activation checkpointing, LoRA fine-tuning), on the fortunes or any text file."""

from ._C.train import LmTrainer  # noqa: F401  (re-exported)
