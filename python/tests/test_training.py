"""Modules, optimizers, no_grad, compile and checkpoints: a short training run end to end."""

import numpy as np
import pytest

import synoros
import synoros.nn as nn
import synoros.nn.functional as F
from conftest import torch_or_skip


class MLP(nn.Module):
    def __init__(self, seed=1):
        super().__init__()
        self.fc1 = nn.Linear(16, 32, seed=seed)
        self.fc2 = nn.Linear(32, 4, seed=seed + 1)
        self.scale = nn.Parameter(synoros.ones(4))

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x))) * self.scale


def data(seed=3, n=64):
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, 16)).astype(np.float32)
    y = r.integers(0, 4, n)
    return x, y


def test_parameters_and_state_dict_have_pytorchs_names():
    m = MLP()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert list(m.state_dict()) == names
    assert isinstance(m.fc1, nn.Module)
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert m.parameter_count() == 16 * 32 + 32 + 32 * 4 + 4 + 4


def test_linear_matches_pytorch_with_the_same_weights():
    torch = torch_or_skip()
    lin = nn.Linear(5, 3, seed=7)
    ref = torch.nn.Linear(5, 3)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(lin.weight.numpy().copy()))
        ref.bias.copy_(torch.from_numpy(lin.bias.numpy().copy()))
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    np.testing.assert_allclose(lin(synoros.tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def train_eager(steps=20, opt_name="sgd"):
    synoros.manual_seed(11)
    m = MLP()
    opt = (synoros.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else synoros.optim.AdamW(m.parameters(), lr=1e-2))
    x, y = data()
    xs, ys = synoros.tensor(x), synoros.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(m(xs), ys)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return m, losses


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_a_short_training_run_learns_and_reruns_bit_for_bit(opt_name):
    m1, l1 = train_eager(opt_name=opt_name)
    m2, l2 = train_eager(opt_name=opt_name)
    assert l1[-1] < 0.75 * l1[0]
    assert l1 == l2
    for (_, a), (_, b) in zip(m1.named_parameters(), m2.named_parameters()):
        assert a.numpy().tobytes() == b.numpy().tobytes()


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_compiled_step_gives_the_eager_losses_and_weights(opt_name):
    # AdamW's bias corrections advance per step: the compiled step must tick the optimizer.
    m_eager, eager = train_eager(opt_name=opt_name)
    synoros.manual_seed(11)
    m = MLP()
    opt = (synoros.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else synoros.optim.AdamW(m.parameters(), lr=1e-2))
    x, y = data()

    @synoros.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss

    compiled = [float(step(x, y)) for _ in range(20)]
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
    assert len(step.steps) == 1
    assert opt.steps == 20
    for (n, a), (_, b) in zip(m.named_parameters(), m_eager.named_parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5, err_msg=n)


def test_no_grad_records_no_gradient_path():
    w = synoros.randn(3, 3, seed=1, requires_grad=True)
    x = synoros.randn(2, 3, seed=2)
    assert (x @ w).requires_grad  # computed from w: on its gradient path
    with synoros.no_grad():
        y = (x @ w * 2.0).sum()
        assert not y.requires_grad
    assert synoros.is_grad_enabled()
    with pytest.raises(synoros.Error, match="requires a gradient"):
        y.backward()
    assert w.grad is None
    z = (x @ w * 2.0).sum()
    assert y.item() == z.item()
    z.backward()
    assert w.grad is not None


def test_grad_mode_decorators_restore_the_mode_even_when_recursive():
    @synoros.no_grad()
    def depth(n):
        assert not synoros.is_grad_enabled()
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(3) == 3
    assert synoros.is_grad_enabled()
    synoros.set_grad_enabled(False)
    assert not synoros.is_grad_enabled()
    with synoros.enable_grad():
        assert synoros.is_grad_enabled()
    assert not synoros.is_grad_enabled()
    synoros.set_grad_enabled(True)
    with synoros.set_grad_enabled(False):
        assert not synoros.is_grad_enabled()
    assert synoros.is_grad_enabled()


def test_compiled_manual_sgd_under_no_grad_matches_eager():
    def make():
        w = synoros.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
        return w

    x = np.array([1.0, 1.0], np.float32)
    we = make()
    for _ in range(3):
        we.zero_grad()
        (synoros.tensor(x) * we * we).sum().backward()
        with synoros.no_grad():
            we.copy_(we - we.grad * 0.125)
    wc = make()

    @synoros.compile
    def step(x):
        wc.zero_grad()
        loss = (x * wc * wc).sum()
        loss.backward()
        with synoros.no_grad():
            wc.copy_(wc - wc.grad * 0.125)
        return loss

    for _ in range(3):
        step(x)
    assert wc.numpy().tolist() == we.numpy().tolist() == [1.0 * 0.75 ** 3, 2.0 * 0.75 ** 3]


def test_checkpoint_round_trip(tmp_path):
    m, _ = train_eager(steps=3)
    path = tmp_path / "mlp.safetensors"
    synoros.save(m, path, metadata={"note": "three steps"})
    state, md = synoros.load(path, with_metadata=True)
    assert md["note"] == "three steps"
    fresh = MLP(seed=99)
    fresh.load_state_dict(state)
    for (n, a), (_, b) in zip(m.named_parameters(), fresh.named_parameters()):
        assert a.numpy().tobytes() == b.numpy().tobytes(), n
    with pytest.raises(synoros.Error, match="missing keys"):
        fresh.load_state_dict({"scale": state["scale"]})


def test_optimizer_state_dict_round_trip():
    m, _ = train_eager(steps=3, opt_name="adamw")
    opt = synoros.optim.AdamW(m.parameters(), lr=1e-2)
    sd = opt.state_dict()
    assert sd["steps"] == 0 and sd["lr"] == pytest.approx(1e-2)
    assert all(np.all(t.numpy() == 0) for t in sd["state"].values())
    given = {k: np.full(t.shape, 0.5, np.float32) for k, t in sd["state"].items()}
    opt.load_state_dict({"state": given, "steps": 5, "lr": 0.5})
    assert opt.steps == 5 and opt.lr == 0.5
    assert all(np.all(t.numpy() == 0.5) for t in opt.state_dict()["state"].values())
    with pytest.raises(synoros.Error, match="state names"):
        opt.load_state_dict({"state": {}, "steps": 0, "lr": 0.1})


def test_compiled_function_traces_once_per_signature_and_checks_arguments():
    @synoros.compile
    def f(x):
        return (x * 2.0).sum(), x + 1.0

    s, y = f(np.ones((4, 16), np.float32))
    assert float(s) == 128.0 and y.shape == (4, 16) and (y == 2).all()
    s2, _ = f(np.ones((2, 16), np.float32))  # a new shape: a second trace
    assert float(s2) == 64.0 and len(f.steps) == 2
    f([[1.0, 2.0]])  # lists become float32 arrays
    step = next(iter(f.steps.values()))
    with pytest.raises(synoros.Error, match=r"argument 0 is f32\[3,16\]"):
        step([np.ones((3, 16), np.float32)])
    with pytest.raises(synoros.Error, match="expects 1 arguments"):
        step([])


def test_compiled_steps_keep_the_gil_for_small_work_and_run_from_several_threads():
    import threading

    @synoros.compile
    def small(x):
        return (x * 2.0).sum()

    @synoros.compile
    def large(a, b):
        return (a @ b).sum()

    assert float(small(np.ones((4, 4), np.float32))) == 32.0
    assert float(large(np.ones((128, 128), np.float32), np.ones((128, 128), np.float32))) == 128.0**3
    assert [s.releases_gil for s in small.steps.values()] == [False]
    assert [s.releases_gil for s in large.steps.values()] == [True]
    results = []

    def worker(k):
        x = np.full((4, 4), float(k), np.float32)
        a = np.full((128, 128), float(k), np.float32)
        for _ in range(50):
            results.append((float(small(x)), 32.0 * k))
            results.append((float(large(a, a)), float(k * k) * 128.0**3))

    threads = [threading.Thread(target=worker, args=(k,)) for k in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 300 and all(got == want for got, want in results)

    # Two different large steps at once: each releases the GIL, and their launches take turns on
    # the engine's threads.
    @synoros.compile
    def other(a, b):
        return (a @ b + 1.0).sum()

    def other_worker(k):
        a = np.full((96, 96), float(k), np.float32)
        for _ in range(50):
            results.append((float(other(a, a)), float(k * k) * 96.0**3 + 96.0**2))

    results.clear()
    threads = [threading.Thread(target=worker, args=(1,)), threading.Thread(target=other_worker, args=(2,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [s.releases_gil for s in other.steps.values()] == [True]
    assert len(results) == 150 and all(got == want for got, want in results)


def test_sequential_calls_a_subclass_forward_and_engine_modules_take_one_input():
    class Doubled(nn.Sequential):
        def forward(self, x):
            return super().forward(x) * 2.0

    class Masked(nn.Sequential):
        def forward(self, x, mask=None):
            y = super().forward(x)
            return y * mask if mask is not None else y

    class Negated(nn.Linear):
        def forward(self, input):
            return -super().forward(input)

    lin = nn.Linear(3, 2, seed=4)
    x = synoros.tensor(np.ones((1, 3), np.float32))
    plain, doubled, masked = nn.Sequential(lin), Doubled(lin), Masked(lin)
    np.testing.assert_array_equal(doubled(x).numpy(), 2.0 * plain(x).numpy())
    zeros = synoros.tensor(np.zeros((1, 2), np.float32))
    np.testing.assert_array_equal(masked(x, mask=zeros).numpy(), np.zeros((1, 2), np.float32))
    np.testing.assert_array_equal(masked(x, zeros).numpy(), np.zeros((1, 2), np.float32))
    neg = Negated(3, 2, seed=4)  # a Python subclass's forward is what calling it runs
    np.testing.assert_array_equal(neg(x).numpy(), -lin(x).numpy())
    tripled = nn.Sequential(lin)
    tripled.forward = lambda input: lin(input) * 3.0  # a forward set on the instance is called
    np.testing.assert_array_equal(tripled(x).numpy(), 3.0 * lin(x).numpy())
    np.testing.assert_array_equal(lin(input=x).numpy(), lin(x).numpy())
    np.testing.assert_array_equal(lin.forward(x).numpy(), lin(x).numpy())
    for bad in [(), (x, x), ("x",)]:
        with pytest.raises(TypeError):
            lin(*bad)
    with pytest.raises(synoros.Error, match=r"input \[1,4\] does not end in 3 features"):
        lin(synoros.tensor(np.ones((1, 4), np.float32)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_compiled_outputs_are_plain_writable_arrays_of_their_own(dtype):
    @synoros.compile
    def f(x):
        return x.reshape([2, 3]), x.reshape([1, 6, 1]), x.reshape([6])

    assert synoros._C._numpy_arrays_direct()  # NumPy's C API table, not numpy.empty
    x = np.arange(6, dtype=dtype)
    first = f(x)
    second = f(x)
    for a, shape in zip(first, [(2, 3), (1, 6, 1), (6,)]):
        assert type(a) is np.ndarray and a.dtype == dtype and a.shape == shape
        assert a.flags["C_CONTIGUOUS"] and a.flags["OWNDATA"] and a.flags["WRITEABLE"]
        np.testing.assert_array_equal(a.ravel(), x)
    first[0][0, 0] = 99  # each call's arrays are new: writing one changes no other
    assert second[0][0, 0] == 0 and f(x)[0][0, 0] == 0


def test_an_optimizer_steps_with_given_gradients_as_with_its_own():
    def run(given):
        lin = nn.Linear(4, 3, seed=2)
        opt = synoros.optim.AdamW(lin.parameters(), lr=1e-2)
        x = synoros.tensor(np.arange(8, dtype=np.float32).reshape(2, 4))
        for _ in range(3):
            opt.zero_grad()
            lin(x).sum().backward()
            if given:
                w, b = lin.parameters()
                opt.step([w.grad, None])  # the bias is left as it is
            else:
                opt.step()
        return [p.numpy().copy() for p in lin.parameters()], opt

    (w_given, b_given), opt = run(True)
    (w_own, _), _ = run(False)
    np.testing.assert_array_equal(w_given, w_own)
    np.testing.assert_array_equal(b_given, nn.Linear(4, 3, seed=2).bias.numpy())
    assert opt.replayed_steps == 2  # the first step compiles the update, the next two replay it
    with pytest.raises(synoros.Error, match="1 gradients for 2 parameters"):
        opt.step([None])
