"""argmax/argmin, cumsum, cumprod, gather, index_select, integer-tensor indexing and printing against
PyTorch: values, gradients and strings."""

import numpy as np
import pytest

import synoros


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="PyTorch is needed for parity tests")


def test_argmax_and_argmin_match_pytorch(torch, rng):
    a = rng.integers(-3, 3, size=(4, 6, 5)).astype(np.float32)  # many ties
    a[1, 2, 3] = np.nan
    a[2, 4, 1] = np.nan
    s, t = synoros.tensor(a), torch.tensor(a)
    for fn in ("argmax", "argmin"):
        np.testing.assert_array_equal(getattr(s, fn)().numpy(), getattr(t, fn)().numpy())
        for dim in (0, 1, -1):
            for keepdim in (False, True):
                got = getattr(synoros, fn)(s, dim, keepdim).numpy()
                want = getattr(torch, fn)(t, dim, keepdim).numpy()
                assert got.dtype == np.int64
                np.testing.assert_array_equal(got, want, err_msg=f"{fn} dim={dim} keepdim={keepdim}")


def check_scan(torch, a, name, dims, rtol, atol, rng):
    """synoros.NAME against torch.NAME along each of dims: the same bits forward (both accumulate
    float32 in float64 and round each running value once), and close gradients."""
    g = rng.standard_normal(a.shape).astype(np.float32)
    for dim in dims:
        s = synoros.tensor(a, requires_grad=True)
        t = torch.tensor(a, requires_grad=True)
        ys, yt = getattr(synoros, name)(s, dim), getattr(torch, name)(t, dim)
        np.testing.assert_array_equal(ys.numpy(), yt.detach().numpy(), err_msg=f"{name} dim={dim}")
        (ys * synoros.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"{name} dim={dim}")


def test_cumsum_matches_pytorch_bit_for_bit_with_its_gradient(torch, rng):
    a = (rng.standard_normal((3, 257, 4)) * 1000).astype(np.float32)
    check_scan(torch, a, "cumsum", (0, 1, 2, -1), 1e-5, 1e-3, rng)


def test_cumprod_matches_pytorch_bit_for_bit_and_its_gradient_at_zeros(torch, rng):
    a = rng.uniform(0.8, 1.25, size=(3, 57, 4)).astype(np.float32)
    a[1, 5, 2] = 0.0  # one zero in a line, two in another
    a[2, 7, 0] = a[2, 30, 0] = 0.0
    check_scan(torch, a, "cumprod", (0, 1, -1), 1e-4, 1e-5, rng)


def test_gather_and_index_select_match_pytorch_with_gradients(torch, rng):
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    idx = rng.integers(0, 5, size=(3, 8, 6))  # smaller than the data on axis 0, repeats on axis 1
    s = synoros.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    w = rng.standard_normal(idx.shape).astype(np.float32)
    ys = synoros.gather(s, 1, synoros.tensor(idx))
    yt = torch.gather(t, 1, torch.tensor(idx))
    np.testing.assert_array_equal(ys.numpy(), yt.detach().numpy())
    (ys * synoros.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)

    sel = np.array([5, 0, 5, 2])
    s2 = synoros.tensor(a, requires_grad=True)
    t2 = torch.tensor(a, requires_grad=True)
    ys = s2.index_select(-1, synoros.tensor(sel))
    yt = t2.index_select(-1, torch.tensor(sel))
    np.testing.assert_array_equal(ys.numpy(), yt.detach().numpy())
    ys.sum().backward()
    yt.sum().backward()
    np.testing.assert_array_equal(s2.grad.numpy(), t2.grad.numpy())


def test_indexing_by_integer_tensors_and_lists(torch, rng):
    a = rng.standard_normal((5, 3)).astype(np.float32)
    s, t = synoros.tensor(a), torch.tensor(a)
    rows = np.array([[4, 0], [4, 1]])
    np.testing.assert_array_equal(s[synoros.tensor(rows)].numpy(), t[torch.tensor(rows)].numpy())
    np.testing.assert_array_equal(s[[2, 2, 0]].numpy(), t[[2, 2, 0]].numpy())
    np.testing.assert_array_equal(s[np.array([1, 3])].numpy(), t[np.array([1, 3])].numpy())
    np.testing.assert_array_equal(s[[-1, 0, -5]].numpy(), t[[-1, 0, -5]].numpy())
    with pytest.raises(IndexError, match="boolean"):
        s[[True, False, True, False, True]]
    with pytest.raises(IndexError, match="integer tensors"):
        s[synoros.tensor(np.array([1.0], dtype=np.float32))]
    with pytest.raises(synoros.Error, match="out of range"):
        s[[7]].numpy()
    # reshape/view with -1 and Python's slice bounds
    np.testing.assert_array_equal(s.reshape(-1, 5).numpy(), t.reshape(-1, 5).numpy())
    np.testing.assert_array_equal(s.slice(0, -2, 100).numpy(), t[-2:100].numpy())


def test_printing_matches_pytorch(torch):
    for a in (np.array([1.0, 2.0, 3.0], np.float32),
              np.array([[1.5, -2.25], [3.0, 4.125]], np.float32),
              np.array([1e-5, 1.0, 12345.0], np.float32),
              np.array([np.nan, np.inf, -1.5, 0.0], np.float32),
              np.array([[1, -20], [300, 4]], np.int64),
              np.arange(2000, dtype=np.float32).reshape(2, 1000),
              np.arange(30, dtype=np.float32) / 7):
        assert repr(synoros.tensor(a)) == repr(torch.tensor(a))
    assert repr(synoros.tensor(np.array([0.5], np.float64))) == "tensor([0.5000], dtype=synoros.float64)"
    x = synoros.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 4.], requires_grad=True)"


def test_prod_matches_pytorch_with_gradients_at_zeros(torch, rng):
    a = rng.uniform(0.5, 1.5, size=(3, 4, 5)).astype(np.float32)
    a[0, 1, 2] = 0.0
    a[2, 3, 0] = a[2, 3, 1] = 0.0  # two zeros in one line: a zero gradient there
    for dim in (None, 0, 2):
        s, t = synoros.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        ys = synoros.prod(s) if dim is None else s.prod(dim, keepdim=True)
        yt = torch.prod(t) if dim is None else t.prod(dim, keepdim=True)
        np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-6)
        g = rng.standard_normal(yt.shape).astype(np.float32)
        (ys * synoros.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
