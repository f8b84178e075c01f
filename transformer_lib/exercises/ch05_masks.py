"""Checkers for the exercises of the masks chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..masks import causal_mask, padding_mask, target_mask
from ._common import CORRECT, _measured, _seeded, attempt
from ._match import _shape

__all__ = ["check_padding_mask", "check_target_mask", "check_masks_needed", "check_padding_ablation"]


def _padded_batch(lengths: tuple[int, ...], width: int, pad: int, g: torch.Generator) -> torch.Tensor:
    """Random ids (never pad, one of them 0) in rows of these lengths, padded with pad on the right."""
    rows = torch.randint(0, 12, (len(lengths), width), generator=g)
    rows[rows == pad] = (pad + 1) % 12
    for row, n in zip(rows, lengths):
        row[n:] = pad
    if pad != 0:
        rows[0, 0] = 0  # a real token 0: an answer that hard-codes pad 0 blocks it
    return rows


# (lengths of the rows, their padded width, pad id): pad ids other than 0, odd and even widths
_MASK_CASES = (((3, 1), 3, 0), ((4, 2, 4), 5, 9), ((2,), 4, 1), ((6, 3), 7, 5))


def _dtype_hint(result: torch.Tensor, want: torch.Tensor, case: str) -> str | None:
    if result.dtype == torch.bool:
        return None
    if result.shape == want.shape and torch.equal(result.bool(), want):
        return (
            f"On {case} the values are right but the dtype is {result.dtype}: return a bool tensor (True = may attend)."
        )
    return f"On {case} expected a bool tensor (True = may attend), got dtype {result.dtype}."


def check_padding_mask(fn) -> str:
    """fn(tokens (B, S), pad_id) must return (B, 1, 1, S) bool with True at real tokens."""
    g = _seeded(3)
    for lengths, width, pad in _MASK_CASES:
        toks = _padded_batch(lengths, width, pad, g)
        case = f"tokens {toks.tolist()} with pad_id={pad}"
        result, hint = attempt(fn, toks.clone(), pad, case=case)
        if hint:
            return hint
        if not isinstance(result, torch.Tensor):
            return f"Return a tensor, got {type(result).__name__}."
        want = padding_mask(toks, pad)  # (B, 1, 1, S)
        B, S = toks.shape
        if result.shape != want.shape:
            if result.shape == toks.shape:
                return (
                    f"On {case} the shape {_shape(result)} = (B, S) will not broadcast against (B, h, T, S) scores: "
                    "add two axes, (B, 1, 1, S)."
                )
            if result.numel() == B * S:
                return f"On {case} the shape is {_shape(result)}: the keys' axis must be the last, (B, 1, 1, S)."
            return f"On {case} expected shape (B, 1, 1, S) = {tuple(want.shape)}, got {_shape(result)}."
        hint = _dtype_hint(result, want, case)
        if hint:
            return hint
        if torch.equal(result, want):
            continue
        if torch.equal(result, ~want):
            return f"On {case}: reversed. In this book True means 'may attend', so real tokens are True."
        if pad != 0 and torch.equal(result, padding_mask(toks, 0)):
            return f"On {case}: you hard-coded 0 as the pad id. Compare with the pad_id you are given."
        return f"On {case}: wrong values. True exactly where tokens != pad_id."
    return CORRECT


def check_target_mask(fn) -> str:
    """fn(tokens (B, T), pad_id) must return (B, 1, T, T): not padding AND not in the future."""
    g = _seeded(4)
    for lengths, width, pad in _MASK_CASES[1:] + _MASK_CASES[:1]:
        toks = _padded_batch(lengths, width, pad, g)
        case = f"tokens {toks.tolist()} with pad_id={pad}"
        result, hint = attempt(fn, toks.clone(), pad, case=case)
        if hint:
            return hint
        if not isinstance(result, torch.Tensor):
            return f"Return a tensor, got {type(result).__name__}."
        B, T = toks.shape
        want = target_mask(toks, pad)  # (B, 1, T, T)
        if result.shape != want.shape:
            if tuple(result.shape) == (B, T, T):
                return f"On {case} the shape is (B, T, T) = {(B, T, T)}: add the head axis, (B, 1, T, T)."
            return f"On {case} expected shape (B, 1, T, T) = {(B, 1, T, T)}, got {_shape(result)}."
        hint = _dtype_hint(result, want, case)
        if hint:
            return hint
        if torch.equal(result, want):
            continue
        keys, causal = padding_mask(toks, pad), causal_mask(T)  # (B, 1, 1, T), (T, T)
        queries = keys.transpose(-2, -1)  # (B, 1, T, 1)
        mistakes = (
            (padding_mask(toks, 0) & causal if pad != 0 else want, "you hard-coded 0 as the pad id: use pad_id."),
            (~want, "reversed. True means 'may attend'; True = blocked is PyTorch's convention."),
            (keys.expand(B, 1, T, T), "only padding is masked: AND it with the causal mask."),
            (causal.expand(B, 1, T, T), "only the future is masked: AND it with the padding mask."),
            (
                keys & causal.T,
                "the mask is upper triangular: the allowed keys are the lower triangle (tril), not triu.",
            ),
            (keys & causal.tril(-1), "the diagonal is blocked: a token may attend to itself (tril(0), not tril(-1))."),
            (
                keys | causal,
                "you combined the masks with OR: a key is allowed only if it is real AND not in the future.",
            ),
            (
                queries & causal,
                "you masked the padded queries (the rows): the book masks the padded keys, the last axis.",
            ),
        )
        for wrong, mistake in mistakes:
            if torch.equal(result, wrong):
                return f"On {case}: {mistake}"
        return f"On {case}: not quite. A key is allowed only if it is real AND not in the future."
    return CORRECT


_FAMILIES = {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}


def check_masks_needed(fn: Callable[[str], set]) -> str:
    """fn(family) must return the set of masks ({'padding', 'causal'}) a model family needs."""
    for family, want in _FAMILIES.items():
        got, hint = attempt(fn, family, case=f"family={family!r}")
        if hint:
            return hint
        if isinstance(got, str):
            return f"For {family} you returned the string {got!r}: return a set of names, e.g. {{'padding'}}."
        try:
            got = {str(name).lower() for name in got}
        except TypeError:
            return f"For {family} return a set of names, got {type(got).__name__}."
        if not got <= {"padding", "causal"}:
            return f"For {family} you returned {sorted(got)}: use the names 'padding' and 'causal'."
        if got == want:
            continue
        if family == "encoder-only" and "causal" in got:
            return "An encoder sees the whole input in both directions: no causal mask."
        if family == "encoder-only":
            return "An encoder-only classifier runs on padded batches: it needs the padding mask."
        if family == "decoder-only" and "causal" not in got:
            return "A language model must not see the future: it needs the causal mask."
        if family == "decoder-only":
            return "A language model on unpadded chunks of text has no padding to hide: the causal mask is enough."
        if "causal" not in got:
            return (
                "An encoder-decoder's decoder must not see the future tokens of its target: it needs the causal mask."
            )
        return "An encoder-decoder's source batches are padded: it needs the padding mask too."
    return CORRECT


def _ablation(layer, tokens, num_pad, use_mask, how: str = "right") -> float:
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    keep = torch.tensor([True] * T + [False] * num_pad).expand(B, -1)[:, None, None, :]  # (B, 1, 1, T + num_pad)
    mask = (~keep if how == "reversed" else keep) if use_mask else None
    with torch.no_grad():
        change = (layer(padded, mask)[:, :T] - layer(tokens)).abs()
    return (change.mean() if how == "mean" else change.max()).item()


def check_padding_ablation(fn) -> str:
    """Experiment: fn(layer, tokens, num_pad, use_mask) measures how much the real tokens' outputs move when
    num_pad zero vectors are appended, with the padding mask if use_mask and with mask=None if not.

    The checker runs it on layers, tokens and padding lengths of its own and compares with its own
    run. With the padding mask the padded keys get no weight and nothing moves; without it, the
    real tokens attend to the padding and their outputs change.
    """
    for seed, (B, T, d, h, num_pad) in enumerate(((1, 4, 16, 2, 3), (2, 5, 12, 3, 2), (3, 3, 8, 4, 6)), start=50):
        torch.manual_seed(seed)
        layer = EncoderLayer(d_model=d, num_heads=h, d_ff=2 * d, dropout=0.0).eval()
        tokens = torch.randn(B, T, d, generator=_seeded(seed))
        for use_mask in (True, False):
            case = f"tokens of shape {(B, T, d)}, num_pad={num_pad}, use_mask={use_mask}"
            result, hint = attempt(fn, layer, tokens.clone(), num_pad, use_mask, case=case)
            if hint:
                return hint
            measured = _measured("the largest change", result)
            if isinstance(measured, str):
                return measured
            got, want = measured[0], _ablation(layer, tokens, num_pad, use_mask)
            if use_mask and got <= 1e-4:
                continue
            if not use_mask and abs(got - want) <= 1e-3 * want + 1e-5:
                continue
            if use_mask and abs(got - _ablation(layer, tokens, num_pad, False)) <= 1e-3 * got + 1e-5:
                return f"On {case} the real tokens moved by {got:.3g}: with use_mask=True pass the padding mask."
            if use_mask and abs(got - _ablation(layer, tokens, num_pad, True, "reversed")) <= 1e-3 * got + 1e-5:
                return f"On {case}: your mask is reversed. True means 'may attend': True at the real tokens."
            if not use_mask and abs(got - _ablation(layer, tokens, num_pad, False, "mean")) <= 1e-3 * got + 1e-5:
                return f"On {case}: that is the mean change. Return the largest one, .abs().max()."
            if not use_mask and got <= 1e-4:
                return f"On {case} nothing moved: with use_mask=False pass mask=None, so the padding is seen."
            if use_mask:
                return (
                    f"On {case} the real tokens should not move, got {got:.2e}: compare only the real positions "
                    "and mask the padded keys (shape (B, 1, 1, T + num_pad), True at real tokens)."
                )
            return (
                f"On {case} expected a change of {want:.4g}, got {got:.4g}: append num_pad zero vectors, run the "
                "layer you are given with mask=None, and return the largest change of the real tokens' outputs."
            )
    return CORRECT
