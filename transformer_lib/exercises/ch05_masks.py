"""Checkers for the exercises of the masks chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..masks import causal_mask, padding_mask, target_mask
from ._common import _TODO, CORRECT, _measured, _shape

__all__ = ["check_padding_mask", "check_target_mask", "check_masks_needed", "check_padding_ablation"]


def check_padding_mask(fn) -> str:
    """fn(tokens (B, S), pad_id) must return (B, 1, 1, S) bool with True at real tokens."""
    for toks, pad in ((torch.tensor([[3, 4, 0], [5, 0, 0]]), 0), (torch.tensor([[9, 2, 9, 9]]), 9)):
        result = fn(toks, pad)
        if result is None:
            return _TODO
        want = padding_mask(toks, pad)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
            return f"Expected a bool tensor, got {getattr(result, 'dtype', type(result).__name__)}."
        if result.shape == toks.shape:
            return f"Shape {_shape(result)} will not broadcast against (B, h, T, S) scores; add two axes: (B, 1, 1, S)."
        if tuple(result.shape) != tuple(want.shape):
            return f"Expected shape {tuple(want.shape)}, got {_shape(result)}."
        if torch.equal(result, ~want):
            return "Reversed: in this book True means 'may attend', so real tokens are True."
        if not torch.equal(result, want):
            return f"Wrong values for pad_id={pad}; did you hard-code 0?"
    return CORRECT


def check_target_mask(fn) -> str:
    """fn(tokens (B, T), pad_id) must return (B, 1, T, T): not padding AND not in the future."""
    toks = torch.tensor([[4, 5, 6, 0], [7, 0, 0, 0]])
    result = fn(toks, 0)
    if result is None:
        return _TODO
    want = target_mask(toks, 0)
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (2, 1, 4, 4):
        return f"Expected shape (B, 1, T, T) = (2, 1, 4, 4), got {_shape(result)}."
    if torch.equal(result, want):
        return CORRECT
    if torch.equal(result, ~want):
        return "Reversed: True means 'may attend'. This is PyTorch's convention (True = blocked)."
    if torch.equal(result, padding_mask(toks, 0).expand(2, 1, 4, 4)):
        return "Only padding is masked: AND it with the causal mask."
    if torch.equal(result, causal_mask(4).expand(2, 1, 4, 4)):
        return "Only the future is masked: AND it with the padding mask."
    if torch.equal(result, padding_mask(toks, 0) & causal_mask(4).T):
        return "The mask is upper triangular: the allowed keys are the lower triangle (tril), not triu."
    return "Not quite: a key is allowed only if it is real AND not in the future."


def check_masks_needed(fn: Callable[[str], set]) -> str:
    """fn(family) must return the set of masks ({'padding', 'causal'}) a model family needs."""
    cases = {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}
    for family, want in cases.items():
        got = fn(family)
        if got is None:
            return _TODO
        got = set(got)
        if got != want:
            if family == "encoder-only" and "causal" in got:
                return "An encoder sees the whole input in both directions: no causal mask."
            if family == "decoder-only" and "causal" not in got:
                return "A language model must not see the future: it needs the causal mask."
            return f"For {family} expected {sorted(want)}, got {sorted(got)}."
    return CORRECT


def check_padding_ablation(fn) -> str:
    """Experiment: fn(use_mask) measures how much the real tokens' outputs move when padding is appended.

    With the padding mask the padded keys get no weight and nothing moves; without it, the real
    tokens attend to the padding and their outputs change.
    """
    measured = _measured("the largest change", fn(True), fn(False))
    if isinstance(measured, str):
        return measured
    a, b = measured
    if a > 1e-4:
        return (
            f"With the padding mask the real tokens should not move, got {a:.2e}. Compare only the real "
            "positions, in eval mode, and mask the padded keys (tl.padding_mask)."
        )
    if b < 1e-3:
        return f"Without the mask the real tokens should move, got {b:.2e}. Pass mask=None in that run."
    return CORRECT
