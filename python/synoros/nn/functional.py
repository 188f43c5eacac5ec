"""synoros.nn.functional: torch.nn.functional's names over the engine's ops."""

from __future__ import annotations

from .._C import (  # noqa: F401  (re-exported)
    adaptive_avg_pool2d,
    avg_pool2d,
    batch_norm,
    conv2d,
    cross_entropy,
    dropout,
    embedding,
    flatten,
    linear,
    max_pool2d,
    mse_loss,
    scaled_dot_product_attention,
    silu,
)
from .._C import Tensor
from .. import _C


def relu(input: Tensor) -> Tensor:
    return input.relu()


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    if approximate == "tanh":
        return input.gelu_tanh()
    if approximate != "none":
        raise _C.Error(f'gelu: approximate must be "none" or "tanh", got "{approximate}"')
    return input.gelu()


def sigmoid(input: Tensor) -> Tensor:
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    return input.tanh()


def softmax(input: Tensor, dim: int) -> Tensor:
    return input.softmax(dim)


def log_softmax(input: Tensor, dim: int) -> Tensor:
    return input.log_softmax(dim)


def layer_norm(input: Tensor, normalized_shape: object, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    shape = tuple(normalized_shape) if hasattr(normalized_shape, "__len__") else (normalized_shape,)
    return _C.layer_norm(input, list(shape), weight, bias, eps)
