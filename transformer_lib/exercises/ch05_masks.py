"""Checkers for the exercises of the masks chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..masks import causal_mask, padding_mask, target_mask
from ._common import CORRECT, Wrong, _seeded, checker, counting_calls, measure, no, not_skipped, run
from ._match import _shape, expect_tensor, spot

__all__ = ["check_padding_mask", "check_target_mask", "check_masks_needed", "check_padding_ablation"]

_MASK_CASES = (((3, 1), 3, 0), ((4, 2, 4), 5, 9), ((2,), 4, 1), ((6, 3), 7, 5))  # (row lengths, width, pad id)
_FAMILIES = {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}
_FAMILY_HINTS = {  # the hint for each mistake about a family's masks, by id
    "extra-causal": "an encoder sees the whole input in both directions: no causal mask.",
    "extra-padding": "a language model on unpadded chunks of text has no padding to hide: the causal mask is enough.",
    "missing-causal": "a decoder must not see the future tokens of its target: it needs the causal mask.",
    "missing-padding": "an encoder runs on padded batches: it needs the padding mask.",
}
_ABLATION_HINTS = {  # the hint for each classic mistake of the experiment, by id (how _ablation measures it)
    "unmasked": "On {case} the real tokens moved by {got:.3g}: with use_mask=True pass the padding mask.",
    "reversed": "On {case}: your mask is reversed. True means 'may attend': True at the real tokens.",
    "mean": "On {case}: that is the mean change. Return the largest one, .abs().max().",
}


def _mask_cases(fn, seed: int, cases):
    """(tokens, pad id, the input named, fn's answer) per case: random ids (never pad) in padded rows of its lengths."""
    g = _seeded(seed)
    for lengths, width, pad in cases:
        tokens = torch.randint(0, 12, (len(lengths), width), generator=g)
        tokens[tokens == pad] = (pad + 1) % 12
        tokens[torch.arange(width) >= torch.tensor(lengths)[:, None]] = pad  # each row padded after its length
        if pad != 0:
            tokens[0, 0] = 0  # a real token 0: an answer that hard-codes pad 0 blocks it
        case = f"tokens {tokens.tolist()} with pad_id={pad}"
        yield tokens, pad, case, run(fn, tokens.clone(), pad, case=case)


def _judge_mask(result, want: torch.Tensor, case: str, mistakes: list, other: str) -> None:
    """Raise the verdict for a mask that is not want (bool): reversed, or a classic mistake's (mask, id, hint)."""
    expect_tensor(result, want, case)
    if result.dtype != torch.bool:
        values = "the values are right but " if torch.equal(result.bool(), want) else ""
        raise Wrong("dtype", f"On {case} {values}the dtype is {result.dtype}: return bool (True = may attend).")
    if torch.equal(result, ~want):
        raise Wrong("reversed", f"On {case}: reversed. True means 'may attend' here; True = blocked is PyTorch's.")
    spot(result, want, [(wrong, mistake, f"On {case}: {hint}") for wrong, mistake, hint in mistakes])
    if not torch.equal(result, want):
        raise Wrong("other", f"On {case}: {other}")


@checker
def check_padding_mask(fn) -> str:
    """fn(tokens (B, S), pad_id) must return (B, 1, 1, S) bool with True at real tokens."""
    for tokens, pad, case, result in _mask_cases(fn, 3, _MASK_CASES):
        want = padding_mask(tokens, pad)  # (B, 1, 1, S)
        if isinstance(result, torch.Tensor) and result.shape != want.shape and result.numel() == tokens.numel():
            on = f"On {case} the shape {_shape(result)}"
            if result.shape == tokens.shape:
                return no("no-broadcast", f"{on} = (B, S) does not broadcast to (B, h, T, S) scores: use (B, 1, 1, S).")
            return no("keys-axis", f"{on} is wrong: the keys' axis must be the last, (B, 1, 1, S).")
        mistakes = [(padding_mask(tokens, 0), "pad-zero", "you hard-coded 0 as the pad id: compare with pad_id.")]
        _judge_mask(result, want, case, mistakes, "wrong values. True exactly where tokens != pad_id.")
    return CORRECT


@checker
def check_target_mask(fn) -> str:
    """fn(tokens (B, T), pad_id) must return (B, 1, T, T): not padding AND not in the future."""
    for tokens, pad, case, result in _mask_cases(fn, 4, _MASK_CASES[1:] + _MASK_CASES[:1]):
        (B, T), want = tokens.shape, target_mask(tokens, pad)  # (B, 1, T, T)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (B, T, T):
            return no("head-axis", f"On {case} the shape is (B, T, T) = {(B, T, T)}: add the head axis, (B, 1, T, T).")
        keys, causal = padding_mask(tokens, pad), causal_mask(T)  # (B, 1, 1, T), (T, T)
        mistakes = [
            (padding_mask(tokens, 0) & causal, "pad-zero", "you hard-coded 0 as the pad id: use pad_id."),
            (keys.expand(B, 1, T, T), "padding-only", "only padding is masked: AND it with the causal mask."),
            (causal.expand(B, 1, T, T), "future-only", "only the future is masked: AND it with the padding mask."),
            (keys & causal.T, "upper-triangle", "the mask is upper triangular: the allowed keys are tril, not triu."),
            (keys & causal.tril(-1), "diagonal", "the diagonal is blocked: a token may attend to itself, tril()."),
            (keys | causal, "or-not-and", "you combined the masks with OR: a key must be real AND not in the future."),
            (keys.transpose(-2, -1) & causal, "queries", "you masked the padded queries (rows): mask the keys."),
        ]
        _judge_mask(result, want, case, mistakes, "a key is allowed only if it is real AND not in the future.")
    return CORRECT


@checker
def check_masks_needed(fn: Callable[[str], set]) -> str:
    """fn(family) must return the set of masks ({'padding', 'causal'}) a model family needs."""
    for family, want in _FAMILIES.items():
        got = run(fn, family, case=f"family={family!r}")
        if isinstance(got, str):
            return no("string", f"For {family} you returned the string {got!r}: return a set, e.g. {{'padding'}}.")
        try:
            got = {str(name).lower() for name in got}
        except TypeError:
            return no("not-a-set", f"For {family} return a set of names, got {type(got).__name__}.")
        if not got <= {"padding", "causal"}:
            return no("names", f"For {family} you returned {sorted(got)}: use the names 'padding' and 'causal'.")
        for name in ("causal", "padding"):  # the first mask that got has and should not, or lacks
            if (name in got) != (name in want):
                mistake = f"{'extra' if name in got else 'missing'}-{name}"
                return no(mistake, f"For {family} you returned {sorted(got)}: {_FAMILY_HINTS[mistake]}")
    return CORRECT


def _ablation(layer, tokens, num_pad, use_mask, how: str = "right") -> float:
    """The real tokens' largest (how="mean": mean) change, measured right or as a classic mistake does (by its id)."""
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    keep = torch.tensor([True] * T + [False] * num_pad).expand(B, -1)[:, None, None, :]  # (B, 1, 1, T + num_pad)
    mask = {"right": keep, "mean": keep, "reversed": ~keep}.get(how) if use_mask else None  # "unmasked": None
    with torch.no_grad():
        change = (layer(padded, mask)[:, :T] - layer(tokens)).abs()
    return (change.mean() if how == "mean" else change.max()).item()


@checker
def check_padding_ablation(fn) -> str:
    """Experiment: fn(layer, tokens, num_pad, use_mask) must return the real tokens' largest change when padded."""
    skipped = None  # the first case whose answer came without running the layer
    for seed, (B, T, d, h, num_pad) in enumerate(((1, 4, 16, 2, 3), (2, 5, 12, 3, 2), (3, 3, 8, 4, 6)), start=50):
        torch.manual_seed(seed)
        layer = EncoderLayer(d_model=d, num_heads=h, d_ff=2 * d, dropout=0.0).eval()
        tokens = torch.randn(B, T, d, generator=_seeded(seed))
        for use_mask in (True, False):
            case = f"tokens of shape {(B, T, d)}, num_pad={num_pad}, use_mask={use_mask}"
            with counting_calls(layer) as calls:
                result = run(fn, layer, tokens.clone(), num_pad, use_mask, case=case)
            skipped = skipped or (None if calls[0] else case)  # judged once the numbers are right
            got, want = measure("the largest change", result)[0], _ablation(layer, tokens, num_pad, use_mask)
            if (use_mask and got <= 1e-4) or (not use_mask and abs(got - want) <= 1e-3 * want + 1e-5):
                continue
            for mistake in ("unmasked", "reversed") if use_mask else ("mean",):
                if abs(got - _ablation(layer, tokens, num_pad, use_mask, mistake)) <= 1e-3 * got + 1e-5:
                    return no(mistake, _ABLATION_HINTS[mistake].format(case=case, got=got))
            if use_mask:
                hint = "mask the padded keys, (B, 1, 1, T + num_pad), True at real tokens, and compare the real ones"
                return no("moved", f"On {case} the real tokens should not move, got {got:.2e}: {hint}.")
            if got <= 1e-4:
                return no("masked", f"On {case} nothing moved: with use_mask=False pass mask=None to see the padding.")
            hint = "append num_pad zero vectors, run the layer with mask=None, return the real tokens' largest change"
            return no("other", f"On {case} expected a change of {want:.4g}, got {got:.4g}: {hint}.")
    not_skipped(skipped, "the layer")
    return CORRECT
