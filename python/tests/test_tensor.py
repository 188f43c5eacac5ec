"""Tensor values and gradients against PyTorch on random inputs, and the NumPy/DLPack exchange."""

import numpy as np
import pytest

import synoros


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="PyTorch is needed for parity tests")

UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "neg", "gelu"]


def pair(torch, a, requires_grad=True):
    return (synoros.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


@pytest.mark.parametrize("name", UNARY)
def test_unary_values_and_gradients_match_pytorch(torch, name, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    s, t = pair(torch, a)
    torch_op = torch.nn.functional.gelu if name == "gelu" else lambda x: getattr(x, name)()
    ys, yt = getattr(s, name)(), torch_op(t)
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    (ys * ys).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_values_and_gradients_match_pytorch(torch, causal, rng):
    from synoros.nn import functional as F
    shapes = [(2, 3, 70, 8), (2, 3, 70 if causal else 90, 8), (2, 3, 70 if causal else 90, 8)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    (sq, tq), (sk, tk), (sv, tv) = (pair(torch, a) for a in arrays)
    ys = F.scaled_dot_product_attention(sq, sk, sv, is_causal=causal)
    scores = tq @ tk.transpose(-1, -2) / np.sqrt(8.0)
    if causal:
        scores = scores.masked_fill(torch.ones(70, 70, dtype=torch.bool).triu(1), float("-inf"))
    yt = torch.softmax(scores, -1) @ tv
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rng.standard_normal(shapes[0]).astype(np.float32)
    (ys * synoros.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    for s, t in ((sq, tq), (sk, tk), (sv, tv)):
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_log_sqrt_rsqrt_on_positive_inputs(torch, rng):
    a = rng.uniform(0.5, 2.0, (4, 3)).astype(np.float32)
    for name in ["log", "sqrt", "rsqrt"]:
        s, t = pair(torch, a)
        getattr(s, name)().sum().backward()
        getattr(t, name)().sum().backward()
        np.testing.assert_allclose(s.grad.numpy(), t.grad.numpy(), rtol=1e-5)


def test_binary_operators_broadcast_and_differentiate_as_pytorch(torch, rng):
    a = rng.standard_normal((4, 1, 3)).astype(np.float32)
    b = rng.uniform(0.5, 1.5, (5, 3)).astype(np.float32)
    sa, ta = pair(torch, a)
    sb, tb = pair(torch, b)
    fs = ((sa + sb) * sb - sa / sb + 2.0 - 3.0 * sa + 1.0 / sb) ** 2
    ft = ((ta + tb) * tb - ta / tb + 2.0 - 3.0 * ta + 1.0 / tb) ** 2
    np.testing.assert_allclose(fs.numpy(), ft.detach().numpy(), rtol=1e-5, atol=1e-5)
    fs.mean().backward()
    ft.mean().backward()
    np.testing.assert_allclose(sa.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sb.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_reductions_shapes_and_matmul_match_pytorch(torch, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    sa, ta = pair(torch, a)
    sw, tw = pair(torch, w)
    ys = (sa @ sw).softmax(-1).sum(dim=1) + sa.mean(dim=(1, 2), keepdim=True).reshape(2, -1) \
        + sa.amax(dim=2).var(dim=1, keepdim=True) + sa.transpose(1, 2).permute(0, 2, 1)[:, 0, :1]
    yt = (ta @ tw).softmax(-1).sum(dim=1) + ta.mean(dim=(1, 2), keepdim=True).reshape(2, -1) \
        + ta.amax(dim=2).var(dim=1, keepdim=True) + ta.transpose(1, 2).permute(0, 2, 1)[:, 0, :1]
    np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    ys.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(sa.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_indexing_matches_numpy(rng):
    a = rng.standard_normal((4, 5, 6)).astype(np.float32)
    s = synoros.tensor(a)
    for idx in [1, -1, (slice(1, 3),), (Ellipsis, 2), (0, slice(None), slice(2, -1)), (None, 1),
                (slice(None), -2, None)]:
        np.testing.assert_array_equal(s[idx].numpy(), a[idx])
    with pytest.raises(IndexError):
        s[4]
    with pytest.raises(IndexError):
        s[::2]


def test_cat_stack_where_clamp_match_pytorch(torch, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((2, 3)).astype(np.float32)
    sa, sb = synoros.tensor(a), synoros.tensor(b)
    ta, tb = torch.tensor(a), torch.tensor(b)
    np.testing.assert_array_equal(synoros.cat([sa, sb], 1).numpy(), torch.cat([ta, tb], 1).numpy())
    np.testing.assert_array_equal(synoros.stack([sa, sb], 0).numpy(), torch.stack([ta, tb], 0).numpy())
    np.testing.assert_array_equal(synoros.where(sa > 0.0, sa, sb).numpy(), torch.where(ta > 0, ta, tb).numpy())
    np.testing.assert_array_equal(sa.clamp(-0.5, 0.5).numpy(), ta.clamp(-0.5, 0.5).numpy())
    np.testing.assert_array_equal(sa.clamp(min=0.1).numpy(), ta.clamp(min=0.1).numpy())


def test_factories_and_dtypes():
    assert synoros.zeros(2, 3).shape == (2, 3)
    assert synoros.ones((4,), dtype=synoros.float64).dtype == synoros.float64
    assert synoros.tensor([1, 2, 3]).dtype == synoros.int64
    assert synoros.tensor([1.0, 2.0]).dtype == synoros.float32
    assert synoros.arange(5).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert synoros.full((2,), 7.0).tolist() == [7.0, 7.0]
    x = synoros.tensor([[1.5, -2.0]])
    assert x.to(synoros.float64).dtype == synoros.float64
    assert float(x.sum()) == -0.5
    assert repr(x) == "tensor([[ 1.5000, -2.0000]])"  # PyTorch's format


def test_randn_is_the_same_for_the_same_seed():
    a = synoros.randn(3, 4, seed=5).numpy()
    b = synoros.randn(3, 4, seed=5).numpy()
    assert a.tobytes() == b.tobytes()
    synoros.manual_seed(9)
    c = synoros.randn(3, 4).numpy()
    synoros.manual_seed(9)
    d = synoros.randn(3, 4).numpy()
    assert c.tobytes() == d.tobytes()
    assert c.tobytes() != a.tobytes()


def test_numpy_export_shares_the_tensors_memory():
    t = synoros.randn(64, 8, seed=1)
    a = t.numpy()
    b = t.numpy()
    assert np.shares_memory(a, b)
    assert synoros.shares_memory(t, a)
    assert not a.flags.writeable  # writes go through copy_, so plans see them


def aligned_array(shape):
    """A writable float32 array at a 64-byte aligned address (the engine's buffer layout)."""
    n = int(np.prod(shape))
    raw = np.empty(n + 16, np.float32)
    off = (-raw.ctypes.data % 64) // 4
    a = raw[off:off + n].reshape(shape)
    a[...] = np.arange(n, dtype=np.float32).reshape(shape)
    return a


def test_numpy_round_trip_without_copies():
    a = aligned_array((16, 16))
    t = synoros.from_numpy(a)
    assert synoros.shares_memory(t, a)
    assert np.shares_memory(t.numpy(), a)
    # An update to the tensor writes into the array, as torch.from_numpy's tensors do.
    t.copy_(synoros.ones(16, 16))
    assert (a == 1).all()
    # An array without the engine's layout is copied, and says so; so is a read-only one.
    odd = np.arange(7, dtype=np.float32)
    u = synoros.from_numpy(odd)
    assert not synoros.shares_memory(u, odd)
    np.testing.assert_array_equal(u.numpy(), odd)
    ro = aligned_array((4, 16))
    ro.flags.writeable = False
    assert not synoros.shares_memory(synoros.from_numpy(ro), ro)


def test_comparisons_give_ones_and_zeros():
    a = synoros.tensor([1.0, 2.0, float("nan")])
    b = synoros.tensor([2.0, 2.0, 1.0])
    assert (a < b).tolist() == [1.0, 0.0, 0.0]
    assert (a <= b).tolist() == [1.0, 1.0, 0.0]
    assert (a >= b).tolist() == [0.0, 1.0, 0.0]
    assert (a == b).tolist() == [0.0, 1.0, 0.0]
    assert (a != b).tolist() == [1.0, 0.0, 1.0]
    assert (a > 1.5).tolist() == [0.0, 1.0, 0.0]


def test_dlpack_both_ways_without_copies(torch):
    tt = torch.arange(64, dtype=torch.float32).reshape(4, 16)  # PyTorch aligns to 64 bytes
    s = synoros.from_dlpack(tt)
    assert synoros.shares_memory(s, tt)
    np.testing.assert_array_equal(s.numpy(), tt.numpy())
    back = torch.from_dlpack(s)
    assert back.data_ptr() == tt.data_ptr()
    r = synoros.randn(8, 8, seed=3)
    tr = torch.from_dlpack(r)
    assert tr.data_ptr() == r.numpy().ctypes.data
    np.testing.assert_array_equal(tr.numpy(), r.numpy())


def test_shared_memory_stays_alive_after_the_source_is_gone():
    a = aligned_array((32, 2))
    expect = a.copy()
    t = synoros.from_numpy(a)
    assert synoros.shares_memory(t, a)
    del a
    np.testing.assert_array_equal(t.numpy(), expect)


@pytest.mark.parametrize("winograd", [False, True])
def test_conv2d_values_and_gradients_match_pytorch(torch, winograd, rng):
    x = rng.standard_normal((2, 8, 9, 7)).astype(np.float32)
    w = (rng.standard_normal((12, 8, 3, 3)) * 0.2).astype(np.float32)
    g = rng.standard_normal((2, 12, 9, 7)).astype(np.float32)
    saved = synoros.winograd_convolutions()
    synoros.set_winograd_convolutions(winograd)
    try:
        (sx, tx), (sw, tw) = pair(torch, x), pair(torch, w)
        ys = synoros.nn.functional.conv2d(sx, sw, padding=1)
        yt = torch.nn.functional.conv2d(tx, tw, padding=1)
        np.testing.assert_allclose(ys.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-4)
        (ys * synoros.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        np.testing.assert_allclose(sx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(sw.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
    finally:
        synoros.set_winograd_convolutions(saved)
    assert synoros.winograd_convolutions() == saved
