"""synoros.trials: synthesized operators trained and timed inside the small ResNet on the
Fashion-MNIST proxy task, or in a GPT's projections on text (the engine's operator search)."""

from __future__ import annotations

from ._C.trials import (  # noqa: F401  (re-exported)
    Evaluation,
    Latency,
    LmEvaluation,
    LmProxyConfig,
    ProxyConfig,
    evaluate,
    evaluate_lm,
    gpt,
    gpt_linear_spec,
    measure_latency,
    network,
    network_from_actions,
    paired_latency,
    resnet_conv_spec,
)
