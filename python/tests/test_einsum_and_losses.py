"""einsum's notation and cross_entropy's forms against PyTorch: values and gradients."""

import numpy as np
import pytest

import synoros
from synoros.nn import functional as F


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="PyTorch is needed for parity tests")


@pytest.mark.parametrize("spec,shapes", [
    ("ij,jk", [(3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("b i j, b j k -> b i k", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->b", [(3, 4, 4)]),
    ("i,ij,j->", [(3,), (3, 4), (4,)]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 2), (2, 3)]),
    ("ij,kj->ikj", [(3, 1), (2, 4)]),
])
def test_einsum_notation_matches_pytorch(torch, rng, spec, shapes):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ss = [synoros.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    ys, yt = synoros.einsum(spec, *ss), torch.einsum(spec, *ts)
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(yt.shape).astype(np.float32)
    (ys * synoros.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    for s, t in zip(ss, ts):
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("form", ["2d", "spatial", "probabilities"])
@pytest.mark.parametrize("weighted", [False, True])
def test_cross_entropy_forms_match_pytorch(torch, rng, reduction, smoothing, form, weighted):
    shape = (6, 5) if form == "2d" else (3, 5, 2, 4)
    logits = rng.standard_normal(shape).astype(np.float32) * 3
    if form == "probabilities":
        p = rng.random(shape).astype(np.float32)
        target = p / p.sum(axis=1, keepdims=True)
    else:
        target = rng.integers(0, 5, size=(shape[0],) + shape[2:])
        target.flat[::4] = -100  # PyTorch's default ignore_index
    s = synoros.tensor(logits, requires_grad=True)
    t = torch.tensor(logits, requires_grad=True)
    w = (rng.random(5) + 0.25).astype(np.float32)
    sw = synoros.tensor(w, requires_grad=True) if weighted else None
    # PyTorch differentiates the weights only for probability targets; elsewhere the weights'
    # gradient is checked against central differences of PyTorch's float64 loss.
    tw = torch.tensor(w, requires_grad=weighted and form == "probabilities") if weighted else None
    ys = F.cross_entropy(s, synoros.tensor(target), sw, reduction=reduction, label_smoothing=smoothing)
    yt = torch.nn.functional.cross_entropy(t, torch.tensor(target), tw, reduction=reduction, label_smoothing=smoothing)
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    g = rng.standard_normal(yt.shape).astype(np.float32)
    (ys * synoros.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-6)
    if weighted and tw.requires_grad:
        np.testing.assert_allclose(sw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-6)
    elif weighted:
        def loss64(wk):
            y = torch.nn.functional.cross_entropy(torch.tensor(logits, dtype=torch.float64), torch.tensor(target),
                                                  torch.tensor(wk), reduction=reduction, label_smoothing=smoothing)
            return float((y * torch.tensor(g, dtype=torch.float64)).sum())
        h, want = 1e-4, []
        for k in range(5):
            up, down = w.astype(np.float64), w.astype(np.float64)
            up[k] += h
            down[k] -= h
            want.append((loss64(up) - loss64(down)) / (2 * h))
        np.testing.assert_allclose(sw.grad.numpy(), want, rtol=1e-4, atol=1e-5)


def test_cross_entropy_loss_module_and_errors(torch, rng):
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    target = np.array([0, 2, 1, 2])
    loss = synoros.nn.CrossEntropyLoss(ignore_index=2)(synoros.tensor(logits), synoros.tensor(target))
    want = torch.nn.CrossEntropyLoss(ignore_index=2)(torch.tensor(logits), torch.tensor(target))
    assert abs(float(loss) - float(want)) < 1e-5
    w = np.array([0.5, 2.0, 1.0], dtype=np.float32)
    loss = synoros.nn.CrossEntropyLoss(synoros.tensor(w))(synoros.tensor(logits), synoros.tensor(target))
    want = torch.nn.CrossEntropyLoss(torch.tensor(w))(torch.tensor(logits), torch.tensor(target))
    assert abs(float(loss) - float(want)) < 1e-5
    with pytest.raises(synoros.Error, match=r"weight must be a f32 tensor .* of shape \[3\]"):
        F.cross_entropy(synoros.tensor(logits), synoros.tensor(target), synoros.tensor(w[:2]))
    with pytest.raises(synoros.Error, match="reduction"):
        F.cross_entropy(synoros.tensor(logits), synoros.tensor(target), reduction="avg")
    with pytest.raises(synoros.Error, match="out of range"):
        float(F.cross_entropy(synoros.tensor(logits), synoros.tensor(np.array([0, 3, 1, 2]))))


def test_layer_norm_over_trailing_axes_and_batch_norm_match_pytorch(torch, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    s, t = synoros.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    sw, tw = synoros.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    ys = F.layer_norm(s, (4, 5), sw, synoros.tensor(b))
    yt = torch.nn.functional.layer_norm(t, (4, 5), tw, torch.tensor(b))
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(F.layer_norm(synoros.tensor(x), 5).numpy(),
                               torch.nn.functional.layer_norm(torch.tensor(x), (5,)).numpy(), rtol=1e-5, atol=1e-5)

    z = rng.standard_normal((4, 3, 6)).astype(np.float32)
    rm_s, rv_s = synoros.zeros(3), synoros.ones(3)
    rm_t, rv_t = torch.zeros(3), torch.ones(3)
    s, t = synoros.tensor(z, requires_grad=True), torch.tensor(z, requires_grad=True)
    ys = F.batch_norm(s, rm_s, rv_s, training=True, momentum=0.3)
    yt = torch.nn.functional.batch_norm(t, rm_t, rv_t, training=True, momentum=0.3)
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rm_s.numpy(), rm_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv_s.numpy(), rv_t.numpy(), rtol=1e-5, atol=1e-6)
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(F.batch_norm(synoros.tensor(z), rm_s, rv_s).numpy(),
                               torch.nn.functional.batch_norm(torch.tensor(z), rm_t, rv_t).numpy(), rtol=1e-5, atol=1e-5)
