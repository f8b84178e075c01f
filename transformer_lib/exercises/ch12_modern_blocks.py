"""Checkers for the exercises of the chapter "From 2017 to today"."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import positional
from ._common import CORRECT, _seeded, checker, no, run
from ._match import expect_tensor, same, spot

__all__ = ["check_rms_norm", "check_rotary", "check_position_accuracy"]

_HINTS = {  # by id, the mistakes named whatever the input: check_rms_norm's, check_rotary's, check_position_accuracy's
    "eps-outside-root": "eps is outside the square root: add it to the mean of the squares, sqrt(mean(x**2) + eps).",
    "no-eps": "Your answer ignores eps (it matters when eps is large): sqrt(mean(x**2) + eps).",
    "fixed-eps": "Your answer uses eps=1e-5 whatever eps it is given: use the eps argument.",
    "layer-norm": "That is LayerNorm: RMSNorm does not subtract the mean, it divides by the root mean square.",
    "centred": "RMSNorm does not subtract the mean from x: divide x itself.",
    "std": "That divides by the standard deviation: RMSNorm uses mean(x**2), not the variance.",
    "no-weight": "Almost: multiply by the learned weight (the gain) at the end.",
    "no-root": "Take the square root: divide by sqrt(mean(x**2) + eps), not by the mean square.",
    "sum": "Use the mean of the squares over the last dimension, not their sum.",
    "first-axis": "Normalise over the last dimension (the features), not the first.",
    "weight-added": "Multiply by the weight, do not add it.",
    "adjacent-pairs": "Those are the paper's adjacent pairs (2i, 2i + 1): pair i with i + d_k/2, as Llama does.",
    "reversed": "Rotated the wrong way: the first of the pair becomes a cos - b sin, the second a sin + b cos.",
    "doubled-exponent": "The exponent is doubled: pair i turns by position * 10000 ** (-2i / d_k), i counting pairs.",
    "halved-exponent": "The exponent lacks its 2: pair i turns by position * 10000 ** (-2i / d_k).",
    "unrotated": "Nothing was turned: the output equals x.",
    "wrong-way": "Shifted the wrong way: position i copies the token `shift` places *before* it, tokens[:, i - shift].",
    "no-shift": "No shift: that compares each prediction with the token at its own position, not tokens[:, i - shift].",
    "off-by-one": "Off by one: that compares with the token one place back; use `shift` places back.",
    "counts": "Those are counts: divide by the batch size for an accuracy.",
    "error-rate": "Upside down: that is the error rate, 1 - accuracy.",
}


@checker
def check_rms_norm(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]) -> str:
    """fn(x (..., d), weight (d,), eps) -> x / sqrt(mean(x**2) + eps) * weight, over the last dimension."""
    g = _seeded(12)  # shapes, widths, means and eps all vary; one eps is large enough to matter
    x1 = torch.randn(3, 5, 8, generator=g) * 3 + 1  # a mean far from 0 tells RMSNorm from LayerNorm
    x2 = torch.randn(4, 6, generator=g) * 0.5 - 0.3  # small values: eps = 0.5 changes the result a lot
    x2[1] = 0.0  # an all-zero row: without eps inside the root it becomes NaN
    x3 = torch.randn(2, 3, 4, 16, generator=g) * 2
    cases = [
        ("x of shape (3, 5, 8) with eps=1e-05", x1, torch.rand(8, generator=g) + 0.5, 1e-5),
        ("x of shape (4, 6) with eps=0.5 (one row all zeros)", x2, torch.rand(6, generator=g) + 0.5, 0.5),
        ("x of shape (2, 3, 4, 16) with eps=0.01", x3, torch.randn(16, generator=g), 0.01),
    ]
    for case, x, weight, eps in cases:
        got = run(fn, x.clone(), weight.clone(), eps, case=case)
        x, w = x.double(), weight.double()
        ms = x.pow(2).mean(-1, keepdim=True)  # (..., 1)
        want = x / (ms + eps).sqrt() * w
        expect_tensor(got, want, case)
        if same(got, want):
            continue
        centred, var = x - x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        mistakes = [  # eps=1e-6 typed in is not told from 1e-5 on these inputs: both are "fixed-eps"
            (x / (ms.sqrt() + eps) * w, "eps-outside-root"),
            (x / ms.sqrt() * w, "no-eps"),
            (x / (ms + 1e-5).sqrt() * w, "fixed-eps"),
            (centred / (var + eps).sqrt() * w, "layer-norm"),
            (centred / (ms + eps).sqrt() * w, "centred"),
            (x / (var + eps).sqrt() * w, "std"),
            (x / (ms + eps).sqrt(), "no-weight"),
            (x / (ms + eps) * w, "no-root"),
            (x / (x.pow(2).sum(-1, keepdim=True) + eps).sqrt() * w, "sum"),
            (x / (x.pow(2).mean(0, keepdim=True) + eps).sqrt() * w, "first-axis"),
            (x / (ms + eps).sqrt() + w, "weight-added"),
        ]
        spot(got, want, [(wrong, mistake, _HINTS[mistake]) for wrong, mistake in mistakes])
        if not torch.isfinite(got).all():
            return no("nan", f"On {case} your answer has NaN or inf: an all-zero vector needs eps inside the root.")
        return no("other", f"Not RMSNorm on {case}: x / sqrt(mean(x**2 over the last dimension) + eps) * weight.")
    return CORRECT


def _rotate(x: torch.Tensor, positions: torch.Tensor, adjacent: bool = False, rate: float = 1.0) -> torch.Tensor:
    """RoPE's closed form: pair i turned by position * 10000 ** (-rate * 2i / d) (rate 2: doubled, 0.5: no 2)."""
    d, x = x.shape[-1], x.double()
    theta = 10000.0 ** (-rate * torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,): one per pair
    angle = positions[:, None].double() * theta  # (T, d/2)
    # a pair: coordinates i and i + d/2 (Llama's layout in Hugging Face) or 2i and 2i + 1 (the RoFormer paper's)
    a, b = (x[..., 0::2], x[..., 1::2]) if adjacent else (x[..., : d // 2], x[..., d // 2 :])
    ra, rb = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    return torch.stack([ra, rb], dim=-1).flatten(-2) if adjacent else torch.cat([ra, rb], dim=-1)


@checker
def check_rotary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(x (B, h, T, d_k), positions (T,)) -> x, each (i, i + d_k/2) pair turned by position * 10000**(-2i/d_k)."""
    g = _seeded(13)
    forbidden = (positional.apply_rotary, positional.rotary_tables, positional.turn)  # written by hand: they refuse
    shapes = ((2, 3, 6, 8), (1, 2, 5, 16), (3, 1, 4, 4))
    position_lists = ([0, 1, 2, 5, 9, 40], [7, 3, 3, 100, 12], [11, 12, 13, 14])  # far, repeated, out of order
    for shape, listed in zip(shapes, position_lists):
        x, positions = torch.randn(*shape, generator=g), torch.tensor(listed)
        case = f"x {shape} at positions {listed}"
        want = _rotate(x, positions)
        got = run(fn, x.clone(), positions.clone(), case=case, forbidden=forbidden, names="tl.apply_rotary")
        expect_tensor(got, want, case)
        if same(got, want, atol=1e-4):
            continue
        mistakes = [
            (_rotate(x, positions, adjacent=True), "adjacent-pairs"),
            (_rotate(x, -positions), "reversed"),
            (_rotate(x, positions, rate=2.0), "doubled-exponent"),
            (_rotate(x, positions, rate=0.5), "halved-exponent"),
            (_rotate(x, torch.arange(positions.numel())), "counted-positions"),
            (x.double(), "unrotated"),
        ]
        counted = f"Your answer turns by 0, 1, 2, ... instead of the positions it is given ({case}): use `positions`."
        hints = _HINTS | {"counted-positions": counted}
        spot(got, want, [(wrong, mistake, hints[mistake]) for wrong, mistake in mistakes])
        if same(got[..., :1, :], want[..., :1, :], atol=1e-4) and positions[0] == 0:
            return no("angles", f"On {case} only position 0 is right: check the angles, position * 10000**(-2i / d_k).")
        return no("other", f"Not the rotation on {case}: compare one pair at one position with the closed form.")
    return CORRECT


@checker
def check_position_accuracy(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> str:
    """Experiment: fn(predictions (B, T), tokens (B, T), shift) -> (T - shift,) accuracies of copying shift back."""
    for seed, B, T, shift, vocab in ((0, 16, 9, 3, 5), (1, 40, 12, 1, 4), (2, 7, 20, 8, 6)):
        g = _seeded(seed)  # random tokens, and predictions that copy the token `shift` back, often right
        tokens = torch.randint(0, vocab, (B, T), generator=g)
        predictions = torch.randint(0, vocab, (B, T), generator=g)
        copy = torch.rand(B, T, generator=g) < torch.linspace(0.9, 0.3, T)  # accuracy falls along the positions
        predictions[:, shift:] = torch.where(copy[:, shift:], tokens[:, :-shift], predictions[:, shift:])
        same_place = torch.rand(B, T, generator=g) < 0.15  # some predictions repeat the token in place
        predictions = torch.where(same_place, tokens, predictions)
        case = f"a batch of shape ({B}, {T}) with shift={shift}"
        hits = predictions[:, shift:] == tokens[:, :-shift]  # (B, T - shift): position i copies tokens[:, i - shift]
        want = hits.double().mean(0)  # (T - shift,)
        got = run(fn, predictions.clone(), tokens.clone(), shift, case=case)
        other_shape = isinstance(got, torch.Tensor) and got.shape != want.shape
        if other_shape and got.numel() == T:
            return no("all-positions", f"Positions before `shift` copy nothing: return T - shift = {T - shift} values.")
        if other_shape and got.shape == (B,):
            return no("per-sequence", "One accuracy per sequence: average over the batch (dim 0), one per position.")
        expect_tensor(got, want, case)
        if same(got, want, atol=1e-6):
            continue
        mistakes = [
            ((predictions[:, :-shift] == tokens[:, shift:]).double().mean(0), "wrong-way"),
            ((predictions[:, shift:] == tokens[:, shift:]).double().mean(0), "no-shift"),
            ((predictions[:, shift:] == tokens[:, shift - 1 : T - 1]).double().mean(0), "off-by-one"),
            (hits.double().sum(0), "counts"),
            (1 - want, "error-rate"),
        ]
        spot(got, want, [(wrong, mistake, _HINTS[mistake]) for wrong, mistake in mistakes], atol=1e-6)
        expected, answer = [round(v, 3) for v in want.tolist()], [round(v, 3) for v in got.double().tolist()]
        return no("other", f"On {case} expected {expected} (the mean over the batch at each position), got {answer}.")
    return CORRECT
