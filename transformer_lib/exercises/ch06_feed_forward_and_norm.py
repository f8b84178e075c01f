"""Checkers for the exercises of the feed-forward, residual and layer-norm chapter."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..encoder import Encoder
from ..layers import LayerNorm
from ..utils import set_seed
from ._common import CORRECT, Wrong, _seeded, aten_ops, checker, measure, no, refusing, run
from ._match import _close, expect_tensor, spot

__all__ = ["check_layer_norm", "check_pre_ln", "check_batch_norm_mean", "check_depth_growth"]

_NORM_OPS = aten_ops(  # where every library norm ends: F.layer_norm, nn.LayerNorm, aten, group and instance norm
    *"""layer_norm native_layer_norm group_norm native_group_norm instance_norm batch_norm native_batch_norm
    _native_batch_norm_legit _native_batch_norm_legit_no_training""".split()
)


def _judge(result, want: torch.Tensor, case: str, mistakes, other: str) -> None:
    """Raise the verdict for a result that is not want: its type or shape, a classic (result, id, hint), or other."""
    expect_tensor(result, want, case)
    if not _close(result, want, atol=1e-4):
        spot(result, want, [(wrong, mistake, f"On {case}: {hint}") for wrong, mistake, hint in mistakes])
        raise Wrong("other", f"On {case}: not quite. {other}")


def _norm(x, w, b, eps, *, unbiased=False, outside=False, axis=-1, centre=True, root=True) -> torch.Tensor:
    """Layer norm over `axis`, right or as a classic mistake computes it (no gain or shift where w or b is None)."""
    var = x.var(axis, unbiased=unbiased, keepdim=True) if centre else (x**2).mean(axis, keepdim=True)
    scale = var.sqrt() + eps if outside else (var + eps).sqrt() if root else var + eps
    out = (x - x.mean(axis, keepdim=True) if centre else x) / scale
    return (out if w is None else out * w) + (0 if b is None else b)


def _layer_norm_mistakes(x, w, b, eps):
    """(result, id, hint) of each classic mistake of layer norm, in order (on a 2-d x, positions = the first axis)."""
    yield _norm(x, w, b, eps, unbiased=True), "unbiased", "use the biased variance: divide by d (unbiased=False)."
    yield _norm(x, w, b, eps, outside=True), "eps-outside", "eps goes inside the root: sqrt(var + eps), not std + eps."
    for fixed in (0.0, 1e-5, 1e-6, 1e-12) if eps > 1e-3 else ():  # only an eps this large shows when it is missing
        yield _norm(x, w, b, fixed), "eps-ignored", f"eps={eps} was ignored or fixed: add the eps you are given."
    yield _norm(x, None, None, eps), "no-affine", "apply the gain and the shift (weight and bias) at the end."
    yield _norm(x, w, None, eps), "no-bias", "the shift (bias) is missing: add it after scaling by weight."
    yield _norm(x, None, b, eps), "no-gain", "the gain (weight) is missing: multiply by it before adding bias."
    yield _norm(x, w, b, eps, root=False), "variance", "divide by the std, sqrt(var + eps), not by the variance."
    yield _norm(x, w, b, eps, centre=False), "not-centred", "subtract the mean first: that is RMS norm, not layer norm."
    yield _norm(x, w, b, eps, axis=0), "first-axis", "you normalised over the first axis: use the last, the features."
    yield _norm(x, w, b, eps, axis=-2), "positions", "you normalised over the positions: use the last axis."


@checker
def check_layer_norm(fn) -> str:
    """fn(x, weight, bias, eps) must equal F.layer_norm over the last axis, written by hand."""
    g = _seeded(5)
    guarded = refusing(fn, F.layer_norm, torch.layer_norm, F.group_norm, F.instance_norm, ops=_NORM_OPS)
    # (shape, eps): d odd and even, eps large enough that where it sits matters, and the default
    for shape, eps in (((3, 4, 10), 0.1), ((5, 7), 0.5), ((2, 3, 4, 16), 1.0), ((6, 9), 1e-5)):
        x = torch.randn(*shape, generator=g) * 0.5 + torch.randn(*shape[:-1], 1, generator=g)  # small spread
        w, b = torch.randn(shape[-1], generator=g), torch.randn(shape[-1], generator=g)
        case = f"x of shape {shape}, eps={eps}"
        result = run(guarded, x.clone(), w.clone(), b.clone(), eps, case=case, names="F.layer_norm")
        other = "Normalise the last axis: (x - mean) / sqrt(var + eps) * weight + bias."
        _judge(result, F.layer_norm(x, shape[-1:], w, b, eps), case, _layer_norm_mistakes(x, w, b, eps), other)
    return CORRECT


@checker
def check_pre_ln(fn) -> str:
    """fn(x, sublayer, norm) must compute x + sublayer(norm(x))."""
    g = _seeded(9)
    for shape in ((2, 3, 8), (4, 6), (1, 5, 12)):
        d = shape[-1]
        x = torch.randn(*shape, generator=g) * 2 + 1
        weight = torch.randn(d, d, generator=g)
        sub = lambda t, weight=weight: torch.tanh(t @ weight) * 3 + 1  # a nonlinear sublayer
        norm = LayerNorm(d, eps=0.1)  # its weight and bias not 1 and 0, so that a new norm is told apart
        norm.load_state_dict({"weight": torch.rand(d, generator=g) + 0.5, "bias": torch.randn(d, generator=g)})
        case = f"x of shape {shape}"
        with torch.no_grad():
            result = run(fn, x.clone(), sub, norm, case=case)
            mistakes = [
                (norm(x + sub(x)), "post-ln", "That is post-LN: normalise the input to the sublayer, not the sum."),
                (sub(norm(x)), "no-residual", "The residual is missing: add x back."),
                (norm(x) + sub(norm(x)), "normalised-residual", "Add back the raw x, not norm(x)."),
                (x + norm(sub(x)), "normalised-output", "You normalised the sublayer's output: normalise its input."),
                (norm(x + sub(norm(x))), "normalised-sum", "Do not normalise the sum as well."),
                (x + sub(x), "no-norm", "The norm is missing: the sublayer takes norm(x)."),
                (x + sub(LayerNorm(d)(x)), "new-norm", "Use the norm you are given, not a new one."),
            ]
            _judge(result, x + sub(norm(x)), case, mistakes, "Pre-LN is x + sublayer(norm(x)).")
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
            return no("features", f"On {case}: that is layer norm's statistic, each token's mean over its features.")
        if shape == (S, d):
            return no("batch-only", f"On {case}: average over the positions too: dims (0, 1), not only the batch.")
        if shape == (B, d):
            return no("positions-only", f"On {case}: average over the batch too: dims (0, 1), not just the positions.")
        if shape in {(), (1,)}:
            return no("one-mean", f"On {case}: one mean for all. Batch norm keeps one per feature: dims (0, 1).")
        expect_tensor(result, want, case)
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
    """Experiment: fn(num_layers, seed) must measure the output std of a pre-LN stack without a final norm."""
    for num_layers, seed in ((1, 71), (5, 72), (24, 73)):
        case = f"num_layers={num_layers}, seed={seed}"
        got = measure("the standard deviation", run(fn, num_layers, seed, case=case))[0]
        want = _depth(num_layers, seed)
        if math.isclose(got, want, rel_tol=1e-3):
            continue
        # a final norm and post-LN (which ends in one) give the same std: that of a normalised output
        if any(math.isclose(got, _depth(num_layers, seed, first, not first), rel_tol=1e-5) for first in (True, False)):
            return no("normalised", f"On {case} the output is normalised (std 1): build it pre-LN, final_norm=False.")
        if math.isclose(got, want**2, rel_tol=1e-3):
            return no("variance", f"On {case}: that is the variance. Return the standard deviation.")
        hint = "call tl.set_seed(seed), build tl.Encoder(d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, "
        hint += "dropout=0.0, norm_first=True, final_norm=False), then draw the input torch.randn(4, 10, 32)."
        return no("other", f"On {case} expected about {want:.3g}, got {got:.3g}: {hint}")
    return CORRECT
