import numpy as np
import pytest

import synoros


@pytest.fixture(autouse=True)
def _fresh_seed():
    synoros.manual_seed(1234)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is needed for parity tests")
