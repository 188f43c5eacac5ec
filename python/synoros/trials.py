"""synoros.trials: synthesized operators trained and timed inside the small ResNet on the
Fashion-MNIST proxy task (the engine's operator search)."""

from __future__ import annotations

from ._C.trials import (  # noqa: F401  (re-exported)
    Evaluation,
    Latency,
    ProxyConfig,
    evaluate,
    measure_latency,
    network,
    network_from_actions,
    paired_latency,
    resnet_conv_spec,
)
