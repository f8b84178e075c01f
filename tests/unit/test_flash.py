"""FlashAttention in PyTorch (transformer_lib.flash) against F.scaled_dot_product_attention and softmax."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_lib import flash


@pytest.mark.parametrize("block", [1, 3, 64, 1000])
def test_the_online_softmax_is_softmax(block):
    x = torch.randn(4, 5, 97, dtype=torch.float64) * 10
    x[0, 0, :50] = -torch.inf  # a row whose first blocks are all masked
    torch.testing.assert_close(flash.online_softmax(x, block), x.softmax(-1))


def _qkv(shape_q, shape_k, dv, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(*shape_k, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(*shape_k[:-1], dv, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v


CASES = [  # (Tq, Tk, block_q, block_k): lengths that are no multiple of the tiles, one token, Tq != Tk
    (37, 37, 16, 8),
    (1, 1, 64, 64),
    (129, 129, 32, 64),
    (20, 53, 8, 16),
    (53, 20, 16, 7),
]


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Tq, Tk, block_q, block_k", CASES)
def test_values_and_gradients_are_pytorchs_fused_attention(Tq, Tk, block_q, block_k, causal, dtype, tol):
    q, k, v = _qkv((2, 3, Tq, 16), (2, 3, Tk, 16), 12, dtype, seed=Tq + Tk)
    ours = flash.flash_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(ours, theirs, atol=tol, rtol=tol)
    grad = torch.randn_like(ours)
    mine = torch.autograd.grad(ours, (q, k, v), grad)
    want = torch.autograd.grad(theirs, (q, k, v), grad)
    for name, a, b in zip("qkv", mine, want):
        torch.testing.assert_close(a, b, atol=10 * tol, rtol=10 * tol, msg=f"d{name}")


def test_a_scale_of_ones_own_and_the_log_sum_exp():
    q, k, v = _qkv((1, 10, 8), (1, 13, 8), 8, torch.float64, seed=1)
    out, lse = flash.flash_forward(q, k, v, scale=0.3, block_q=4, block_k=5)
    scores = q @ k.transpose(-2, -1) * 0.3  # (1, 10, 13)
    torch.testing.assert_close(lse, scores.logsumexp(-1))
    torch.testing.assert_close(out, scores.softmax(-1) @ v)


def test_the_backward_pass_keeps_the_log_sum_exp_not_the_weights():
    """What autograd saves for the backward pass is O(T): q, k, v, the output and one number per query."""
    q, k, v = _qkv((1, 2, 200, 8), (1, 2, 200, 8), 8, torch.float32, seed=2)
    out = flash.flash_attention(q, k, v, block_q=32, block_k=32)
    saved = out.grad_fn.saved_tensors
    assert max(t.numel() for t in saved) == 1 * 2 * 200 * 8  # nothing of 200 x 200
    assert sorted(t.shape for t in saved)[0] == torch.Size([1, 2, 200])  # the log-sum-exp


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.randn(2, 4, 8), torch.randn(2, 4, 6), torch.randn(2, 4, 8)), "must agree"),
        ((torch.randn(2, 4, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 8)), "must agree"),
        ((torch.randn(4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)), "same number of axes"),
    ],
)
def test_bad_shapes_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        flash.flash_attention(*args)
    with pytest.raises(ValueError, match="at least one row"):
        flash.flash_attention(torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8), block_q=0)
    with pytest.raises(ValueError, match="block must be at least 1"):
        flash.online_softmax(torch.randn(3), 0)
