"""synoros.nn: modules with PyTorch's names, arguments, parameter names and initialisation.

The layers (``Linear``, ``Conv2d``, ``LayerNorm``, ...) are the engine's own modules; ``Module``
is for models written in Python, and composes both kinds.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from typing import Any, Iterator, Optional

from .. import _C
from .._C import Tensor
from .._C.nn import (  # noqa: F401  (re-exported)
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    GELU,
    LayerNorm,
    Linear,
    MaxPool2d,
    ReLU,
    ResNetMini,
    SiLU,
)
from . import functional  # noqa: F401


def Parameter(data: Tensor, requires_grad: bool = True) -> Tensor:
    """torch.nn.Parameter: the tensor itself, marked to require a gradient. A Module registers
    every tensor attribute that requires a gradient as a parameter."""
    return data.requires_grad_(requires_grad)


class Module(abc.ABC):
    """torch.nn.Module for models written in Python. Tensor attributes that require a gradient
    are parameters, those given to ``register_buffer`` are buffers, and Module attributes (Python
    modules or the engine's layers) are children; names are dotted as in PyTorch."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", {})  # ordered, and quicker to walk than an OrderedDict
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError("Module.__init__() must be called before assigning attributes")
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        if isinstance(value, Tensor) and value.requires_grad:
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        object.__setattr__(self, name, tensor)
        self._buffers[name] = tensor

    def register_parameter(self, name: str, tensor: Tensor) -> None:
        self.__setattr__(name, tensor.requires_grad_(True))

    def add_module(self, name: str, module: Any) -> None:
        self.__setattr__(name, module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def named_children(self) -> Iterator[tuple[str, Any]]:
        yield from self._modules.items()

    def children(self) -> Iterator[Any]:
        for _, m in self.named_children():
            yield m

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        yield from _named(self, prefix, "named_parameters")

    def parameters(self) -> Iterator[Tensor]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        yield from _named(self, prefix, "named_buffers")

    def buffers(self) -> Iterator[Tensor]:
        for _, b in self.named_buffers():
            yield b

    def state_dict(self) -> "OrderedDict[str, Tensor]":
        """Parameters and buffers by dotted name (PyTorch's names for the same model)."""
        return state_dict(self)

    def load_state_dict(self, state: dict[str, Any], strict: bool = True) -> None:
        load_state_dict(self, state, strict)

    def train(self, mode: bool = True) -> "Module":
        object.__setattr__(self, "training", mode)
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, m in self.named_children():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else f"{type(self).__name__}()"


Module.register(_C.nn.Module)  # the engine's layers are Modules too (isinstance)


def _named(m: Any, prefix: str, which: str) -> Iterator[tuple[str, Tensor]]:
    if not isinstance(m, Module) or isinstance(m, _C.nn.Module):
        for name, t in getattr(m, which)():
            yield prefix + name, t
        return
    yield from ((prefix + k, v) for k, v in (m._parameters if which == "named_parameters" else m._buffers).items())
    for name, child in m._modules.items():
        yield from _named(child, f"{prefix}{name}.", which)


def state_dict(m: Any) -> "OrderedDict[str, Tensor]":
    out: OrderedDict[str, Tensor] = OrderedDict(_named(m, "", "named_parameters"))
    out.update(_named(m, "", "named_buffers"))
    return out


def load_state_dict(m: Any, state: dict[str, Any], strict: bool = True) -> None:
    """Copies values into the module's parameters and buffers in place (names as state_dict's)."""
    from .. import tensor as make_tensor

    own = state_dict(m)
    if strict:
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if missing or unexpected:
            raise _C.Error(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    for name, target in own.items():
        if name in state:
            v = state[name]
            target.copy_(v if isinstance(v, Tensor) else make_tensor(v, dtype=target.dtype))


# The engine's layers get the Python-side conveniences.
for _cls in (_C.nn.Module,):
    _cls.parameters = lambda self: (p for _, p in self.named_parameters())  # type: ignore[attr-defined]
    _cls.buffers = lambda self: (b for _, b in self.named_buffers())  # type: ignore[attr-defined]
    _cls.state_dict = state_dict  # type: ignore[attr-defined]
    _cls.load_state_dict = load_state_dict  # type: ignore[attr-defined]
    _cls.zero_grad = lambda self: [p.zero_grad() for p in self.parameters()] and None  # type: ignore


class Sequential(Module):
    """Modules applied in order; children named 0, 1, ... as in PyTorch."""

    def __init__(self, *modules: Any) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, input: Any) -> Any:
        for m in self._modules.values():
            input = m(input)
        return input

    # forward() inlined: one Python call less per step. A subclass with its own forward is
    # called through Module.__call__ (any arguments), and a forward set on an instance is called.
    def __call__(self, input: Any) -> Any:
        if "forward" in self.__dict__:
            return self.forward(input)
        for m in self._modules.values():
            input = m(input)
        return input

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.forward is not Sequential.forward and "__call__" not in cls.__dict__:
            cls.__call__ = Module.__call__  # type: ignore[method-assign]

    def __getitem__(self, i: int) -> Any:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def append(self, m: Any) -> "Sequential":
        self.add_module(str(len(self._modules)), m)
        return self


class ModuleList(Module):
    def __init__(self, modules: Any = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, m: Any) -> "ModuleList":
        self.add_module(str(len(self._modules)), m)
        return self

    def __getitem__(self, i: int) -> Any:
        return list(self._modules.values())[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __len__(self) -> int:
        return len(self._modules)


class Identity(Module):
    def forward(self, x: Any) -> Any:
        return x


class MSELoss(Module):
    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return _C.mse_loss(input, target)


class CrossEntropyLoss(Module):
    def __init__(self, weight: Optional[Tensor] = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__()
        if weight is not None:
            self.register_buffer("weight", weight)
        else:
            self.weight = None
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return _C.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction,
                                label_smoothing=self.label_smoothing)
