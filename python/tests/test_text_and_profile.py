"""Text corpora and their windows for language-model training, and profiling a compiled step."""

import json

import numpy as np
import pytest

import synoros
import synoros.nn.functional as F
from synoros.data import TextWindows, load_fortunes, load_text_file
from synoros.models import GPT, GPTConfig


def test_a_text_file_splits_at_a_line_and_its_windows_are_shifted_by_one(tmp_path):
    text = b"".join(b"line %d of the text\n" % i for i in range(40))
    path = tmp_path / "text.txt"
    path.write_bytes(text)
    c = load_text_file(str(path), val_fraction=0.25)
    assert c.train + c.val == text and c.val.startswith(b"line ") and c.train.endswith(b"\n")
    w = TextWindows(c.train, context=16, seed=3)
    x, y = w.random_batch(step=5, batch=4)
    xs, ys = x.numpy(), y.numpy()
    assert xs.shape == (4, 16) and xs.dtype == np.int64
    for row in range(4):
        start = w.window_start(5, row)
        assert bytes(xs[row].astype(np.uint8)) == c.train[start:start + 16]
        assert bytes(ys[row].astype(np.uint8)) == c.train[start + 1:start + 17]
    x2, _ = TextWindows(c.train, 16, seed=3).random_batch(5, 4)
    np.testing.assert_array_equal(x2.numpy(), xs)  # the same seed, step and rows: the same windows
    n = w.sequential_windows
    first, _ = w.sequential_batch(0, 2)
    assert n >= 2 and bytes(first.numpy()[1].astype(np.uint8)) == c.train[16:32]
    with pytest.raises(synoros.Error, match="too few"):
        TextWindows(b"short", context=16)
    with pytest.raises(synoros.Error, match="batch must be >= 1"):
        w.random_batch(0, 0)
    with pytest.raises(synoros.Error, match="missing"):
        load_text_file(str(tmp_path / "missing.txt"))


def test_fortunes_train_a_byte_level_gpt(tmp_path):
    for name, body in [("b", b"one\n%\ntwo two\n%\n"), ("a", b"three\n%\nfour four four\n%\n")]:
        (tmp_path / name).write_bytes(body * 20)
    c = load_fortunes(str(tmp_path), val_fraction=0.2)
    assert [f.rsplit("/", 1)[-1] for f in c.files] == ["a", "b"] and c.fortunes == 80
    m = GPT(GPTConfig(vocab_size=256, block_size=16, n_embd=16, n_head=2, n_layer=1), seed=1)
    opt = synoros.optim.AdamW(m.parameters(), lr=1e-2)
    w = TextWindows(c.train, context=16, seed=1)
    losses = []
    for step in range(12):
        x, y = w.random_batch(step, 4)
        opt.zero_grad()
        loss = m.loss(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_a_compiled_step_profiles_its_launches():
    model = synoros.nn.Linear(16, 8, seed=1)
    opt = synoros.optim.SGD(model.parameters(), lr=1e-2)

    @synoros.compile
    def step(x, t):
        opt.zero_grad()
        loss = F.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss

    x, t = np.ones((4, 16), np.float32), np.zeros((4, 8), np.float32)
    step(x, t)
    weight = model.weight.numpy().copy()
    (s,) = step.steps.values()
    p = s.profile(iterations=3, measure_limits=False)
    assert p.total_ns > 0 and p.peak == (0.0, 0.0, 0.0)
    labels = [e[0] for e in p.entries]
    assert any("einsum" in label for label in labels) and all(e[1] >= 0 for e in p.entries)
    assert sum(e[2] for e in p.entries) > 0  # the products' FLOPs
    assert "einsum" in p.table() and p.by_leading_op()[0][1] > 0
    assert isinstance(json.loads(p.chrome_trace()), (list, dict))
    np.testing.assert_array_equal(model.weight.numpy(), weight)  # profiling updates nothing
    with pytest.raises(synoros.Error, match="iterations must be >= 1"):
        s.profile(iterations=0)


def test_the_language_model_trainer_trains_resumes_and_fine_tunes_with_lora(tmp_path):
    from synoros.models import LoraConfig
    from synoros.train import LmTrainer

    text = tmp_path / "text.txt"
    text.write_bytes(b"".join(b"the %d quick brown foxes jump\n" % (i % 7) for i in range(300)))
    cfg = GPTConfig(vocab_size=256, block_size=16, n_embd=16, n_head=2, n_layer=1)
    t = LmTrainer(cfg, batch=4, steps=12, warmup_steps=2, lr=1e-2, text_file=str(text))
    seen = []
    assert t.train_steps(6, lambda step, loss: seen.append((step, loss))) == 6
    assert [s for s, _ in seen] == list(range(1, 7)) and t.step == 6
    first_val = t.validation_loss(4)
    t.save(str(tmp_path / "run.safetensors"))
    t.train_steps(6)
    assert t.train_steps(6) == 0  # the schedule has ended
    assert t.validation_loss(4) < first_val
    sample = t.generate(b"the ", 20, temperature=0.8, seed=3)
    assert isinstance(sample, bytes) and len(sample) == 20 and sample == t.generate(b"the ", 20, 0.8, 3)

    resumed = LmTrainer(cfg, batch=4, steps=12, warmup_steps=2, lr=1e-2, text_file=str(text))
    resumed.load(str(tmp_path / "run.safetensors"))
    assert resumed.step == 6
    resumed.train_steps(6)
    for (name, a), (_, b) in zip(t.model.named_parameters(), resumed.model.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)  # resuming gives the same bits

    t.model.save(str(tmp_path / "base.safetensors"))
    ft = LmTrainer(cfg, batch=4, steps=4, warmup_steps=1, lr=1e-2, text_file=str(text),
                   base=str(tmp_path / "base.safetensors"), lora=LoraConfig(r=2, lora_alpha=4.0))
    assert ft.lora is not None and len(list(ft.lora.parameters())) == 2 * 4
    assert ft.train_steps(4) == 4
    with pytest.raises(synoros.Error, match="no-such-model"):
        LmTrainer("no-such-model")
    with pytest.raises(synoros.Error):
        LmTrainer(cfg, text_file=str(tmp_path / "missing.txt"))


def test_the_classifier_trainer_trains_evaluates_and_resumes_bit_for_bit(tmp_path):
    from synoros.train import ClassifierTrainer

    def trainer(model="mlp"):
        return ClassifierTrainer(model, batch=32, steps=8, lr=0.05, train_limit=256, test_limit=64)

    t = trainer()
    assert t.total_steps == 8 and t.steps_per_epoch == 8
    losses = []
    assert t.train_steps(4, lambda step, loss: losses.append(loss)) == 4 and len(losses) == 4
    t.save(str(tmp_path / "run.safetensors"))
    t.train_steps(4)
    loss, acc = t.evaluate()
    assert np.isfinite(loss) and 0.0 <= acc <= 1.0
    resumed = trainer()
    resumed.load(str(tmp_path / "run.safetensors"))
    resumed.train_steps(4)
    for (name, a), (_, b) in zip(t.model.named_parameters(), resumed.model.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert trainer(synoros.nn.ResNetMini(10, seed=2)).train_steps(1) == 1  # an engine module of one's own
    with pytest.raises(synoros.Error, match="unknown model"):
        trainer("no-such-model")
