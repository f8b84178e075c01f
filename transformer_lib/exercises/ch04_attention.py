"""Checkers for the exercises of the attention chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..attention import scaled_dot_product_attention
from ._common import _TODO, CORRECT, _close, _measured, _shape

__all__ = ["check_attention", "check_split", "check_score_std", "check_scaling_gradient"]


def check_attention(fn) -> str:
    """fn(q, k, v) must return softmax(q k^T / sqrt(d_k)) v for (..., T, d_k) inputs."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, 3, n, 16, generator=g) for n in (5, 9, 9))
    result = fn(q, k, v)
    if result is None:
        return _TODO
    want = scaled_dot_product_attention(q, k, v)[0]
    if not isinstance(result, torch.Tensor) or result.shape != want.shape:
        return f"Expected shape {tuple(want.shape)}, got {_shape(result)}. Transpose k's last two axes."
    if _close(result, want):
        return CORRECT
    scores = q @ k.transpose(-2, -1)
    if _close(result, scores.softmax(-1) @ v):
        return "Almost: you forgot to divide the scores by sqrt(d_k)."
    if _close(result, (scores / 16).softmax(-1) @ v):
        return "Almost: divide by sqrt(d_k), not by d_k."
    if _close(result, (scores / 4).softmax(-2) @ v):
        return "Almost: the softmax must run over the keys (the last axis), not over the queries."
    return "Not quite: compare your scores with q @ k.transpose(-2, -1) / sqrt(d_k)."


def check_split(fn) -> str:
    """fn(t (B, S, d_model), h) must return (B, h, S, d_model // h), head j holding features j*d_k.."""
    t = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)
    result = fn(t, 3)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (2, 3, 5, 4):
        return f"Expected shape (B, h, S, d_k) = (2, 3, 5, 4), got {_shape(result)}."
    if torch.equal(result, t.view(2, 3, 5, 4)):
        return "Right shape, wrong content: view as (B, S, h, d_k) first, then transpose(1, 2)."
    if not torch.equal(result, t.view(2, 5, 3, 4).transpose(1, 2)):
        return "Not quite: head j should hold features j*d_k to (j+1)*d_k - 1."
    return CORRECT


def check_score_std(fn: Callable[[int], float]) -> str:
    """fn(d_k) must return the standard deviation of q . k for q, k with independent N(0, 1) entries."""
    if fn(4) is None:
        return _TODO
    for d in (1, 4, 64, 1000):
        got = fn(d)
        if abs(got - d) < 1e-6 and d != 1:
            return "That is the variance (d_k). The standard deviation is its square root."
        if abs(got - 1) < 1e-6 and d != 1:
            return "That is after scaling. Before dividing by sqrt(d_k), the spread grows with d_k."
        if abs(got - math.sqrt(d)) > 1e-6:
            return f"For d_k={d} expected {math.sqrt(d):.4g}, got {got}."
    return CORRECT


def check_scaling_gradient(fn) -> str:
    """Experiment: fn(d_k, scale) measures the mean gradient norm that reaches the scores through the softmax.

    Scaled by 1/sqrt(d_k) the scores keep unit spread and the gradient stays about the same at any
    width; unscaled, wide heads saturate the softmax and the gradient through it shrinks.
    """
    results = {}
    for d_k in (4, 256):
        for scale in (True, False):
            measured = _measured("the mean gradient norm", fn(d_k, scale))
            if isinstance(measured, str):
                return measured
            value = measured[0]
            if value <= 0:
                return "The gradient norm is zero: make the scores a leaf (requires_grad) and call backward on a loss."
            results[d_k, scale] = value
    if abs(results[256, True] / results[4, True] - 1) > 0.4:
        return "With scaling the gradient should hardly change between d_k=4 and d_k=256: divide by sqrt(d_k)."
    if results[256, False] > 0.5 * results[256, True]:
        return (
            "Without scaling at d_k=256 the gradient should be much smaller than with it. Are the queries and "
            "keys drawn with unit variance, and do you skip the division when scale is False?"
        )
    return CORRECT
