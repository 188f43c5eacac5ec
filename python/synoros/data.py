"""synoros.data: the Fashion-MNIST data set, a seeded, deterministic batch loader, and byte-level
text corpora (fortunes or any file) with the language-model trainer's windows."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from . import _C
from ._C import TextWindows  # noqa: F401  (re-exported)


class FashionMNIST:
    """Fashion-MNIST (Debian's dataset-fashion-mnist by default) as NumPy arrays: images
    [N, 1, 28, 28] float32 in [0, 1], normalized when ``normalize`` is set, and labels [N] int64."""

    mean, std = 0.2860, 0.3530

    def __init__(self, root: str = "", train: bool = True, limit: int | None = None, normalize: bool = True) -> None:
        self.images, self.labels = _C.load_fashion_mnist(root, train, limit)
        if normalize:
            self.images = (self.images - np.float32(self.mean)) / np.float32(self.std)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.int64]:
        return self.images[i], self.labels[i]


class DataLoader:
    """Batches of (images, labels) arrays; with ``shuffle``, a fresh permutation every epoch from
    a seeded generator (the same seed gives the same batches everywhere)."""

    def __init__(self, dataset: FashionMNIST, batch_size: int = 64, shuffle: bool = True,
                 drop_last: bool = False, seed: int = 0) -> None:
        if batch_size < 1:
            raise _C.Error(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        self.dataset, self.batch_size, self.shuffle, self.drop_last, self.seed = (
            dataset, batch_size, shuffle, drop_last, seed)
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = len(self.dataset)
        order = (np.random.Generator(np.random.PCG64([self.seed, self.epoch])).permutation(n)
                 if self.shuffle else np.arange(n))
        self.epoch += 1
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield self.dataset.images[idx], self.dataset.labels[idx]


class TextCorpus:
    """A text as byte tokens (vocabulary 256): ``train`` and ``val`` (bytes), the ``files`` read
    and, for fortunes, how many ``fortunes`` it holds."""

    def __init__(self, d: dict) -> None:
        self.files: list[str] = d["files"]
        self.fortunes: int = d["fortunes"]
        self.train: bytes = d["train"]
        self.val: bytes = d["val"]

    def __repr__(self) -> str:
        return (f"TextCorpus({len(self.files)} files, {self.fortunes} fortunes, {len(self.train)} training "
                f"and {len(self.val)} validation bytes)")


def load_fortunes(dir: str = "", val_fraction: float = 0.1) -> TextCorpus:
    """Every fortune file of ``dir`` ('' : $SYNOROS_FORTUNES_DIR, else Debian's fortunes) in name
    order; the last ``val_fraction`` of the bytes, from a fortune boundary on, is the validation
    split."""
    return TextCorpus(_C.load_fortunes(dir, val_fraction))


def load_text_file(path: str, val_fraction: float = 0.1) -> TextCorpus:
    """Any file's bytes; the last ``val_fraction``, from a line start on, is the validation split."""
    return TextCorpus(_C.load_text_file(path, val_fraction))
