"""Synoros from Python: a PyTorch-shaped front end over the Synoros engine.

Tensors are lazy: operations are recorded and run as one planned, fused graph when a value is
read (``item()``, ``numpy()``, ``print``), or replayed as a whole compiled step
(``synoros.compile``). The same seeds give the same bits on every machine.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import _C
from ._C import (  # noqa: F401  (re-exported)
    Error,
    Tensor,
    adaptive_avg_pool2d,
    arange,
    cat,
    clear_plan_cache,
    cross_entropy,
    einsum,
    embedding,
    fast_mode,
    get_num_threads,
    is_grad_enabled,
    layer_norm,
    live_buffer_bytes,
    manual_seed,
    measure_peak,
    memory_limit,
    mse_loss,
    plan_cache_bytes,
    plan_cache_size,
    realize,
    set_fast_mode,
    set_memory_limit,
    set_num_threads,
    set_plan_cache_limit,
    set_winograd_convolutions,
    stack,
    uniform,
    where,
    winograd_convolutions,
)
from ._C import dtype

float32 = dtype.float32
float64 = dtype.float64
int32 = dtype.int32
int64 = dtype.int64
float = float32  # noqa: A001  (torch.float)
double = float64
long = int64

_NP_TO_DTYPE = {
    np.dtype(np.float32): float32,
    np.dtype(np.float64): float64,
    np.dtype(np.int32): int32,
    np.dtype(np.int64): int64,
}
_DTYPE_TO_NP = {v: k for k, v in _NP_TO_DTYPE.items()}


def _as_array(data: Any, dtype: _C.dtype | None) -> np.ndarray:
    if isinstance(data, Tensor):
        data = data.numpy()
    elif hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
        data = np.from_dlpack(data)
    a = np.asarray(data)
    if dtype is not None:
        a = a.astype(_DTYPE_TO_NP[dtype], copy=False)
    elif a.dtype.kind == "f" and (a.dtype != np.float64 or not isinstance(data, np.ndarray)):
        a = a.astype(np.float32, copy=False)  # Python floats become float32, as in torch.tensor
    elif a.dtype.kind in "iub" and a.dtype not in (np.int32, np.int64):
        a = a.astype(np.int64)
    if a.dtype not in _NP_TO_DTYPE:
        raise Error(f"tensor: unsupported element type {a.dtype}; synoros holds float32, float64, int32, int64")
    return np.ascontiguousarray(a)


def tensor(data: Any, dtype: _C.dtype | None = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor with a copy of ``data`` (nested lists, NumPy arrays, tensors)."""
    return _C.tensor_from_array(_as_array(data, dtype), share=False, requires_grad=requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor over the array's memory when the array is writable and its layout allows
    (C-contiguous, 64-byte aligned, a multiple of 64 bytes, as PyTorch's CPU tensors of such
    sizes are); otherwise over a copy. ``synoros.shares_memory`` tells which. Updates to the
    tensor (``copy_``, an optimizer step) then write into the array."""
    a = _as_array(array, None)
    return _C.tensor_from_array(a, share=bool(a.flags.writeable))


def from_dlpack(obj: Any) -> Tensor:
    """A tensor from any DLPack exporter (a PyTorch CPU tensor, say), sharing its memory when the
    layout allows (see ``from_numpy``)."""
    return _C.tensor_from_array(obj, share=True)


def shares_memory(t: Tensor, array: Any) -> bool:
    """Whether ``t`` holds its values in ``array``'s memory."""
    return _C.shares_memory(t, np.asarray(array) if not hasattr(array, "__dlpack__") else array)


def _dtype_arg(dtype: _C.dtype | None) -> _C.dtype:
    return float32 if dtype is None else dtype


def _shape(size: Sequence[int]) -> tuple[int, ...]:
    if len(size) == 1 and not isinstance(size[0], int):
        return tuple(size[0])
    return tuple(size)


def zeros(*size: int, dtype: _C.dtype | None = None, requires_grad: bool = False) -> Tensor:
    return _C.zeros(_shape(size), _dtype_arg(dtype)).requires_grad_(requires_grad)


def ones(*size: int, dtype: _C.dtype | None = None, requires_grad: bool = False) -> Tensor:
    return _C.ones(_shape(size), _dtype_arg(dtype)).requires_grad_(requires_grad)


def full(size: Sequence[int], fill_value: float, dtype: _C.dtype | None = None,
         requires_grad: bool = False) -> Tensor:
    return _C.full(tuple(size), fill_value, _dtype_arg(dtype)).requires_grad_(requires_grad)


def zeros_like(t: Tensor) -> Tensor:
    return _C.zeros(t.shape, t.dtype)


def ones_like(t: Tensor) -> Tensor:
    return _C.ones(t.shape, t.dtype)


def randn(*size: int, seed: int | None = None, requires_grad: bool = False) -> Tensor:
    """Normal samples from a seeded generator: the same seed gives the same bits everywhere
    (without one, the next seed of the sequence ``manual_seed`` restarts)."""
    return _C.randn(_shape(size), seed=seed).requires_grad_(requires_grad)


def _unary(name: str) -> Callable[[Tensor], Tensor]:
    def f(input: Tensor) -> Tensor:
        return getattr(input, name)()
    f.__name__ = name
    f.__doc__ = f"torch.{name}: elementwise, as Tensor.{name}()."
    return f


for _name in ("exp", "log", "sqrt", "rsqrt", "abs", "relu", "sigmoid", "tanh", "neg"):
    globals()[_name] = _unary(_name)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return a.matmul(b)


def softmax(input: Tensor, dim: int) -> Tensor:
    return input.softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:
    return input.log_softmax(dim)


def maximum(a: Tensor, b: Tensor) -> Tensor:
    return a.maximum(b)


def minimum(a: Tensor, b: Tensor) -> Tensor:
    return a.minimum(b)


def argmax(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return input.argmax(dim, keepdim)


def argmin(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return input.argmin(dim, keepdim)


def cumsum(input: Tensor, dim: int) -> Tensor:
    return input.cumsum(dim)


def cumprod(input: Tensor, dim: int) -> Tensor:
    return input.cumprod(dim)


def prod(input: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return input.prod(dim, keepdim)


def gather(input: Tensor, dim: int, index: Tensor) -> Tensor:
    return input.gather(dim, index)


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    return input.index_select(dim, index)


# --- Gradient mode -------------------------------------------------------------------------


class _GradMode(contextlib.ContextDecorator):
    """A context manager and decorator that sets gradient recording on this thread and restores
    the previous mode on exit (nested and recursive uses each restore their own)."""

    mode = True

    def __init__(self) -> None:
        self._prev: list[bool] = []

    def __enter__(self) -> None:
        self._prev.append(_C.is_grad_enabled())
        _C.set_grad_enabled(self.mode)

    def __exit__(self, *exc: object) -> None:
        _C.set_grad_enabled(self._prev.pop())

    def _recreate_cm(self) -> "_GradMode":
        return type(self)()


class no_grad(_GradMode):
    """torch.no_grad: ops inside record no gradient path (their results never require grad)."""

    mode = False


class enable_grad(_GradMode):
    """torch.enable_grad: gradient recording on inside, whatever it was outside."""

    mode = True


class set_grad_enabled(_GradMode):
    """torch.set_grad_enabled(mode): called, it sets the mode at once; used with ``with``, the
    previous mode comes back on exit."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self.mode = bool(mode)
        self._prev.append(_C.is_grad_enabled())
        _C.set_grad_enabled(self.mode)

    def __enter__(self) -> None:  # the mode was set when called
        pass

    def __exit__(self, *exc: object) -> None:
        if self._prev:
            _C.set_grad_enabled(self._prev.pop())

    def _recreate_cm(self) -> "set_grad_enabled":
        return self


# --- Tensor conveniences written in Python -------------------------------------------------


def _getitem(self: Tensor, index: Any) -> Tensor:
    """Basic indexing (integers, slices with step 1, ``None`` and ``...``) and indexing by one
    integer tensor or list of integers (rows of the first axis)."""
    if isinstance(index, list) or (isinstance(index, np.ndarray) and index.dtype.kind in "iub"):
        a = np.asarray(index)
        if a.dtype.kind == "b":
            raise IndexError("synoros: boolean masks are not supported as indices (use where)")
        if a.size and a.dtype.kind not in "iu":
            raise IndexError(f"synoros: list indices must be integers, got {a.dtype}")
        a = a.astype(np.int64)
        if self.ndim:
            a = np.where(a < 0, a + self.shape[0], a)  # negative entries count from the end, as PyTorch
        index = tensor(a)
    if isinstance(index, Tensor):
        if index.dtype not in (int64, int32):
            raise IndexError(f"synoros: tensors used as indices must be integer tensors, got {index.dtype}")
        return self._index(index)
    if not isinstance(index, tuple):
        index = (index,)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis")
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
    if n_real > self.ndim:
        raise IndexError(f"too many indices for a tensor of dimension {self.ndim}")
    expanded: list[Any] = []
    for i in index:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (self.ndim - n_real))
        else:
            expanded.append(i)
    out = self
    axis = 0
    for i in expanded:
        if i is None:
            out = out.unsqueeze(axis)
            axis += 1
        elif isinstance(i, slice):
            size = out.shape[axis]
            start, stop, step = i.indices(size)
            if step != 1:
                raise IndexError("synoros: slices with a step other than 1 are not supported")
            if (start, stop) != (0, size):
                out = out.slice(axis, start, max(start, stop))
            axis += 1
        elif isinstance(i, (int, np.integer)):
            size = out.shape[axis]
            j = int(i) + size if i < 0 else int(i)
            if not 0 <= j < size:
                raise IndexError(f"index {int(i)} is out of bounds for dimension {axis} with size {size}")
            out = out.slice(axis, j, j + 1).squeeze(axis)
        else:
            raise IndexError(f"synoros: unsupported index {i!r} (integers, slices, None and ... are)")
    return out


def _repr(self: Tensor) -> str:
    """PyTorch's format (the C++ printer); a computed tensor behind a leaf that requires a
    gradient says so too."""
    s = self._str().replace(", dtype=", ", dtype=synoros.")
    if self.requires_grad and not self.is_leaf:
        s = s[:-1] + ", requires_grad=True)"
    return s


def _array(self: Tensor, dtype: Any = None, copy: Any = None) -> np.ndarray:
    a = self.numpy()
    if dtype is not None:
        a = a.astype(dtype)
    return np.array(a, copy=True) if copy else a


Tensor.__getitem__ = _getitem  # type: ignore[method-assign]
Tensor.__repr__ = _repr  # type: ignore[method-assign]
Tensor.__array__ = _array  # type: ignore[attr-defined]
Tensor.tolist = lambda self: self.numpy().tolist()  # type: ignore[attr-defined]
Tensor.__float__ = lambda self: builtins.float(self.item())  # type: ignore[attr-defined]
Tensor.__int__ = lambda self: builtins.int(self.item())  # type: ignore[attr-defined]
Tensor.__bool__ = lambda self: builtins.bool(self.item())  # type: ignore[attr-defined]
Tensor.__hash__ = object.__hash__  # type: ignore[assignment]
Tensor.__eq__ = lambda self, o: self.eq(o)  # type: ignore[assignment,method-assign]
Tensor.__ne__ = lambda self, o: 1.0 - self.eq(o)  # type: ignore[assignment,method-assign]
Tensor.__le__ = lambda self, o: (self < o) + self.eq(o)  # type: ignore[method-assign,operator]
Tensor.__ge__ = lambda self, o: (self > o) + self.eq(o)  # type: ignore[method-assign,operator]
Tensor.max = lambda self, dim=None, keepdim=False: self.amax(dim, keepdim)  # type: ignore[attr-defined]
Tensor.min = lambda self, dim=None, keepdim=False: self.amin(dim, keepdim)  # type: ignore[attr-defined]


# --- compile -------------------------------------------------------------------------------


def compile(fn: Callable[..., Any] | None = None) -> Any:
    """Traces ``fn`` (tensors in, a tensor or tensors out) once per argument signature, with
    its backward pass and optimizer updates, into one planned step; calls replay it. Parameter
    updates inside (``optimizer.step()``) persist across calls. Usable as ``@synoros.compile``."""
    if fn is None:
        return compile
    return _C.CompiledFunction(fn, _convert_arg)


def _convert_arg(a: Any) -> np.ndarray:
    return _as_array(a, None)


# --- checkpoints ---------------------------------------------------------------------------


def save(state: Any, path: str, metadata: dict[str, str] | None = None) -> None:
    """Writes a state dict (name -> tensor or array; or a module, whose state_dict is taken)
    to a safetensors file."""
    if hasattr(state, "state_dict"):
        state = state.state_dict()
    items = [(k, v if isinstance(v, Tensor) else tensor(v)) for k, v in state.items()]
    _C.save_safetensors(items, str(path), metadata or {})


def load(path: str, with_metadata: bool = False) -> Any:
    """The tensors of a safetensors file by name (and its metadata, when asked)."""
    tensors, md = _C.load_safetensors(str(path))
    state = dict(tensors)
    return (state, md) if with_metadata else state


# Cached plans hold tensors that may share memory with Python arrays: release them while the
# interpreter is still there.
atexit.register(_C.clear_plan_cache)

from . import nn, optim, data, models, synth, trials, utils, distributed, train  # noqa: E402

__all__ = [name for name in globals() if not name.startswith("_")]
