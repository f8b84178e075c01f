"""Shared fixtures. PyTorch's fused "fast path" for nn.Transformer* layers in eval mode is switched
off around each test, so that torch.nn is exercised through its plain reference implementation."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _plain_torch_reference():
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    torch.manual_seed(0)
    yield
    torch.backends.mha.set_fastpath_enabled(before)


@pytest.fixture
def pip_alone(tmp_path_factory, monkeypatch):
    """Hold a lock that every test installing packages with pip takes, across pytest-xdist's workers,
    and let pip give up on a silent connection after 45 s (and retry it) instead of the machine's 180 s.

    Two such tests at once (the Colab path and the wheelhouse) were measured: the Colab test took
    316 s beside the wheelhouse test instead of 69 s alone, mostly waiting, not computing. One at a
    time, the second waits at most the first's minute or two. Alone, the wheelhouse test still stalled once for about
    four minutes, as a request to the index that never answers would with PIP_DEFAULT_TIMEOUT=180.
    """
    from filelock import FileLock

    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "45")
    root = tmp_path_factory.getbasetemp().parent  # shared by the workers of one run
    with FileLock(str(root / "pip-install.lock")):
        yield
