"""Checkers for the exercises of the feed-forward, residual and layer-norm chapter."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..encoder import Encoder
from ..layers import LayerNorm
from ..utils import set_seed
from ._common import CORRECT, _measured, _seeded, aten_ops, attempt, refusing
from ._match import _close, _shape

__all__ = ["check_layer_norm", "check_pre_ln", "check_batch_norm_mean", "check_depth_growth"]

# (shape, eps): d odd and even, eps large enough that where it sits matters, and the default
# where every spelling of a library norm ends (F.layer_norm, nn.LayerNorm, torch.ops.aten, group and instance norm)
_NORM_OPS = aten_ops(
    "layer_norm",
    "native_layer_norm",
    "group_norm",
    "native_group_norm",
    "instance_norm",
    "batch_norm",
    "native_batch_norm",
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training",
)
_LAYER_NORM_CASES = ((3, 4, 10), 0.1), ((5, 7), 0.5), ((2, 3, 4, 16), 1.0), ((6, 9), 1e-5)


def _norm(x, w, b, eps, *, unbiased=False, eps_outside=False, axis=-1, centre=True, root=True) -> torch.Tensor:
    mean = x.mean(axis, keepdim=True) if centre else 0.0
    var = ((x - x.mean(axis, keepdim=True)) ** 2).sum(axis, keepdim=True) / (x.shape[axis] - (1 if unbiased else 0))
    if not centre:
        var = (x**2).mean(axis, keepdim=True)
    if eps_outside:
        scale = var.sqrt() + eps
    else:
        scale = (var + eps).sqrt() if root else var + eps
    out = (x - mean) / scale
    out = out * w if w is not None else out
    return out + b if b is not None else out


def _layer_norm_mistake(result, x, w, b, eps) -> str | None:
    near = lambda other: _close(result, other, atol=1e-4)
    if near(_norm(x, w, b, eps, unbiased=True)):
        return "use the biased variance (divide by d, unbiased=False), as layer norm does."
    if near(_norm(x, w, b, eps, eps_outside=True)):
        return "epsilon goes inside the square root: sqrt(var + eps), not std + eps."
    if eps > 1e-3 and any(near(_norm(x, w, b, e)) for e in (0.0, 1e-5, 1e-6, 1e-12)):
        return f"eps={eps} was ignored (or a fixed eps used): add the eps you are given to the variance."
    if near(_norm(x, None, None, eps)):
        return "apply the gain and the shift (weight and bias) at the end."
    if near(_norm(x, w, None, eps)):
        return "the shift (bias) is missing: add it after scaling by weight."
    if near(_norm(x, None, b, eps)):
        return "the gain (weight) is missing: multiply by it before adding bias."
    if near(_norm(x, w, b, eps, root=False)):
        return "divide by the standard deviation sqrt(var + eps), not by the variance."
    if near(_norm(x, w, b, eps, centre=False)):
        return "subtract the mean first: that is RMS normalisation, not layer norm."
    if x.dim() > 1 and x.shape[0] > 1 and near(_norm(x, w, b, eps, axis=0)):
        return "you normalised over the first axis: layer norm works over the last axis (the features)."
    if x.dim() > 2 and near(_norm(x, w, b, eps, axis=-2)):
        return "you normalised over the positions: layer norm works over the last axis (the features)."
    return None


def check_layer_norm(fn) -> str:
    """fn(x, weight, bias, eps) must equal F.layer_norm over the last axis, written by hand."""
    g = _seeded(5)
    guarded = refusing(fn, F.layer_norm, torch.layer_norm, F.group_norm, F.instance_norm, ops=_NORM_OPS)
    for shape, eps in _LAYER_NORM_CASES:
        d = shape[-1]
        x = torch.randn(*shape, generator=g) * 0.5 + torch.randn(*shape[:-1], 1, generator=g)  # small spread
        w, b = torch.randn(d, generator=g), torch.randn(d, generator=g)
        case = f"x of shape {shape}, eps={eps}"
        result, hint = attempt(guarded, x.clone(), w.clone(), b.clone(), eps, case=case, names="F.layer_norm")
        if hint:
            return hint
        want = F.layer_norm(x, (d,), w, b, eps)
        if not isinstance(result, torch.Tensor) or result.shape != want.shape:
            return f"On {case} expected the shape of x, {shape}, got {_shape(result)}."
        if _close(result, want, atol=1e-4):
            continue
        mistake = _layer_norm_mistake(result, x, w, b, eps)
        if mistake:
            return f"On {case}: {mistake}"
        return f"On {case}: not quite. Normalise over the last axis, (x - mean) / sqrt(var + eps), * weight + bias."
    return CORRECT


def check_pre_ln(fn) -> str:
    """fn(x, sublayer, norm) must compute x + sublayer(norm(x))."""
    g = _seeded(9)
    for shape in ((2, 3, 8), (4, 6), (1, 5, 12)):
        d = shape[-1]
        x = torch.randn(*shape, generator=g) * 2 + 1
        norm = LayerNorm(d, eps=0.1)
        weight = torch.randn(d, d, generator=g)
        with torch.no_grad():
            norm.weight.copy_(torch.rand(d, generator=g) + 0.5)
            norm.bias.copy_(torch.randn(d, generator=g))
        sub = lambda t, weight=weight: torch.tanh(t @ weight) * 3 + 1  # a nonlinear sublayer
        case = f"x of shape {shape}"
        with torch.no_grad():
            result, hint = attempt(fn, x.clone(), sub, norm, case=case)
            if hint:
                return hint
            want = x + sub(norm(x))
            if not isinstance(result, torch.Tensor) or result.shape != want.shape:
                return f"On {case} expected the shape of x, {shape}, got {_shape(result)}."
            if _close(result, want, atol=1e-4):
                continue
            fresh = LayerNorm(d)
            mistakes = (
                (norm(x + sub(x)), "That is post-LN: normalise the input to the sublayer, not the sum."),
                (sub(norm(x)), "The residual is missing: add x back."),
                (norm(x) + sub(norm(x)), "Add back the raw x, not norm(x): the residual stream is never normalised."),
                (x + norm(sub(x)), "You normalised the sublayer's output: normalise its input, x + sublayer(norm(x))."),
                (norm(x + sub(norm(x))), "Do not normalise the sum as well: pre-LN leaves x + sublayer(norm(x))."),
                (x + sub(x), "The norm is missing: the sublayer takes norm(x)."),
                (x + sub(fresh(x)), "Use the norm you are given (its weight and bias are not 1 and 0), not a new one."),
            )
            for wrong, hint in mistakes:
                if _close(result, wrong, atol=1e-4):
                    return f"On {case}: {hint}"
        return f"On {case}: not quite. Pre-LN is x + sublayer(norm(x))."
    return CORRECT


def check_batch_norm_mean(fn) -> str:
    """fn(x (B, S, d)) must return what batch norm subtracts: each feature's mean over batch and positions, (d,)."""
    g = _seeded(2)
    for B, S, d in ((4, 5, 6), (3, 7, 2), (2, 3, 9)):
        x = torch.randn(B, S, d, generator=g) + torch.randn(d, generator=g) * 3  # each feature its own mean
        case = f"x of shape {(B, S, d)}"
        result, hint = attempt(fn, x.clone(), case=case)
        if hint:
            return hint
        want = x.mean(dim=(0, 1))
        if isinstance(result, torch.Tensor) and result.numel() == d and _close(result.reshape(d), want):
            continue
        shape = tuple(result.shape) if isinstance(result, torch.Tensor) else None
        if shape == (B, S) or shape == (B, S, 1):
            return f"On {case}: that is each token's mean over its features, layer norm's statistic, not batch norm's."
        if shape == (S, d):
            return f"On {case}: average over the positions too: dims (0, 1), not only the batch axis."
        if shape == (B, d):
            return f"On {case}: average over the batch too: dims (0, 1), not only the positions."
        if shape == () or shape == (1,):
            return f"On {case}: one mean for everything. Batch norm keeps one mean per feature: dims (0, 1)."
        if shape != (d,):
            return f"On {case} expected one mean per feature, shape ({d},), got {_shape(result)}."
        if _close(result, x.var(dim=(0, 1))) or _close(result, x.var(dim=(0, 1), unbiased=False)):
            return f"On {case}: that is the variance. Batch norm subtracts the mean."
        return f"On {case}: right shape, wrong values: mean over dims (0, 1)."
    return CORRECT


def _depth(num_layers: int, seed: int, norm_first: bool = True, final_norm: bool = False) -> float:
    set_seed(seed)
    sizes = dict(d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, dropout=0.0)
    stack = Encoder(**sizes, norm_first=norm_first, final_norm=final_norm).eval()
    with torch.no_grad():
        return stack(torch.randn(4, 10, 32)).std().item()


def check_depth_growth(fn) -> str:
    """Experiment: fn(num_layers, seed) measures the output std of a pre-LN stack without a final norm.

    The recipe is fixed (tl.set_seed(seed), build the stack, then draw the input), so the checker
    re-runs it on depths and seeds of its own and compares. Nothing normalises the residual stream of
    such a stack, and every layer adds to it, so the output's spread grows with depth; a final
    LayerNorm would hold it at one.
    """
    for num_layers, seed in ((1, 71), (5, 72), (24, 73)):
        case = f"num_layers={num_layers}, seed={seed}"
        result, hint = attempt(fn, num_layers, seed, case=case)
        if hint:
            return hint
        measured = _measured("the standard deviation", result)
        if isinstance(measured, str):
            return measured
        got = measured[0]
        if math.isclose(got, _depth(num_layers, seed), rel_tol=1e-3):
            continue
        if any(
            math.isclose(got, _depth(num_layers, seed, norm_first=first, final_norm=not first), rel_tol=1e-5)
            for first in (True, False)
        ):  # a final norm and post-LN (which ends in one) give the same std: that of a normalised output
            return (
                f"On {case} the output is still normalised (std 1): a LayerNorm ends your stack. Build it pre-LN "
                "(norm_first=True) with final_norm=False."
            )
        if math.isclose(got**2, _depth(num_layers, seed) ** 2, rel_tol=1e-3) or math.isclose(
            got, _depth(num_layers, seed) ** 2, rel_tol=1e-3
        ):
            return f"On {case}: that is the variance. Return the standard deviation."
        return (
            f"On {case} expected about {_depth(num_layers, seed):.3g}, got {got:.3g}: call tl.set_seed(seed), build "
            "tl.Encoder(d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, dropout=0.0, norm_first=True, "
            "final_norm=False), then draw the input torch.randn(4, 10, 32)."
        )
    return CORRECT
