"""Checkers for the exercises of the feed-forward, residual and layer-norm chapter."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..encoder import Encoder
from ..layers import LayerNorm
from ..utils import set_seed
from ._common import CORRECT, Wrong, _seeded, aten_ops, checker, measure, no, refusing, run
from ._match import _close, _shape, spot

__all__ = ["check_layer_norm", "check_pre_ln", "check_batch_norm_mean", "check_depth_growth"]

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
# (shape, eps): d odd and even, eps large enough that where it sits matters, and the default
_LAYER_NORM_CASES = ((3, 4, 10), 0.1), ((5, 7), 0.5), ((2, 3, 4, 16), 1.0), ((6, 9), 1e-5)


def _norm(x, w, b, eps, *, unbiased=False, eps_outside=False, axis=-1, centre=True, root=True) -> torch.Tensor:
    """Layer norm over `axis`, right or as a classic mistake computes it (no gain or shift where w or b is None)."""
    var = x.var(axis, unbiased=unbiased, keepdim=True) if centre else (x**2).mean(axis, keepdim=True)
    scale = var.sqrt() + eps if eps_outside else (var + eps).sqrt() if root else var + eps
    out = (x - x.mean(axis, keepdim=True) if centre else x) / scale
    out = out * w if w is not None else out
    return out + b if b is not None else out


# the hint for each classic mistake of layer norm, by id (the checker puts "On <the input>: " before it)
_LAYER_NORM_HINTS = {
    "unbiased": "use the biased variance (divide by d, unbiased=False), as layer norm does.",
    "eps-outside": "epsilon goes inside the square root: sqrt(var + eps), not std + eps.",
    "eps-ignored": "eps={eps} was ignored (or a fixed eps used): add the eps you are given to the variance.",
    "no-affine": "apply the gain and the shift (weight and bias) at the end.",
    "no-bias": "the shift (bias) is missing: add it after scaling by weight.",
    "no-gain": "the gain (weight) is missing: multiply by it before adding bias.",
    "variance": "divide by the standard deviation sqrt(var + eps), not by the variance.",
    "not-centred": "subtract the mean first: that is RMS normalisation, not layer norm.",
    "first-axis": "you normalised over the first axis: layer norm works over the last axis (the features).",
    "positions": "you normalised over the positions: layer norm works over the last axis (the features).",
}


def _expect_shape_of(result, x: torch.Tensor, case: str) -> None:
    """Raise the verdict for a result that is not a tensor of x's shape."""
    if not isinstance(result, torch.Tensor) or result.shape != x.shape:
        mistake = "shape" if isinstance(result, torch.Tensor) else "not-a-tensor"
        raise Wrong(mistake, f"On {case} expected the shape of x, {tuple(x.shape)}, got {_shape(result)}.")


@checker
def check_layer_norm(fn) -> str:
    """fn(x, weight, bias, eps) must equal F.layer_norm over the last axis, written by hand."""
    g = _seeded(5)
    guarded = refusing(fn, F.layer_norm, torch.layer_norm, F.group_norm, F.instance_norm, ops=_NORM_OPS)
    for shape, eps in _LAYER_NORM_CASES:
        d = shape[-1]
        x = torch.randn(*shape, generator=g) * 0.5 + torch.randn(*shape[:-1], 1, generator=g)  # small spread
        w, b = torch.randn(d, generator=g), torch.randn(d, generator=g)
        case = f"x of shape {shape}, eps={eps}"
        result = run(guarded, x.clone(), w.clone(), b.clone(), eps, case=case, names="F.layer_norm")
        _expect_shape_of(result, x, case)
        want = F.layer_norm(x, (d,), w, b, eps)
        if _close(result, want, atol=1e-4):
            continue
        mistakes = [
            (_norm(x, w, b, eps, unbiased=True), "unbiased"),
            (_norm(x, w, b, eps, eps_outside=True), "eps-outside"),
            *[(_norm(x, w, b, e), "eps-ignored") for e in (0.0, 1e-5, 1e-6, 1e-12) if eps > 1e-3],
            (_norm(x, None, None, eps), "no-affine"),
            (_norm(x, w, None, eps), "no-bias"),
            (_norm(x, None, b, eps), "no-gain"),
            (_norm(x, w, b, eps, root=False), "variance"),
            (_norm(x, w, b, eps, centre=False), "not-centred"),
            (_norm(x, w, b, eps, axis=0), "first-axis"),
            (_norm(x, w, b, eps, axis=-2), "positions"),  # on a 2-d x, the first axis: named just above
        ]
        hints = {m: f"On {case}: " + hint.format(eps=eps) for m, hint in _LAYER_NORM_HINTS.items()}
        spot(result, want, [(wrong, m, hints[m]) for wrong, m in mistakes])
        hint = "not quite. Normalise over the last axis, (x - mean) / sqrt(var + eps), * weight + bias."
        return no("other", f"On {case}: {hint}")
    return CORRECT


# the hint for each classic mistake of a pre-LN residual, by id (the checker puts "On <the input>: " before it)
_PRE_LN_HINTS = {
    "post-ln": "That is post-LN: normalise the input to the sublayer, not the sum.",
    "no-residual": "The residual is missing: add x back.",
    "normalised-residual": "Add back the raw x, not norm(x): the residual stream is never normalised.",
    "normalised-output": "You normalised the sublayer's output: normalise its input, x + sublayer(norm(x)).",
    "normalised-sum": "Do not normalise the sum as well: pre-LN leaves x + sublayer(norm(x)).",
    "no-norm": "The norm is missing: the sublayer takes norm(x).",
    "new-norm": "Use the norm you are given (its weight and bias are not 1 and 0), not a new one.",
}


@checker
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
            result = run(fn, x.clone(), sub, norm, case=case)
            _expect_shape_of(result, x, case)
            want = x + sub(norm(x))
            if _close(result, want, atol=1e-4):
                continue
            mistakes = [
                (norm(x + sub(x)), "post-ln"),
                (sub(norm(x)), "no-residual"),
                (norm(x) + sub(norm(x)), "normalised-residual"),
                (x + norm(sub(x)), "normalised-output"),
                (norm(x + sub(norm(x))), "normalised-sum"),
                (x + sub(x), "no-norm"),
                (x + sub(LayerNorm(d)(x)), "new-norm"),
            ]
            spot(result, want, [(wrong, m, f"On {case}: {_PRE_LN_HINTS[m]}") for wrong, m in mistakes])
        return no("other", f"On {case}: not quite. Pre-LN is x + sublayer(norm(x)).")
    return CORRECT


@checker
def check_batch_norm_mean(fn) -> str:
    """fn(x (B, S, d)) must return what batch norm subtracts: each feature's mean over batch and positions, (d,)."""
    g = _seeded(2)
    for B, S, d in ((4, 5, 6), (3, 7, 2), (2, 3, 9)):
        x = torch.randn(B, S, d, generator=g) + torch.randn(d, generator=g) * 3  # each feature its own mean
        case = f"x of shape {(B, S, d)}"
        result = run(fn, x.clone(), case=case)
        want = x.mean(dim=(0, 1))
        if isinstance(result, torch.Tensor) and result.numel() == d and _close(result.reshape(d), want):
            continue
        shape = tuple(result.shape) if isinstance(result, torch.Tensor) else None
        if shape in {(B, S), (B, S, 1)}:
            hint = "that is each token's mean over its features, layer norm's statistic, not batch norm's."
            return no("features", f"On {case}: {hint}")
        if shape == (S, d):
            return no("batch-only", f"On {case}: average over the positions too: dims (0, 1), not only the batch axis.")
        if shape == (B, d):
            return no("positions-only", f"On {case}: average over the batch too: dims (0, 1), not only the positions.")
        if shape in {(), (1,)}:
            hint = "one mean for everything. Batch norm keeps one mean per feature: dims (0, 1)."
            return no("one-mean", f"On {case}: {hint}")
        if shape != (d,):
            mistake = "shape" if isinstance(result, torch.Tensor) else "not-a-tensor"
            return no(mistake, f"On {case} expected one mean per feature, shape ({d},), got {_shape(result)}.")
        if _close(result, x.var(dim=(0, 1))) or _close(result, x.var(dim=(0, 1), unbiased=False)):
            return no("variance", f"On {case}: that is the variance. Batch norm subtracts the mean.")
        return no("other", f"On {case}: right shape, wrong values: mean over dims (0, 1).")
    return CORRECT


def _depth(num_layers: int, seed: int, norm_first: bool = True, final_norm: bool = False) -> float:
    set_seed(seed)
    sizes = dict(d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, dropout=0.0)
    stack = Encoder(**sizes, norm_first=norm_first, final_norm=final_norm).eval()
    with torch.no_grad():
        return stack(torch.randn(4, 10, 32)).std().item()


@checker
def check_depth_growth(fn) -> str:
    """Experiment: fn(num_layers, seed) measures the output std of a pre-LN stack without a final norm.

    The recipe is fixed (tl.set_seed(seed), build the stack, then draw the input), so the checker
    re-runs it on depths and seeds of its own and compares. Nothing normalises the residual stream of
    such a stack, and every layer adds to it, so the output's spread grows with depth; a final
    LayerNorm would hold it at one.
    """
    for num_layers, seed in ((1, 71), (5, 72), (24, 73)):
        case = f"num_layers={num_layers}, seed={seed}"
        got = measure("the standard deviation", run(fn, num_layers, seed, case=case))[0]
        want = _depth(num_layers, seed)
        if math.isclose(got, want, rel_tol=1e-3):
            continue
        # a final norm and post-LN (which ends in one) give the same std: that of a normalised output
        normalised = [_depth(num_layers, seed, norm_first=first, final_norm=not first) for first in (True, False)]
        if any(math.isclose(got, other, rel_tol=1e-5) for other in normalised):
            return no(
                "normalised",
                f"On {case} the output is still normalised (std 1): a LayerNorm ends your stack. Build it pre-LN "
                "(norm_first=True) with final_norm=False.",
            )
        if math.isclose(got, want**2, rel_tol=1e-3):
            return no("variance", f"On {case}: that is the variance. Return the standard deviation.")
        return no(
            "other",
            f"On {case} expected about {want:.3g}, got {got:.3g}: call tl.set_seed(seed), build "
            "tl.Encoder(d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, dropout=0.0, norm_first=True, "
            "final_norm=False), then draw the input torch.randn(4, 10, 32).",
        )
    return CORRECT
