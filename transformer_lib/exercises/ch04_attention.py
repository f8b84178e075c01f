"""Checkers for the exercises of the attention chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..attention import fused_attention, scaled_dot_product_attention
from ._common import CORRECT, _seeded, aten_ops, checker, measure, no, refusing, reproducible, run
from ._match import _close, _shape, expect_tensor

__all__ = ["check_attention", "check_split", "check_score_std", "check_scaling_gradient"]

_LIBRARY = "tl.scaled_dot_product_attention, tl.fused_attention or F.scaled_dot_product_attention"
# the fused kernels under every spelling of PyTorch's attention (F.scaled_dot_product_attention, torch.ops.aten,
# nn.MultiheadAttention), and the masked softmax its math path uses: F.softmax is `_softmax`, not refused
_FUSED_OPS = aten_ops(
    *"""scaled_dot_product_attention _scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu
    _scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention _scaled_dot_product_attention_math
    _safe_softmax _native_multi_head_attention""".split()
)
# (batch shape, T_q, T_k, d_k, d_v): d_k odd and even, d_v != d_k, T_q != T_k, with and without batch axes;
# T_k != d_v always, so the weights (..., T_q, T_k) never have the output's shape
_ATTENTION_CASES = ((2, 3), 5, 9, 16, 16), ((), 4, 6, 7, 3), ((3,), 6, 5, 64, 10), ((2, 1), 3, 8, 25, 25)
# and one with large scores (q 40 times larger: scores up to about 180), where exp overflows float32 above about 88
_LARGE_SCORES, _Q_SCALE = ((2,), 5, 7, 12, 6), 40.0


def _attend(q, k, v, divisor: float, axis: int = -1) -> torch.Tensor:
    return (q @ k.transpose(-2, -1) / divisor).softmax(axis) @ v


def _attend_scores(q, k) -> torch.Tensor:
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)


def _attention_mistakes(q, k, v):
    """(result, id, hint) of each classic mistake of attention on q, k, v, in the order they are named."""
    d_k, d_v = q.shape[-1], v.shape[-1]
    yield _attend(q, k, v, 1.0), "unscaled", "you forgot to divide the scores by sqrt(d_k)."
    yield _attend(q, k, v, d_k), "divided-by-d_k", "divide by sqrt(d_k), not by d_k."
    for divisor in (math.sqrt(d_k), 1.0, d_k):
        yield _attend(q, k, v, divisor, axis=-2), "softmax-axis", "the softmax must run over the keys (the last axis)."
    hint = f"you scaled by the width of v (d_v={d_v}). Use d_k, the width of q and k: q.shape[-1]."
    yield _attend(q, k, v, math.sqrt(d_v)), "scaled-by-d_v", hint
    for other in [case[3] for case in _ATTENTION_CASES if case[3] != d_k]:  # another case's d_k, hard-coded
        hint = f"you divided by sqrt({other}), a fixed number: read d_k from the input, q.shape[-1]."
        yield _attend(q, k, v, math.sqrt(other)), "fixed-d_k", hint


@checker
def check_attention(fn) -> str:
    """fn(q, k, v) must return softmax(q k^T / sqrt(d_k)) v for (..., T, d_k) inputs, written by hand."""
    g = _seeded(7)
    guarded = refusing(fn, F.scaled_dot_product_attention, ops=_FUSED_OPS)
    forbidden = (scaled_dot_product_attention, fused_attention)
    for (batch, t_q, t_k, d_k, d_v), scale in [(c, 1.0) for c in _ATTENTION_CASES] + [(_LARGE_SCORES, _Q_SCALE)]:
        q, k = torch.randn(*batch, t_q, d_k, generator=g) * scale, torch.randn(*batch, t_k, d_k, generator=g) * 1.5
        v = torch.randn(*batch, t_k, d_v, generator=g)
        large = f", large scores (up to {_attend_scores(q, k).abs().max():.0f})" if scale > 1 else ""
        case = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} (d_k={d_k}{large})"
        want = _attend(q, k, v, math.sqrt(d_k))
        result = run(guarded, q.clone(), k.clone(), v.clone(), case=case, forbidden=forbidden, names=_LIBRARY)
        if isinstance(result, torch.Tensor) and result.shape == (*batch, t_q, t_k):
            return no("weights", f"On {case} you returned the weights {(*batch, t_q, t_k)}: multiply them by v.")
        expect_tensor(result, want, case)
        if _close(result, want, atol=1e-4):
            continue
        if scale > 1 and not result.isfinite().all():
            hint = "exp of a score above about 88 is inf in float32 (and of one below about -103 is 0), so exp over "
            hint += "its sum gives inf / inf = NaN: take each row's max off the scores first, which leaves the "
            hint += "softmax as it is, or call scores.softmax(-1)"
            return no("overflow", f"On {case} your output holds inf or NaN: {hint}.")
        for wrong, mistake, hint in _attention_mistakes(q, k, v):
            if _close(result, wrong, atol=1e-4):
                return no(mistake, f"On {case}: {hint}")
        return no("other", f"Wrong values on {case}: compare your scores with q @ k.transpose(-2, -1) / sqrt(d_k).")
    return CORRECT


@checker
def check_split(fn) -> str:
    """fn(t (B, S, d_model), h) must return (B, h, S, d_model // h), head j holding features j*d_k.."""
    g = _seeded(11)
    for B, S, h, d_k in ((2, 5, 3, 4), (3, 7, 4, 4), (1, 4, 2, 5), (2, 3, 8, 3)):
        t = torch.randn(B, S, h * d_k, generator=g)
        case = f"t of shape {tuple(t.shape)} with h={h}"
        result = run(fn, t.clone(), h, case=case)
        want = t.view(B, S, h, d_k).transpose(1, 2)  # (B, h, S, d_k)
        shape = tuple(result.shape) if isinstance(result, torch.Tensor) else None
        if shape != want.shape and shape in {(B, S, h, d_k), (B, d_k, S, h)}:
            return no("head-axis", f"On {case}: shape {shape}, the head axis must come second: transpose(1, 2).")
        if shape != want.shape:  # a list, too, is named by its shape
            return no("shape", f"On {case} expected shape (B, h, S, d_k) = {(B, h, S, d_k)}, got {_shape(result)}.")
        if torch.allclose(result, want):
            continue
        if torch.allclose(result, t.reshape(B, h, S, d_k)):
            return no("reshape", f"On {case}: right shape, wrong order: view as (B, S, h, d_k), then transpose(1, 2).")
        if torch.allclose(result, t.view(B, S, d_k, h).permute(0, 3, 1, 2)):
            hint = "head j holds every h-th feature (j, j+h, ...): view as (B, S, h, d_k), not (B, S, d_k, h)."
            return no("strided-heads", f"On {case}: {hint}")
        return no("other", f"On {case}: head j should hold features j*d_k to (j+1)*d_k - 1 of every position.")
    return CORRECT


@checker
def check_score_std(fn: Callable[[int, torch.Generator], float]) -> str:
    """Experiment: fn(d_k, generator) must return the std of q . k over many draws of q, k ~ N(0, 1): sqrt(d_k)."""
    what = "the standard deviation"
    results = {}
    for d_k, seed in ((3, 101), (64, 202), (300, 303)):
        results[d_k] = measure(what, run(fn, d_k, _seeded(seed), case=f"d_k={d_k} with a generator seeded {seed}"))[0]
    again, other = (64, _seeded(202)), (64, _seeded(404))
    reproducible(fn, results[64], again, other, case="d_k=64", what=what, draw="draw q and k")
    for d_k, got in results.items():
        want, on = math.sqrt(d_k), f"For d_k={d_k} you got {got:.3g}"
        if abs(got / want - 1) <= 0.1:
            continue
        if abs(got / d_k - 1) <= 0.1:
            return no("variance", f"{on}: that is the variance (d_k). Return the standard deviation.")
        if abs(got - 1) <= 0.1:
            return no("scaled", f"{on}: that is the spread after dividing by sqrt(d_k). Measure the raw dot products.")
        if abs(got) < 0.2 * want:
            return no("mean", f"{on}, near 0: that looks like the mean. Return the standard deviation.")
        return no("other", f"{on}, expected about sqrt(d_k) = {want:.3g}: draw 10,000+ pairs, take the std of q . k.")
    return CORRECT


def _gradient_norm(d_k: int, generator: torch.Generator, divisor: float, reduce: str = "mean") -> float:
    q, k = torch.randn(64, d_k, generator=generator), torch.randn(16, d_k, generator=generator)
    scores = (q @ k.T / divisor).requires_grad_()
    (scores.softmax(-1) * torch.randn(64, 16, generator=generator)).sum().backward()
    norms = scores.grad.norm(dim=-1)
    return (norms.mean() if reduce == "mean" else norms.sum()).item()


@checker
def check_scaling_gradient(fn) -> str:
    """Experiment: fn(d_k, scale, generator) must measure the mean gradient norm at the scores, by a fixed recipe."""
    what = "the mean gradient norm"
    results = {}
    for d_k, seed in ((4, 31), (48, 32), (256, 33)):
        for scale in (True, False):
            case = f"d_k={d_k}, scale={scale} with a generator seeded {seed}"
            got = results[d_k, scale] = measure(what, run(fn, d_k, scale, _seeded(seed), case=case))[0]
            divisor = math.sqrt(d_k) if scale else 1.0
            want = _gradient_norm(d_k, _seeded(seed), divisor)
            if math.isclose(got, want, rel_tol=1e-4):
                continue
            if got < 1e-6 * want:  # zero, up to rounding
                hint = "as good as zero: make the scores a leaf (requires_grad) and call backward on a loss of them."
                return no("no-gradient", f"For {case} the gradient norm is {got:.2g}, {hint}")
            mistakes = [  # (divisor, reduction, id, hint)
                (math.sqrt(d_k), "mean", "always-scaled", "you divide by sqrt(d_k) even when scale is False."),
                (1.0, "mean", "never-scaled", "you never divide by sqrt(d_k), even when scale is True."),
                (d_k, "mean", "divided-by-d_k", "you divide by d_k: the scaling is sqrt(d_k)."),
                (divisor, "sum", "sum", "that is the sum of the row norms. Return their mean."),
            ]
            for wrong, reduce, mistake, hint in mistakes:
                if (wrong, reduce) != (divisor, "mean"):
                    if math.isclose(got, _gradient_norm(d_k, _seeded(seed), wrong, reduce), rel_tol=1e-4):
                        return no(mistake, f"On {case}: {hint}")
            # the measurement's range over other seeds: a valid route with another draw order lands in it
            spread = [_gradient_norm(d_k, _seeded(1000 + s), divisor) for s in range(12)]
            low, high = min(spread), max(spread)
            if not 0.8 * low <= got <= 1.25 * high:
                hint = "draw 64 queries, then 16 keys, then the (64, 16) tensor with the generator"
                return no("other", f"On {case} expected a norm of {low:.3g} to {high:.3g}, got {got:.3g}: {hint}.")
    again, other = (256, False, _seeded(33)), (256, False, _seeded(34))
    draw = "draw q, k and the tensor"
    reproducible(fn, results[256, False], again, other, case="d_k=256, scale=False", what=what, draw=draw)
    return CORRECT
