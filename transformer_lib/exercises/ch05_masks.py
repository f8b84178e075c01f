"""Checkers for the exercises of the masks chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..masks import causal_mask, padding_mask, target_mask
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, run
from ._match import _shape, spot

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


def _expect_mask(result, want: torch.Tensor, case: str, axes: str) -> None:
    """Raise the verdict for a mask that is not a bool tensor of want's shape (`axes` names its axes)."""
    if not isinstance(result, torch.Tensor):
        raise Wrong("not-a-tensor", f"Return a tensor, got {type(result).__name__}.")
    if result.shape != want.shape:
        raise Wrong("shape", f"On {case} expected shape {axes} = {tuple(want.shape)}, got {_shape(result)}.")
    if result.dtype != torch.bool and torch.equal(result.bool(), want):
        hint = f"the values are right but the dtype is {result.dtype}: return a bool tensor (True = may attend)."
        raise Wrong("dtype", f"On {case} {hint}")
    if result.dtype != torch.bool:
        raise Wrong("dtype", f"On {case} expected a bool tensor (True = may attend), got dtype {result.dtype}.")


@checker
def check_padding_mask(fn) -> str:
    """fn(tokens (B, S), pad_id) must return (B, 1, 1, S) bool with True at real tokens."""
    g = _seeded(3)
    for lengths, width, pad in _MASK_CASES:
        toks = _padded_batch(lengths, width, pad, g)
        case = f"tokens {toks.tolist()} with pad_id={pad}"
        result = run(fn, toks.clone(), pad, case=case)
        on = f"On {case}"
        want = padding_mask(toks, pad)  # (B, 1, 1, S)
        if isinstance(result, torch.Tensor) and result.shape != want.shape and result.numel() == toks.numel():
            if result.shape == toks.shape:
                hint = "will not broadcast against (B, h, T, S) scores: add two axes, (B, 1, 1, S)."
                return no("no-broadcast", f"{on} the shape {_shape(result)} = (B, S) {hint}")
            hint = "the keys' axis must be the last, (B, 1, 1, S)."
            return no("keys-axis", f"{on} the shape is {_shape(result)}: {hint}")
        _expect_mask(result, want, case, "(B, 1, 1, S)")
        if torch.equal(result, want):
            continue
        if torch.equal(result, ~want):
            return no("reversed", f"{on}: reversed. In this book True means 'may attend', so real tokens are True.")
        if pad != 0 and torch.equal(result, padding_mask(toks, 0)):
            return no("pad-zero", f"{on}: you hard-coded 0 as the pad id. Compare with the pad_id you are given.")
        return no("other", f"{on}: wrong values. True exactly where tokens != pad_id.")
    return CORRECT


# the hint for each classic mistake of the target mask, by id (the checker puts "On <the input>: " before it)
_TARGET_HINTS = {
    "pad-zero": "you hard-coded 0 as the pad id: use pad_id.",
    "reversed": "reversed. True means 'may attend'; True = blocked is PyTorch's convention.",
    "padding-only": "only padding is masked: AND it with the causal mask.",
    "future-only": "only the future is masked: AND it with the padding mask.",
    "upper-triangle": "the mask is upper triangular: the allowed keys are the lower triangle (tril), not triu.",
    "diagonal": "the diagonal is blocked: a token may attend to itself (tril(0), not tril(-1)).",
    "or-not-and": "you combined the masks with OR: a key is allowed only if it is real AND not in the future.",
    "queries": "you masked the padded queries (the rows): the book masks the padded keys, the last axis.",
}


@checker
def check_target_mask(fn) -> str:
    """fn(tokens (B, T), pad_id) must return (B, 1, T, T): not padding AND not in the future."""
    g = _seeded(4)
    for lengths, width, pad in _MASK_CASES[1:] + _MASK_CASES[:1]:
        toks = _padded_batch(lengths, width, pad, g)
        case = f"tokens {toks.tolist()} with pad_id={pad}"
        result = run(fn, toks.clone(), pad, case=case)
        B, T = toks.shape
        want = target_mask(toks, pad)  # (B, 1, T, T)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (B, T, T):
            return no("head-axis", f"On {case} the shape is (B, T, T) = {(B, T, T)}: add the head axis, (B, 1, T, T).")
        _expect_mask(result, want, case, "(B, 1, T, T)")
        if torch.equal(result, want):
            continue
        keys, causal = padding_mask(toks, pad), causal_mask(T)  # (B, 1, 1, T), (T, T)
        mistakes = [
            (padding_mask(toks, 0) & causal, "pad-zero"),
            (~want, "reversed"),
            (keys.expand(B, 1, T, T), "padding-only"),
            (causal.expand(B, 1, T, T), "future-only"),
            (keys & causal.T, "upper-triangle"),
            (keys & causal.tril(-1), "diagonal"),
            (keys | causal, "or-not-and"),
            (keys.transpose(-2, -1) & causal, "queries"),  # the padded queries (B, 1, T, 1) masked
        ]
        spot(result, want, [(wrong, m, f"On {case}: {_TARGET_HINTS[m]}") for wrong, m in mistakes])
        return no("other", f"On {case}: not quite. A key is allowed only if it is real AND not in the future.")
    return CORRECT


_FAMILIES = {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}


@checker
def check_masks_needed(fn: Callable[[str], set]) -> str:
    """fn(family) must return the set of masks ({'padding', 'causal'}) a model family needs."""
    for family, want in _FAMILIES.items():
        got = run(fn, family, case=f"family={family!r}")
        if isinstance(got, str):
            return no(
                "string", f"For {family} you returned the string {got!r}: return a set of names, e.g. {{'padding'}}."
            )
        try:
            got = {str(name).lower() for name in got}
        except TypeError:
            return no("not-a-set", f"For {family} return a set of names, got {type(got).__name__}.")
        if not got <= {"padding", "causal"}:
            return no("names", f"For {family} you returned {sorted(got)}: use the names 'padding' and 'causal'.")
        if got == want:
            continue
        if family == "encoder-only" and "causal" in got:
            return no("extra-causal", "An encoder sees the whole input in both directions: no causal mask.")
        if family == "encoder-only":
            hint = "An encoder-only classifier runs on padded batches: it needs the padding mask."
            return no("missing-padding", hint)
        if family == "decoder-only" and "causal" not in got:
            return no("missing-causal", "A language model must not see the future: it needs the causal mask.")
        if family == "decoder-only":
            hint = "A language model on unpadded chunks of text has no padding to hide: the causal mask is enough."
            return no("extra-padding", hint)
        if "causal" not in got:
            hint = (
                "An encoder-decoder's decoder must not see the future tokens of its target: it needs the causal mask."
            )
            return no("missing-causal", hint)
        return no("missing-padding", "An encoder-decoder's source batches are padded: it needs the padding mask too.")
    return CORRECT


def _ablation(layer, tokens, num_pad, use_mask, how: str = "right") -> float:
    """The largest change (the mean one with how="mean") of the real tokens' outputs, measured right or as one of
    the classic mistakes does (see _ABLATION_HINTS)."""
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    keep = torch.tensor([True] * T + [False] * num_pad).expand(B, -1)[:, None, None, :]  # (B, 1, 1, T + num_pad)
    mask = {"right": keep, "mean": keep, "reversed": ~keep}.get(how) if use_mask else None  # "unmasked": None
    with torch.no_grad():
        change = (layer(padded, mask)[:, :T] - layer(tokens)).abs()
    return (change.mean() if how == "mean" else change.max()).item()


# the hint for each classic mistake of the experiment, by use_mask and then by id (its way of measuring, in _ablation)
_ABLATION_HINTS = {
    True: {
        "unmasked": "On {case} the real tokens moved by {got:.3g}: with use_mask=True pass the padding mask.",
        "reversed": "On {case}: your mask is reversed. True means 'may attend': True at the real tokens.",
    },
    False: {"mean": "On {case}: that is the mean change. Return the largest one, .abs().max()."},
}


@checker
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
            result = run(fn, layer, tokens.clone(), num_pad, use_mask, case=case)
            got, want = measure("the largest change", result)[0], _ablation(layer, tokens, num_pad, use_mask)
            if (use_mask and got <= 1e-4) or (not use_mask and abs(got - want) <= 1e-3 * want + 1e-5):
                continue
            for mistake, hint in _ABLATION_HINTS[use_mask].items():
                if abs(got - _ablation(layer, tokens, num_pad, use_mask, mistake)) <= 1e-3 * got + 1e-5:
                    return no(mistake, hint.format(case=case, got=got))
            if use_mask:
                return no(
                    "moved",
                    f"On {case} the real tokens should not move, got {got:.2e}: compare only the real positions "
                    "and mask the padded keys (shape (B, 1, 1, T + num_pad), True at real tokens).",
                )
            if got <= 1e-4:
                hint = "nothing moved: with use_mask=False pass mask=None, so the padding is seen."
                return no("masked", f"On {case} {hint}")
            return no(
                "other",
                f"On {case} expected a change of {want:.4g}, got {got:.4g}: append num_pad zero vectors, run the "
                "layer you are given with mask=None, and return the largest change of the real tokens' outputs.",
            )
    return CORRECT
