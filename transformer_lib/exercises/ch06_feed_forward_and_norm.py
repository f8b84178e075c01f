"""Checkers for the exercises of the feed-forward, residual and layer-norm chapter."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..layers import LayerNorm
from ._common import _TODO, CORRECT, _close, _measured, _shape

__all__ = ["check_layer_norm", "check_pre_ln", "check_batch_norm_mean", "check_depth_growth"]


def check_layer_norm(fn) -> str:
    """fn(x, weight, bias, eps) must equal F.layer_norm over the last axis."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 10, generator=g) * 0.5 + 1  # small spread, large eps: where eps sits matters
    w, b = torch.randn(10, generator=g), torch.randn(10, generator=g)
    eps = 0.1
    result = fn(x, w, b, eps)
    if result is None:
        return _TODO
    want = F.layer_norm(x, (10,), w, b, eps)
    if not isinstance(result, torch.Tensor) or result.shape != want.shape:
        return f"Expected shape {tuple(want.shape)}, got {_shape(result)}."
    if _close(result, want):
        return CORRECT
    centred = x - x.mean(-1, keepdim=True)
    if _close(result, centred / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b):
        return "Almost: use the biased variance (divide by d, unbiased=False)."
    if _close(result, centred / (x.std(-1, unbiased=False, keepdim=True) + eps) * w + b, atol=1e-4):
        return "Almost: epsilon goes inside the square root, sqrt(var + eps)."
    if _close(result, F.layer_norm(x, (10,), None, None, eps)):
        return "Almost: apply the gain and the shift (weight and bias) at the end."
    return "Not quite: normalise over the last axis, then scale by weight and shift by bias."


def check_pre_ln(fn) -> str:
    """fn(x, sublayer, norm) must compute x + sublayer(norm(x))."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 3, 8, generator=g)
    norm = LayerNorm(8)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(8, generator=g) + 0.5)
    sub = lambda t: 3 * t + 1
    with torch.no_grad():
        result = fn(x, sub, norm)
        if result is None:
            return _TODO
        if _close(result, x + sub(norm(x))):
            return CORRECT
        if _close(result, norm(x + sub(x))):
            return "That is post-LN: normalise the input to the sublayer, not the sum."
        if _close(result, sub(norm(x))):
            return "The residual is missing: add x back."
    return "Not quite: pre-LN is x + sublayer(norm(x))."


def check_batch_norm_mean(fn) -> str:
    """fn(x (B, S, d)) must return what batch norm subtracts: each feature's mean over batch and positions, (d,)."""
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(2)) + torch.arange(6.0)
    result = fn(x)
    if result is None:
        return _TODO
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (4, 5):
        return "That is each token's mean over its features: layer norm's statistic, not batch norm's."
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (5, 6):
        return "Average over the positions too: dims (0, 1), not only the batch axis."
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (6,):
        return f"Expected one mean per feature, shape (6,), got {_shape(result)}."
    return CORRECT if _close(result, x.mean(dim=(0, 1))) else "Right shape, wrong values: mean over dims (0, 1)."


def check_depth_growth(fn) -> str:
    """Experiment: fn(num_layers) measures the output std of a pre-LN stack without a final norm.

    Nothing normalises the residual stream of such a stack, and every layer adds to it, so the
    output's spread grows with depth; a final LayerNorm would hold it at one.
    """
    measured = _measured("the standard deviation", fn(1), fn(24))
    if isinstance(measured, str):
        return measured
    a, b = measured
    if abs(a - 1) < 0.02 and abs(b - 1) < 0.02:
        return "Both are 1: the output is still normalised. Build a pre-LN stack (norm_first=True), final_norm=False."
    if b < 1.3 * a:
        return (
            f"The deep stack's output should spread clearly more than the shallow one's, got {a:.2f} and "
            f"{b:.2f}. Use norm_first=True (pre-LN) and feed unit-variance inputs."
        )
    return CORRECT
