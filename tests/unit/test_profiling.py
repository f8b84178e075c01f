"""The cost measurements: wall time and the bytes autograd keeps for backward."""

import pytest
import torch

import transformer_lib as tl


def test_saved_tensor_bytes_counts_what_autograd_keeps():
    x = torch.randn(100, 50, requires_grad=True)  # 20,000 bytes
    assert tl.saved_tensor_bytes(lambda: x.sin()) == 100 * 50 * 4  # sin saves its input
    assert tl.saved_tensor_bytes(lambda: x + 1) == 0  # addition saves nothing
    # sin and cos both save x (one storage, counted once); the product saves both of its factors
    assert tl.saved_tensor_bytes(lambda: x.sin() * x.cos()) == 3 * 100 * 50 * 4
    with torch.no_grad():
        assert tl.saved_tensor_bytes(lambda: x.sin()) == 0


def test_attention_weights_path_keeps_quadratic_memory_and_the_fused_path_does_not():
    tl.set_seed(0)
    mha = tl.MultiHeadAttention(32, 4)
    kept = {}
    for S in (128, 256):
        x = torch.randn(1, S, 32, requires_grad=True)
        kept[S] = (
            tl.saved_tensor_bytes(lambda x=x: mha(x, x, x, need_weights=True)),
            tl.saved_tensor_bytes(lambda x=x: mha(x, x, x)),
        )
    weights_growth, fused_growth = kept[256][0] / kept[128][0], kept[256][1] / kept[128][1]
    assert weights_growth > 3.0 and fused_growth < 2.5
    assert kept[256][0] >= 4 * 256 * 256 * 4  # at least the (1, 4, S, S) float weights


def test_median_seconds_runs_the_function_and_rejects_no_repeats():
    calls = []
    t = tl.median_seconds(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5 and t >= 0.0
    with pytest.raises(ValueError, match="at least 1"):
        tl.median_seconds(lambda: None, repeats=0)
