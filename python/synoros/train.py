"""synoros.train: the engine's trainers, the loops behind ``synoros train`` and ``synoros finetune``:
an image classifier on Fashion-MNIST, and a GPT on the fortunes or any text file (AdamW, warmup
and cosine decay, gradient clipping and accumulation, activation checkpointing, LoRA
fine-tuning). Both resume from their checkpoints bit for bit."""

from ._C.train import ClassifierTrainer, LmTrainer  # noqa: F401  (re-exported)
