"""synoros.optim: SGD, Adam and AdamW with PyTorch's arguments and update rules."""

from __future__ import annotations

from typing import Any, Iterable

from . import _C
from ._C import Tensor
from ._C.optim import SGD, AdamW, Optimizer, warmup_cosine  # noqa: F401  (re-exported)


def Adam(params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
         eps: float = 1e-8, weight_decay: float = 0.0) -> AdamW:
    """torch.optim.Adam without weight decay (the same update as AdamW with weight_decay=0)."""
    if weight_decay != 0:
        raise _C.Error("Adam: L2 weight decay folded into the gradient is not built; use AdamW (decoupled decay)")
    return AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=0.0)


def _state_dict(self: Optimizer) -> dict[str, Any]:
    """The optimizer's state: its tensors by name, the step count and the learning rate."""
    return {"state": dict(self.state()), "steps": self.steps, "lr": self.lr}


def _load_state_dict(self: Optimizer, state: dict[str, Any]) -> None:
    from . import tensor

    own = dict(self.state())
    given = state["state"]
    if set(own) != set(given):
        raise _C.Error(f"optimizer load_state_dict: state names {sorted(given)} do not match {sorted(own)}")
    for k, t in own.items():
        v = given[k]
        t.copy_(v if isinstance(v, Tensor) else tensor(v, dtype=t.dtype))
    self.restore_steps(int(state["steps"]))
    self.lr = float(state["lr"])


Optimizer.state_dict = _state_dict  # type: ignore[attr-defined]
Optimizer.load_state_dict = _load_state_dict  # type: ignore[attr-defined]
