"""Data-parallel training over MPI whose bits do not depend on the number of ranks.

Start the script with a launcher, ``mpirun -np 4 python train.py``; run without one, the process
is rank 0 of 1 and computes every micro-shard itself. A step's global batch is cut into a fixed
number of micro-shards (``shards``); each rank computes the gradients of its run of micro-shards,
and the step's gradient is their sum in micro-shard order, so every rank of every world size
holds the same parameters, bit for bit, as one process. Gradients of a rank's last micro-shard
are passed on in buckets while its backward pass still runs.

    import synoros, synoros.distributed as dist
    model = ...; opt = synoros.optim.SGD(model.parameters(), lr=0.1)
    step = dist.DataParallelStep(lambda x, y: synoros.cross_entropy(model(x), y), opt, shards=8)
    for x, y in batches:                      # the same global batch on every rank
        losses = step(x, y)                   # one loss per micro-shard, on every rank
    if dist.rank() == 0:
        synoros.save(model.state_dict(), "model.safetensors")

Only rank 0 should write files. A rank whose uncaught exception ends it (in the main thread or
another) takes the whole job down (``MPI_Abort``) instead of leaving the others waiting; a rank
that leaves by ``sys.exit`` does not, so call ``os.abort`` or let the exception through on
error. A peer that stops answering inside a step is an error after ``SYNOROS_DIST_TIMEOUT``
seconds (600 by default); ``barrier()`` waits without a deadline.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import Any, Callable, Iterable

from . import _C

DataParallelTimes = _C.DataParallelTimes

__all__ = [
    "DataParallelStep",
    "DataParallelTimes",
    "barrier",
    "init",
    "is_available",
    "rank",
    "world_size",
]


def is_available() -> bool:
    """Whether this build can run over MPI (it was built against Open MPI)."""
    return bool(_C._dist_mpi_built())


_started = False


def init() -> None:
    """Initialises MPI when a launcher started this process (done by every call below)."""
    global _started
    if _started:
        return
    _C._dist_init()
    _started = True
    if _C._dist_world_size() > 1:  # an error on one rank stops all: the others would wait for it
        previous = sys.excepthook

        def abort_on_error(kind, value, tb):
            previous(kind, value, tb)
            _C._dist_abort(f"{kind.__name__}: {value}")

        sys.excepthook = abort_on_error
        previous_thread = threading.excepthook

        def abort_on_thread_error(args):
            previous_thread(args)
            if args.exc_type is not SystemExit:
                _C._dist_abort(f"{args.exc_type.__name__} in thread {args.thread.name if args.thread else '?'}: "
                               f"{args.exc_value}")

        threading.excepthook = abort_on_thread_error


def rank() -> int:
    """This process's rank (0 outside a launcher)."""
    init()
    return int(_C._dist_rank())


def world_size() -> int:
    """How many ranks train together (1 outside a launcher)."""
    init()
    return int(_C._dist_world_size())


def barrier() -> None:
    """Waits, with no deadline, until every rank has come here."""
    init()
    _C._dist_barrier()


class DataParallelStep:
    """One optimizer step over a global batch cut into ``shards`` micro-shards.

    ``fn(*micro_shard_tensors)`` returns the loss of one micro-shard (or ``(loss, extra...)``); it
    is traced once, on the first call, for the micro-shards' shapes. Calling the step with the
    global batch's arrays (each one's first axis divisible by ``shards``; the same arrays on every
    rank) computes this rank's micro-shards, folds the gradients across ranks, applies
    ``optimizer`` and returns every micro-shard's loss (a list of ``shards`` floats) on every
    rank. The gradient is the mean over micro-shards, so with equal micro-shards it is the
    global batch's mean gradient. ``buffers`` (e.g. ``model.buffers()``: batch-norm running
    statistics) follow micro-shard 0 and are sent to every rank after each step.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        optimizer: Any,
        shards: int,
        buffers: Iterable[Any] = (),
        bucket_floats: int = 1 << 20,
    ) -> None:
        init()
        self._step = _C.DataParallelStep(fn, optimizer, int(shards), list(buffers), int(bucket_floats))

    def __call__(self, *arrays: Any) -> list[float]:
        return self._step(*arrays)

    @property
    def shards(self) -> int:
        return int(self._step.shards)

    @property
    def local_shards(self) -> tuple[int, int]:
        """The micro-shards ``[first, last)`` this rank computes."""
        return tuple(self._step.local_shards)

    @property
    def times(self) -> DataParallelTimes:
        """Seconds spent computing, communicating and updating, summed over the steps run."""
        return self._step.times

    @property
    def overlap(self) -> bool:
        """Whether gradients are passed on while the backward pass runs (the same bits either way)."""
        return bool(self._step.overlap)

    @overlap.setter
    def overlap(self, on: bool) -> None:
        self._step.overlap = bool(on)


atexit.register(_C._dist_finalize)
