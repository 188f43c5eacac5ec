"""The examples and the README's quick start run (briefly) as written."""

import os
import re
import subprocess
import sys

import pytest

import synoros

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def have_fashion_mnist():
    try:
        synoros.data.FashionMNIST(train=False, limit=1)
        return True
    except synoros.Error:
        return False


@pytest.mark.skipif(not have_fashion_mnist(), reason="dataset-fashion-mnist is not installed")
def test_fashion_mnist_example_trains_and_saves(tmp_path):
    out = tmp_path / "mlp.safetensors"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "train_fashion_mnist.py"),
                        "--steps", "60", "--limit", "2048", "--save", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", r.stdout).group(1))
    assert accuracy > 0.5  # ten classes: chance is 0.1
    assert set(synoros.load(out)) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}


def test_text_example_trains_and_samples(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "generate_text.py"),
                        "--text", str(text), "--steps", "50", "--tokens", "20"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    losses = [float(x) for x in re.findall(r"loss ([0-9.]+)", r.stdout)]
    assert losses and losses[-1] < 3.0  # ln(256) = 5.5 at the start
    assert r.stdout.strip().splitlines()[-1].startswith("'The ")


def test_readme_quick_start_runs():
    readme = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"## Python quick start.*?```python\n(.*?)```", readme, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.strip()) < 1.0


def test_python_guide_quick_start_runs(tmp_path):
    guide = open(os.path.join(ROOT, "docs", "python.md")).read()
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", guide, re.S).group(1)
    # Run in a scratch directory (it saves a file there), importing this same synoros.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(synoros.__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=env)
    assert r.returncode == 0, r.stderr
    loss, shape = r.stdout.split(" ", 1)
    assert float(loss) > 0 and shape.strip() == "(32, 16)"
    assert set(synoros.load(tmp_path / "mlp.safetensors")) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
