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


@pytest.mark.slow  # the profiler records every operation: 3 s
def test_peak_bytes_sees_attentions_square_and_flash_attentions_line():
    import math

    from transformer_lib import flash

    def naive(q, k, v):
        return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v

    peaks = {}
    for T in (256, 512, 1024):
        q, k, v = (torch.randn(1, 1, T, 64) for _ in range(3))
        peaks[T] = (
            tl.peak_bytes(lambda q=q, k=k, v=v: naive(q, k, v)),
            tl.peak_bytes(lambda q=q, k=k, v=v: flash.flash_forward(q, k, v)),
        )
        scores = T * T * 4  # one float32 T x T matrix
        assert peaks[T][0] >= 2 * scores  # the scores and their softmax, both T x T, at once
        assert T * 64 * 4 <= peaks[T][1] < 4 * T * 64 * 4 + 4 * 64 * 64 * 4  # the output and a few tiles
    assert peaks[1024][0] / peaks[256][0] == pytest.approx(16, rel=0.01)  # 4 times longer, 16 times the memory
    assert peaks[1024][1] / peaks[256][1] < 4  # at most 4 times: linear, plus what one tile holds
    assert tl.peak_bytes(lambda: None) == 0
