"""synoros.distributed: the parameters after data-parallel steps are the same bytes for 1, 2 and 3
MPI ranks and for one process without a launcher."""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import synoros
import synoros.distributed as dist

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import synoros
    import synoros.distributed as dist
    from synoros import nn

    out, optimizer = sys.argv[1], sys.argv[2]
    synoros.set_num_threads(1)
    synoros.manual_seed(3)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 5))
    if optimizer == "sgd":
        opt = synoros.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = synoros.optim.AdamW(model.parameters(), lr=0.01)
    step = dist.DataParallelStep(lambda x, y: synoros.cross_entropy(model(x), y), opt, shards=6,
                                 bucket_floats=40)
    rng = np.random.default_rng(7)  # the same global batch on every rank
    x = rng.standard_normal((24, 12)).astype(np.float32)
    y = rng.integers(0, 5, 24).astype(np.int64)
    losses = [step(x, y) for _ in range(3)]
    first, last = step.local_shards
    print(f"rank {dist.rank()} of {dist.world_size()} computes {first}..{last - 1}")
    if dist.rank() == 0:
        with open(out, "wb") as f:
            for p in model.parameters():
                f.write(p.numpy().tobytes())
            f.write(np.asarray(losses, dtype=np.float64).tobytes())
    """
)


def _mpirun():
    return shutil.which("mpirun")


@pytest.mark.skipif(not dist.is_available(), reason="built without MPI")
@pytest.mark.skipif(_mpirun() is None, reason="no mpirun")
def test_same_bytes_for_every_world_size(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for optimizer in ("sgd", "adamw"):
        results = {}
        for np_ in (0, 1, 2, 3):
            out = tmp_path / f"params_{optimizer}{np_}.bin"
            cmd = [sys.executable, str(script), str(out), optimizer]
            if np_:
                cmd = [_mpirun(), "-np", str(np_)] + cmd
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout + r.stderr
            ranks = max(np_, 1)
            assert r.stdout.count(f"of {ranks} computes") == ranks, r.stdout
            results[np_] = out.read_bytes()
        assert len(results[0]) == (12 * 16 + 16 + 16 * 5 + 5) * 4 + 3 * 6 * 8
        for np_ in (1, 2, 3):
            assert results[np_] == results[0], f"{optimizer}: {np_} ranks differ from one process"
        losses = np.frombuffer(results[0][-3 * 6 * 8:], dtype=np.float64).reshape(3, 6)
        assert np.all(np.isfinite(losses))
        assert losses[2].mean() < losses[0].mean(), optimizer  # it learns


def test_one_process_is_rank_zero_of_one():
    assert dist.rank() == 0
    assert dist.world_size() == 1
    dist.barrier()


def test_bad_batches_raise():
    synoros.manual_seed(1)
    model = synoros.nn.Linear(4, 3)
    opt = synoros.optim.SGD(model.parameters(), lr=0.1)
    step = dist.DataParallelStep(lambda x, y: synoros.cross_entropy(model(x), y), opt, shards=4)
    x = np.zeros((8, 4), np.float32)
    y = np.zeros(8, np.int64)
    with pytest.raises(synoros.Error, match="must divide into 4 micro-shards"):
        step(np.zeros((6, 4), np.float32), np.zeros(6, np.int64))
    losses = step(x, y)
    assert len(losses) == 4
    assert step.local_shards == (0, 4)
    assert step.times.steps == 1
    with pytest.raises(synoros.Error, match="traced for"):
        step(np.zeros((12, 4), np.float32), np.zeros(12, np.int64))
    with pytest.raises(synoros.Error, match="shards must be at least 1"):
        dist.DataParallelStep(lambda x: x.sum(), opt, shards=0)
