"""Checkers for the exercises of the attention chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..attention import fused_attention, scaled_dot_product_attention
from ._common import CORRECT, _seeded, aten_ops, checker, measure, no, refusing, reproducible, run
from ._match import _close, _shape

__all__ = ["check_attention", "check_split", "check_score_std", "check_scaling_gradient"]

_LIBRARY = "tl.scaled_dot_product_attention, tl.fused_attention or F.scaled_dot_product_attention"

# (batch shape, T_q, T_k, d_k, d_v): d_k odd and even, d_v != d_k, T_q != T_k, with and without batch axes
# the fused kernels under every spelling of PyTorch's attention (F.scaled_dot_product_attention, torch.ops.aten,
# nn.MultiheadAttention), and the masked softmax its math path uses: F.softmax is `_softmax`, not refused
_FUSED_OPS = aten_ops(
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_attention_math",
    "_safe_softmax",
    "_native_multi_head_attention",
)
_ATTENTION_CASES = ((2, 3), 5, 9, 16, 16), ((), 4, 6, 7, 3), ((3,), 6, 5, 64, 10), ((2, 1), 3, 8, 25, 25)


def _attend(q, k, v, divisor: float, axis: int = -1) -> torch.Tensor:
    return (q @ k.transpose(-2, -1) / divisor).softmax(axis) @ v


@checker
def check_attention(fn) -> str:
    """fn(q, k, v) must return softmax(q k^T / sqrt(d_k)) v for (..., T, d_k) inputs, written by hand."""
    g = _seeded(7)
    guarded = refusing(fn, F.scaled_dot_product_attention, ops=_FUSED_OPS)
    forbidden = (scaled_dot_product_attention, fused_attention)
    for batch, t_q, t_k, d_k, d_v in _ATTENTION_CASES:
        q, k = torch.randn(*batch, t_q, d_k, generator=g), torch.randn(*batch, t_k, d_k, generator=g) * 1.5
        v = torch.randn(*batch, t_k, d_v, generator=g)
        case = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} (d_k={d_k})"
        want = _attend(q, k, v, math.sqrt(d_k))
        result = run(guarded, q.clone(), k.clone(), v.clone(), case=case, forbidden=forbidden, names=_LIBRARY)
        if not isinstance(result, torch.Tensor):
            return no("not-a-tensor", f"Return a tensor, got {type(result).__name__}.")
        if result.shape != want.shape:
            if tuple(result.shape) == (*batch, t_q, t_k):
                return no("weights", f"On {case} you returned the weights {(*batch, t_q, t_k)}: multiply them by v.")
            return no("shape", f"On {case} expected shape {tuple(want.shape)} = (..., T_q, d_v), got {_shape(result)}.")
        if _close(result, want, atol=1e-4):
            continue
        mistakes = [
            (_attend(q, k, v, 1.0), "unscaled", "you forgot to divide the scores by sqrt(d_k)."),
            (_attend(q, k, v, d_k), "divided-by-d_k", "divide by sqrt(d_k), not by d_k."),
            *[
                (_attend(q, k, v, d, axis=-2), "softmax-axis", "the softmax must run over the keys (the last axis).")
                for d in (math.sqrt(d_k), 1.0, d_k)
            ],
            (
                _attend(q, k, v, math.sqrt(d_v)),
                "scaled-by-d_v",
                f"you scaled by the width of v (d_v={d_v}). Use d_k, the width of q and k: q.shape[-1].",
            ),
            *[
                (
                    _attend(q, k, v, math.sqrt(other)),
                    "fixed-d_k",
                    f"you divided by sqrt({other}), a fixed number: read d_k from the input, q.shape[-1].",
                )
                for _, _, _, other, _ in _ATTENTION_CASES
                if other != d_k
            ],
        ]
        for wrong, mistake, hint in mistakes:
            if _close(result, wrong, atol=1e-4):
                return no(mistake, f"On {case}: {hint}")
        return no("other", f"Wrong values on {case}: compare your scores with q @ k.transpose(-2, -1) / sqrt(d_k).")
    return CORRECT


@checker
def check_split(fn) -> str:
    """fn(t (B, S, d_model), h) must return (B, h, S, d_model // h), head j holding features j*d_k.."""
    g = _seeded(11)
    for B, S, d_model, h in ((2, 5, 12, 3), (3, 7, 16, 4), (1, 4, 10, 2), (2, 3, 24, 8)):
        t = torch.randn(B, S, d_model, generator=g)
        d_k = d_model // h
        case = f"t of shape {(B, S, d_model)} with h={h}"
        result = run(fn, t.clone(), h, case=case)
        want = t.view(B, S, h, d_k).transpose(1, 2)
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (B, h, S, d_k):
            if isinstance(result, torch.Tensor) and tuple(result.shape) in {(B, S, h, d_k), (B, d_k, S, h)}:
                return no(
                    "head-axis", f"On {case}: shape {_shape(result)}, the head axis must come second: transpose(1, 2)."
                )
            return no("shape", f"On {case} expected shape (B, h, S, d_k) = {(B, h, S, d_k)}, got {_shape(result)}.")
        if torch.allclose(result, want):
            continue
        if torch.allclose(result, t.reshape(B, h, S, d_k)):
            return no(
                "reshape", f"On {case}: right shape, wrong content. View as (B, S, h, d_k) first, then transpose(1, 2)."
            )
        if torch.allclose(result, t.view(B, S, d_k, h).permute(0, 3, 1, 2)):
            return no(
                "strided-heads",
                f"On {case}: head j holds features j, j+h, j+2h, ... (every h-th one). View as (B, S, h, d_k), "
                "not (B, S, d_k, h), so that head j holds a contiguous block.",
            )
        return no("other", f"On {case}: head j should hold features j*d_k to (j+1)*d_k - 1 of every position.")
    return CORRECT


@checker
def check_score_std(fn: Callable[[int, torch.Generator], float]) -> str:
    """Experiment: fn(d_k, generator) measures the spread of q . k for q, k with independent N(0, 1) entries.

    It draws many pairs with the generator and returns the standard deviation of their dot
    products. The checker runs it with its own seeds and widths: the result must come from the
    draw (the same seed gives the same number, another seed another one) and lie within a few
    standard errors of sqrt(d_k).
    """
    results = {}
    for d_k, seed in ((3, 101), (64, 202), (300, 303)):
        case = f"d_k={d_k} with a generator seeded {seed}"
        results[d_k] = measure("the standard deviation", run(fn, d_k, _seeded(seed), case=case))[0]
    reproducible(
        fn,
        results[64],
        (64, _seeded(202)),
        (64, _seeded(404)),
        case="d_k=64",
        what="the standard deviation",
        draw="draw q and k",
    )
    for d_k, got in results.items():
        want = math.sqrt(d_k)
        if abs(got / want - 1) <= 0.1:
            continue
        if abs(got / d_k - 1) <= 0.1:
            return no(
                "variance",
                f"For d_k={d_k} you got about {got:.3g}: that is the variance (d_k). Return the standard deviation.",
            )
        if abs(got - 1) <= 0.1:
            return no(
                "scaled",
                f"For d_k={d_k} you got about 1: that is the spread after dividing by sqrt(d_k). Measure the raw "
                "dot products.",
            )
        if abs(got) < 0.2 * want:
            return no(
                "mean",
                f"For d_k={d_k} you got {got:.3g}, near 0: that looks like the mean. Return the standard deviation.",
            )
        return no(
            "other",
            f"For d_k={d_k} the spread should be near sqrt(d_k) = {want:.3g}, got {got:.3g}. Draw at least "
            "10,000 pairs, each with d_k entries, and take the std of their dot products.",
        )
    return CORRECT


def _gradient_norm(d_k: int, generator: torch.Generator, divisor: float, reduce: str = "mean") -> float:
    q, k = torch.randn(64, d_k, generator=generator), torch.randn(16, d_k, generator=generator)
    scores = (q @ k.T / divisor).requires_grad_()
    (scores.softmax(-1) * torch.randn(64, 16, generator=generator)).sum().backward()
    norms = scores.grad.norm(dim=-1)
    return (norms.mean() if reduce == "mean" else norms.sum()).item()


@checker
def check_scaling_gradient(fn) -> str:
    """Experiment: fn(d_k, scale, generator) measures the mean gradient norm that reaches the scores.

    The recipe is fixed (64 queries, then 16 keys, then the (64, 16) random tensor, all from the
    generator), so the checker re-runs the same measurement on seeds and widths of its own and
    compares. Scaled by 1/sqrt(d_k) the scores keep unit spread and the gradient stays about the same
    at any width; unscaled, wide heads saturate the softmax and the gradient through it shrinks.
    """
    spread = {}  # the range of the measurement over seeds: a valid route with another draw order lands in it
    for d_k in (4, 48, 256):
        for scale in (True, False):
            values = [_gradient_norm(d_k, _seeded(1000 + s), math.sqrt(d_k) if scale else 1.0) for s in range(12)]
            spread[d_k, scale] = (min(values), max(values))
    results = {}
    for d_k, seed in ((4, 31), (48, 32), (256, 33)):
        for scale in (True, False):
            case = f"d_k={d_k}, scale={scale} with a generator seeded {seed}"
            got = measure("the mean gradient norm", run(fn, d_k, scale, _seeded(seed), case=case))[0]
            results[d_k, scale] = got
            divisor = math.sqrt(d_k) if scale else 1.0
            want = _gradient_norm(d_k, _seeded(seed), divisor)
            if math.isclose(got, want, rel_tol=1e-4):
                continue
            if got < 1e-6 * want:  # zero, up to rounding
                return no(
                    "no-gradient",
                    f"For {case} the gradient norm is {got:.2g}, as good as zero: make the scores a leaf "
                    "(requires_grad) and call backward on a loss that depends on them.",
                )
            mistakes = [
                (math.sqrt(d_k), "always-scaled", "you divide by sqrt(d_k) even when scale is False"),
                (1.0, "never-scaled", "you never divide by sqrt(d_k), even when scale is True"),
                (d_k, "divided-by-d_k", "you divide by d_k: the scaling is sqrt(d_k)"),
            ]
            for wrong_divisor, mistake, hint in mistakes:
                if wrong_divisor != divisor and math.isclose(
                    got, _gradient_norm(d_k, _seeded(seed), wrong_divisor), rel_tol=1e-4
                ):
                    return no(mistake, f"On {case}: {hint}.")
            if math.isclose(got, _gradient_norm(d_k, _seeded(seed), divisor, reduce="sum"), rel_tol=1e-4):
                return no("sum", f"On {case}: that is the sum of the row norms. Return their mean.")
            low, high = spread[d_k, scale]
            if not 0.8 * low <= got <= 1.25 * high:
                return no(
                    "other",
                    f"On {case} expected a mean gradient norm between {low:.3g} and {high:.3g}, got {got:.3g}. "
                    "Draw 64 queries, then 16 keys, then the (64, 16) tensor with the generator.",
                )
    reproducible(
        fn,
        results[256, False],
        (256, False, _seeded(33)),
        (256, False, _seeded(34)),
        case="d_k=256, scale=False",
        what="the mean gradient norm",
        draw="draw q, k and the tensor",
    )
    return CORRECT
