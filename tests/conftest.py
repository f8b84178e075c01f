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
