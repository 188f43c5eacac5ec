"""synoros.synth: the operator synthesizer (after Syno): specs, enumeration, random search and
MCTS over dimension-level primitives, with PyTorch export of what it finds."""

from __future__ import annotations

from typing import Any

from ._C.synth import Operator, Options, Spec, Synthesizer  # noqa: F401  (re-exported)


def load_pytorch_module(source: str, class_name: str = "SynthOp") -> Any:
    """The class defined by a ``Synthesizer.pytorch_module`` source (needs PyTorch)."""
    scope: dict[str, Any] = {}
    exec(compile(source, f"<synoros {class_name}>", "exec"), scope)
    return scope[class_name]
