"""DistributedDataParallel under the real torchrun: two processes take the step one process takes on the whole batch."""

import os
import subprocess
import sys

import pytest
import torch

import transformer_lib as tl
from transformer_lib.distributed import demo_model_and_batches, shard

pytestmark = pytest.mark.slow  # starts Python processes under torchrun: seconds each, so not in make check

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    """transformer_lib.distributed in two processes under torchrun, with `args`."""
    command = [*TORCHRUN, "-m", "transformer_lib.distributed", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300
    )


def test_two_processes_average_to_the_gradient_of_the_whole_batch(tmp_path):
    out = tmp_path / "grads.pt"
    done = _torchrun("--save-grads", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    averaged = torch.load(out)

    model, batches = demo_model_and_batches()  # one process, the same weights, the whole first batch
    tl.lm_loss(model, next(batches)).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(averaged[name], p.grad, atol=1e-6, rtol=1e-4), name
    # the check can fail: the gradient of one half alone is not the whole batch's
    model.zero_grad()
    tl.lm_loss(model, shard(next(demo_model_and_batches()[1]), 0, 2)).backward()
    assert not all(torch.allclose(averaged[n], p.grad, atol=1e-6, rtol=1e-4) for n, p in model.named_parameters())


def test_two_processes_under_torchrun_train_like_one_process_on_the_whole_batch():
    done = _torchrun("--steps", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    two = [float(v) for v in done.stdout.split("losses:")[1].split()]
    model, batches = demo_model_and_batches()
    one = tl.fit(model, tl.lm_loss, batches, steps=5, lr=3e-3, warmup=5, progress=False).losses
    assert len(two) == 5
    assert max(abs(a - b) for a, b in zip(two, one)) < 1e-4


def test_shard_splits_rows_evenly_and_refuses_uneven_batches():
    x, y = torch.arange(12).view(6, 2), torch.arange(6)
    parts = [shard((x, y), r, 3) for r in range(3)]
    assert torch.equal(torch.cat([p[0] for p in parts]), x) and torch.equal(torch.cat([p[1] for p in parts]), y)
    with pytest.raises(ValueError, match="does not split evenly"):
        shard((x, y), 0, 4)


def test_the_script_refuses_to_run_outside_torchrun():
    done = subprocess.run(
        [sys.executable, "-m", "transformer_lib.distributed"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "RANK"},
    )
    assert done.returncode != 0 and "torchrun" in done.stderr
