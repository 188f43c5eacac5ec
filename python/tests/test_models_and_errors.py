"""GPT generation, the synthesizer, and bad input raising synoros.Error (never a crash)."""

import numpy as np
import pytest

import synoros
from synoros.models import GPT, GPTConfig
from synoros.synth import Options, Spec, Synthesizer

# A small convolution-like spec (two bindings) that enumerates in well under a second.
SMALL = ("input: C_in, H; output: C_out, H; coef: k=3:2, g=2:2;"
         "bind: C_in=4, C_out=4, H=8; bind: C_in=8, C_out=8, H=6; cap: C_in=2, C_out=2, H=0")


def small_synthesizer():
    return Synthesizer(Spec.parse(SMALL), Options(max_depth=5, max_reductions=3))


def train_losses(m, opt, x, y, steps):
    """The first and the last loss of `steps` eager training steps of GPT `m` on (x, y)."""
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = m.loss(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


def test_gpt_generates_the_same_tokens_for_the_same_seed():
    cfg = GPTConfig(vocab_size=256, block_size=32, n_embd=32, n_head=2, n_layer=1)
    m = GPT(cfg, seed=3)
    a = m.generate([[1, 2, 3], [4, 5, 6]], 8, temperature=0.8, seed=5)
    b = m.generate([[1, 2, 3], [4, 5, 6]], 8, temperature=0.8, seed=5)
    assert a == b and len(a) == 2 and all(len(r) == 8 for r in a)
    assert all(0 <= t < 256 for r in a for t in r)
    text = m.generate("Hello", 5, temperature=0)
    assert isinstance(text, str)


def test_gpt_greedy_generation_follows_the_forward_pass():
    cfg = GPTConfig(vocab_size=64, block_size=16, n_embd=32, n_head=2, n_layer=1)
    m = GPT(cfg, seed=4)
    prompt = [3, 1, 4, 1, 5]
    tok = m.generate([prompt], 1, temperature=0)[0][0]
    logits = m(synoros.tensor([prompt])).numpy()
    assert tok == int(np.argmax(logits[0, -1]))


def test_generator_decodes_rewinds_and_matches_the_forward_pass():
    from synoros.models import GPTGenerator

    cfg = GPTConfig(vocab_size=64, block_size=16, n_embd=32, n_head=2, n_layer=1)
    m = GPT(cfg, seed=4)
    gen = GPTGenerator(m, batch=2)
    seqs = [[3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2, 8]]
    first = gen.prefill([s[:3] for s in seqs])
    assert first.shape == (2, 64) and first.dtype == np.float32 and gen.position == 3
    for t in range(3, 6):
        logits = gen.decode([s[t] for s in seqs])
    full = m(synoros.tensor(seqs)).numpy()
    assert np.array_equal(logits, full[:, -1])  # bit for bit
    # Take the last two tokens back and feed others: the forward pass over the new sequences.
    gen.rewind(4)
    assert gen.position == 4
    other = [[3, 1, 4, 1, 7], [2, 7, 1, 8, 0]]
    logits = gen.decode([s[4] for s in other])
    assert np.array_equal(logits, m(synoros.tensor(other)).numpy()[:, -1])
    with pytest.raises(synoros.Error, match="cannot rewind to position 9"):
        gen.rewind(9)
    with pytest.raises(synoros.Error, match="tokens for a batch of 2"):
        gen.decode([1])


def test_gpt_loss_trains():
    cfg = GPTConfig(vocab_size=32, block_size=8, n_embd=16, n_head=2, n_layer=1)
    m = GPT(cfg, seed=1)
    opt = synoros.optim.AdamW(m.parameters(), lr=3e-3)
    r = np.random.default_rng(0)
    seq = r.integers(0, 32, (4, 9))
    x, y = synoros.tensor(seq[:, :-1]), synoros.tensor(seq[:, 1:])
    first, last = train_losses(m, opt, x, y, 15)
    assert last < first



def test_lora_trains_only_its_adapters_and_merges_saves_and_loads(tmp_path):
    from synoros.models import LoRA, LoraConfig

    cfg = GPTConfig(vocab_size=32, block_size=8, n_embd=16, n_head=2, n_layer=1)
    m = GPT(cfg, seed=1)
    base = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    r = np.random.default_rng(0)
    seq = r.integers(0, 32, (4, 9))
    x, y = synoros.tensor(seq[:, :-1]), synoros.tensor(seq[:, 1:])
    before = m(x).numpy()
    lora = LoRA(m, LoraConfig(r=2, lora_alpha=4.0, target_modules=["c_attn", "mlp.c_proj"]), seed=2)
    assert lora.config.r == 2 and lora.config.scaling == 2.0 and not lora.merged
    names = [n for n, _ in lora.named_parameters()]
    assert names == ["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight",
                     "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight",
                     "base_model.model.transformer.h.0.mlp.c_proj.lora_A.weight",
                     "base_model.model.transformer.h.0.mlp.c_proj.lora_B.weight"]
    np.testing.assert_array_equal(lora(x).numpy(), before)  # B starts at zero: nothing changes yet
    first, last = train_losses(m, synoros.optim.AdamW(list(lora.parameters()), lr=1e-2), x, y, 10)
    assert last < first
    for k, v in m.state_dict().items():  # the base stayed frozen
        np.testing.assert_array_equal(v.numpy(), base[k], err_msg=k)
    adapted = lora(x).numpy()
    lora.merge()
    assert lora.merged
    np.testing.assert_allclose(m(x).numpy(), adapted, rtol=1e-4, atol=1e-5)
    lora.unmerge()
    for k, v in m.state_dict().items():  # unmerged bit for bit
        np.testing.assert_array_equal(v.numpy(), base[k], err_msg=k)
    lora.save(str(tmp_path / "adapter.safetensors"))
    lora.save_pretrained(str(tmp_path / "peft"))
    assert (tmp_path / "peft" / "adapter_config.json").exists()
    assert LoRA.read_config(str(tmp_path / "adapter.safetensors")).target_modules == ["c_attn", "mlp.c_proj"]
    m2 = GPT(cfg, seed=1)
    lora2 = LoRA(m2, LoRA.read_config(str(tmp_path / "adapter.safetensors")), seed=7)
    lora2.load(str(tmp_path / "adapter.safetensors"))
    np.testing.assert_array_equal(lora2(x).numpy(), adapted)
    with pytest.raises(synoros.Error, match="rank must be in"):
        LoraConfig(r=0)
    with pytest.raises(synoros.Error, match="nope"):
        LoRA(GPT(cfg, seed=1), LoraConfig(target_modules=["nope"]))

def test_synthesizer_finds_operators_and_exports_them():
    syn = small_synthesizer()
    ops = syn.enumerate(max_operators=20)
    assert 0 < len(ops) <= 20
    assert len({op.canonical for op in ops}) == len(ops)
    op = ops[-1]
    assert syn.formula(op)
    assert syn.flops(op) > 0
    again = syn.from_actions(op.actions)
    assert again.canonical == op.canonical
    reward = syn.flops_proxy_reward(syn.flops(op))
    best = syn.random_search(reward, samples=30, seed=2, keep_best=3)
    assert best and best[0][0] >= best[-1][0]
    calls = []
    python_reward = lambda o: calls.append(o.canonical) or 1.0 / (1 + o.depth)
    found = syn.random_search(python_reward, samples=10, seed=2)
    assert calls and found
    src = syn.pytorch_module(op)
    assert "class SynthOp" in src


def test_synthesized_operator_runs_in_the_engine():
    syn = small_synthesizer()
    op = syn.enumerate(max_operators=5)[-1]
    w = syn.init_weights(op)
    x = synoros.randn(*syn.spec.input_shape(0), seed=1)
    y = syn.apply(op, x, w)
    assert y.shape == tuple(syn.spec.output_shape(0))
    assert np.isfinite(y.numpy()).all()


@pytest.mark.parametrize("bad", [
    lambda: synoros.randn(2, 3, seed=1) @ synoros.randn(4, 5, seed=2),
    lambda: synoros.randn(2, 3, seed=1) + synoros.randn(4, 5, seed=2),
    lambda: synoros.randn(2, 3, seed=1).reshape(4, -1),
    lambda: synoros.randn(2, 3, seed=1).softmax(5),
    lambda: synoros.randn(2, 3, seed=1).item(),
    lambda: synoros.nn.Linear(3, 2)(synoros.randn(2, 4, seed=1)),
    lambda: synoros.load("/nonexistent/file.safetensors"),
    lambda: GPTConfig.preset("no-such-model"),
    lambda: synoros.tensor(np.zeros(3, dtype=np.complex64)),
    lambda: Spec.parse("[N] -> [M]"),
])
def test_bad_input_raises_a_clear_error(bad):
    with pytest.raises(synoros.Error) as e:
        r = bad()
        if isinstance(r, synoros.Tensor):
            r.numpy()
    assert str(e.value)


def test_error_is_a_runtime_error_with_the_engines_message():
    with pytest.raises(RuntimeError, match="matmul|einsum"):
        (synoros.randn(2, 3, seed=1) @ synoros.randn(4, 5, seed=2)).numpy()


def test_corrupt_checkpoint_is_an_error_not_a_crash(tmp_path):
    p = tmp_path / "bad.safetensors"
    p.write_bytes(b"\xff" * 40)
    with pytest.raises(synoros.Error):
        synoros.load(p)


def test_exported_pytorch_module_computes_what_the_engine_computes():
    torch = pytest.importorskip("torch")
    from synoros.synth import load_pytorch_module

    syn = small_synthesizer()
    for op in syn.enumerate(max_operators=40)[-5:]:
        weights = syn.init_weights(op, seed=3)
        x = synoros.randn(*syn.spec.input_shape(0), seed=4)
        want = syn.apply(op, x, weights).numpy()
        cls = load_pytorch_module(syn.pytorch_module(op), "SynthOp")
        module = cls()
        with torch.no_grad():
            for i, w in enumerate(weights):
                getattr(module, f"w{i}").copy_(torch.from_numpy(w.numpy().copy()))
            got = module(torch.from_numpy(x.numpy().copy())).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=syn.formula(op))


def test_operator_search_trains_and_times_the_baseline_network():
    try:
        synoros.data.FashionMNIST(train=False, limit=1)
    except synoros.Error:
        pytest.skip("dataset-fashion-mnist is not installed")
    spec = synoros.trials.resnet_conv_spec(8)
    cfg = synoros.trials.ProxyConfig()
    cfg.train_images, cfg.test_images, cfg.width = 256, 128, 8
    e = synoros.trials.evaluate(spec, None, 0, cfg)
    assert not e.failed, e.error
    assert e.key == "baseline" and 0.0 <= e.accuracy <= 1.0 and e.params > 0
    again = synoros.trials.Evaluation.from_json(e.to_json())
    assert again.accuracy == e.accuracy and again.key == e.key
    net = synoros.trials.network(spec, None, 0, seed=1, width=8)
    assert isinstance(net, synoros.nn.Module)
    assert net(synoros.randn(2, 1, 28, 28, seed=1)).shape == (2, 10)


def test_operator_search_on_a_gpt_trains_and_times_a_projection_operator(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"line {i % 13} of some text to learn, {i % 5}\n" for i in range(1500)))
    spec = synoros.trials.gpt_linear_spec(16)
    syn = synoros.synth.Synthesizer(spec)
    dense = next(op for op in syn.enumerate(50) if syn.formula(op).endswith("x[n, r0] · W1[c_out,r0]"))
    cfg = synoros.trials.LmProxyConfig()
    cfg.model = synoros.models.GPTConfig(256, 16, 16, 2, 1)
    cfg.batch, cfg.steps, cfg.val_batches, cfg.text_file = 2, 3, 2, str(text)
    e = synoros.trials.evaluate_lm(spec, dense, 0b0101, cfg)
    assert not e.failed, e.error
    assert e.class_mask == 5 and e.val_loss > 0 and e.step_ms > 0 and e.base_step_ms > 0
    assert synoros.trials.LmEvaluation.from_json(e.to_json()).val_loss == e.val_loss
    m = synoros.trials.gpt(spec, dense, 0b0101, cfg.model, seed=1)
    names = [n for n, _ in m.named_parameters()]
    assert "transformer.h.0.attn.c_attn.op.w0" in names and "transformer.h.0.attn.c_proj.weight" in names
    with pytest.raises(synoros.Error, match="malformed"):
        synoros.trials.LmEvaluation.from_json("{}")


def test_measure_peak_gives_the_fma_rate_and_both_bandwidths():
    gflops, copy_gbps, read_gbps = synoros.measure_peak()
    assert gflops > 1 and copy_gbps > 0.1 and read_gbps > 0.1
    gflops, copy_gbps, read_gbps = synoros.measure_peak(threads=2)  # two threads at once
    assert gflops > 1 and copy_gbps > 0.1 and read_gbps > 0.1
    with pytest.raises(synoros.Error, match="threads"):
        synoros.measure_peak(threads=0)


def test_a_memory_limit_refuses_an_allocation_with_an_error_and_can_be_restored():
    saved = synoros.memory_limit()
    live = synoros.live_buffer_bytes()
    try:
        synoros.set_memory_limit(live + (1 << 20))
        assert synoros.memory_limit() == live + (1 << 20)
        with pytest.raises(synoros.Error, match="out of memory"):
            synoros.zeros((1024, 1024)).numpy()  # 4 MiB
    finally:
        synoros.set_memory_limit(saved)
    assert synoros.zeros((1024, 1024)).numpy().shape == (1024, 1024)
    synoros.clear_plan_cache()
    assert synoros.plan_cache_bytes() == 0 and synoros.plan_cache_size() == 0
    (synoros.ones((64, 64)) * 2.0).numpy()  # realized through a cached plan
    assert synoros.plan_cache_size() == 1 and synoros.plan_cache_bytes() > 0
    synoros.set_plan_cache_limit(1)  # every new plan is over the limit: the oldest go
    (synoros.ones((32, 32)) + 1.0).numpy()
    (synoros.ones((16, 16)) - 1.0).numpy()
    assert synoros.plan_cache_size() <= 1
    synoros.set_plan_cache_limit(1 << 30)
