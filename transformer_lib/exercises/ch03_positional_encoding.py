"""Checkers for the exercises of the positional-encoding chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..positional import sinusoidal_encoding
from ._common import CORRECT, _seeded, checker, measure, no, run
from ._match import _close, _shape, spot

__all__ = ["check_encoding", "check_self_similarity", "check_wavelength", "check_permutation_gap"]


def _table(max_len: int, d: int, exponent: Callable[[int], float], base: float = 10000.0, start: int = 0):
    """The encoding with a chosen exponent per pair index i (the right one is 2i/d), in float64."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]
    rates = torch.tensor([base ** -exponent(i) for i in range(d // 2)], dtype=torch.float64)
    out = torch.zeros(max_len, d, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * rates), torch.cos(pos * rates)
    return out


def _doubled_exponent(max_len: int, d: int) -> torch.Tensor:
    """A loop over dimension indices that uses 2*i/d again: every exponent doubled (a known bug)."""
    return _table(max_len, d, lambda i: 4 * i / d).float()


_ENCODING_CASES = ((5, 4), (30, 10), (12, 64), (9, 6))
# the hint for each classic mistake of the encoding, by id (the checker puts "On <the input>: " before it)
_ENCODING_HINTS = {
    "swapped": "Sines and cosines are swapped: even dimensions take the sine, odd ones the cosine.",
    "not-interleaved": (
        "All sines come first, then all cosines: interleave them, sine in dimension 2i, cosine in 2i + 1."
    ),
    "doubled-exponent": (
        "The exponent is doubled: your i steps by 2 (a dimension index) and you still use 2i/d. Use the pair "
        "index i = 0, 1, ..., d/2 - 1 in 2i/d."
    ),
    "halved-exponent": "The exponent is halved: it is 2i/d with the pair index i, not i/d.",
    "multiplied": "You multiplied the position by 10000^(2i/d): divide it, pos / 10000^(2i/d).",
    "off-by-one": "Off by one: positions start at 0 (row 0 is sin 0 = 0, cos 0 = 1), not at 1.",
}


def _encoding_mistakes(max_len: int, d: int) -> list[tuple[torch.Tensor, str]]:
    """(the table, the id) of each classic mistake of the encoding, for this input."""
    right = _table(max_len, d, lambda i: 2 * i / d)
    return [
        (torch.stack([right[:, 1::2], right[:, 0::2]], dim=-1).reshape(max_len, d), "swapped"),
        (torch.cat([right[:, 0::2], right[:, 1::2]], dim=-1), "not-interleaved"),
        (_doubled_exponent(max_len, d), "doubled-exponent"),
        (_table(max_len, d, lambda i: i / d), "halved-exponent"),
        (_table(max_len, d, lambda i: -2 * i / d), "multiplied"),
        (_table(max_len, d, lambda i: 2 * i / d, start=1), "off-by-one"),
    ]


@checker
def check_encoding(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(max_len, d_model) must return the sinusoidal encoding (max_len, d_model), written with loops by hand."""
    for max_len, d in _ENCODING_CASES:
        case = f"max_len={max_len}, d_model={d}"
        result = run(fn, max_len, d, case=case, forbidden=(sinusoidal_encoding,), names="tl.sinusoidal_encoding")
        if not isinstance(result, torch.Tensor):
            return no("not-a-tensor", f"Return a tensor, got {type(result).__name__}.")
        if tuple(result.shape) != (max_len, d):
            if tuple(result.shape) == (d, max_len):
                hint = f"On {case} the shape is (d_model, max_len) = {(d, max_len)}: one row per position, please."
                return no("transposed", hint)
            return no("shape", f"On {case} expected shape (max_len, d_model) = {(max_len, d)}, got {_shape(result)}.")
        want = sinusoidal_encoding(max_len, d)
        if _close(result, want, atol=1e-4):
            continue
        mistakes = _encoding_mistakes(max_len, d)
        spot(result, want, [(wrong, m, f"On {case}: {_ENCODING_HINTS[m]}") for wrong, m in mistakes])
        for other in (4, 10, 64, 6, 512):
            if other != d and _close(result, _table(max_len, d, lambda i, o=other: 2 * i / o).float(), atol=1e-4):
                hint = f"You used d_model = {other}, a fixed number, in the exponent: use the d_model you are given."
                return no("fixed-d_model", f"On {case}: {hint}")
        return no("other", f"Wrong values for {case}; compare row 1 with sin(1), cos(1), sin(1/10000^(2/d)), ...")
    return CORRECT


def _near(got: float, want: float, rel: float = 1e-4) -> bool:
    return abs(got - want) <= rel * max(1.0, abs(want))


@checker
def check_self_similarity(fn: Callable[[int], float]) -> str:
    """fn(d_model) must return PE_p . PE_p, the dot product of a position's encoding with itself."""
    for d in (8, 64, 512, 6, 10):
        got = measure("the dot product", run(fn, d, case=f"d_model={d}"))[0]
        if _near(got, d / 2):
            continue
        you = f"For d_model={d} you got"
        if _near(got, d):
            return no("dims", f"{you} {got:g}: each sin^2 + cos^2 pair sums to 1, so count pairs, not dims.")
        if _near(got, 1):
            return no("one-pair", f"{you} 1: that is one pair. Add up all d_model / 2 pairs.")
        if _near(got, math.sqrt(d / 2)):
            return no("length", f"{you} {got:.4g}: that is the length |PE_p|. The dot product is its square.")
        if _near(got, d / 2 - 1) or _near(got, d / 2 + 1):
            return no("off-by-one", f"{you} {got:g}: off by one pair. There are exactly d_model / 2 pairs.")
        return no("other", f"For d_model={d} expected {d / 2:g}, got {got:g}: add sin^2 + cos^2 over the pairs.")
    return CORRECT


@checker
def check_wavelength(fn: Callable[[int, int], float]) -> str:
    """fn(d_model, i) must return the wavelength, in positions, of dimension pair i."""
    for d, i in ((64, 0), (64, 31), (512, 255), (16, 3), (10, 2)):
        got = measure("the wavelength", run(fn, d, i, case=f"d_model={d}, pair i={i}"))[0]
        want = 2 * math.pi * 10000 ** (2 * i / d)
        if _near(got, want):
            continue
        on = f"For d_model={d}, pair {i}"
        if _near(got, 10000 ** (2 * i / d)):
            return no(
                "radians", f"{on}: that is 1 / frequency in radians. A full cycle is 2 pi radians: multiply by 2 pi."
            )
        if _near(got, 1 / want):
            return no(
                "frequency", f"{on}: that is the frequency in cycles per position. The wavelength is its inverse."
            )
        if _near(got, 2 * math.pi * 10000 ** (4 * i / d)):
            return no("doubled-exponent", f"{on}: the exponent is doubled. i is already the pair index, so use 2i/d.")
        if _near(got, 2 * math.pi * 10000 ** (i / d)):
            return no("halved-exponent", f"{on}: the exponent is halved. With the pair index i it is 2i/d, not i/d.")
        if _near(got, 2 * math.pi * 10000 ** (-2 * i / d)):
            hint = "that is the angular frequency, 10000^(-2i/d), times 2 pi. Divide 2 pi by it instead."
            return no("angular-frequency", f"{on}: {hint}")
        return no("other", f"{on}: expected {want:.4g} positions, got {got:.4g}.")
    return CORRECT


# the hint for each classic mistake of the experiment, by id (its way of measuring, in _gap)
_GAP_HINTS = {
    "unshuffled": "compare with the shuffled layer(tokens): apply perm to its output too",
    "inverse": "you un-shuffled the output with the inverse permutation; apply perm itself",
    "mean": "that is the mean difference. Return the largest one, .abs().max()",
}


def _gap(layer, tokens, perm, use_pe, how: str = "right") -> float:
    """The largest change (the mean one with how="mean") that shuffling the tokens makes, measured right or as
    one of the classic mistakes does."""
    pe = sinusoidal_encoding(tokens.shape[1], tokens.shape[2]) if use_pe else 0.0
    with torch.no_grad():
        if how == "travelled":  # positions added before shuffling: they move with their tokens
            x = tokens + pe
            return (layer(x[:, perm]) - layer(x)[:, perm]).abs().max().item()
        shuffled, plain = layer(tokens[:, perm] + pe), layer(tokens + pe)
        compared = {"unshuffled": plain, "inverse": plain[:, perm.argsort()]}.get(how, plain[:, perm])
        diff = (shuffled - compared).abs()
        return (diff.mean() if how == "mean" else diff.max()).item()


@checker
def check_permutation_gap(fn) -> str:
    """Experiment: fn(layer, tokens, perm, use_pe) measures how far an encoder layer is from permutation-equivariant.

    The gap is the largest difference between layer(shuffled tokens) and the shuffled layer(tokens),
    with the encoding added after shuffling when use_pe. The checker runs it on layers, tokens and
    permutations of its own and compares with its own run: without a positional encoding the gap is
    rounding noise; with one, permuting the tokens changes what each one computes.
    """
    for seed, (batch, T, d, h) in enumerate(((1, 6, 16, 2), (2, 9, 12, 3), (3, 7, 8, 2)), start=40):
        torch.manual_seed(seed)
        layer = EncoderLayer(d_model=d, num_heads=h, d_ff=2 * d, dropout=0.0).eval()
        g = _seeded(seed)
        # rows of falling scale: the encoding weighs least in the first row, so its gap is the batch's smallest
        tokens = torch.randn(batch, T, d, generator=g) * torch.linspace(2.0, 0.5, batch)[:, None, None]
        perm = torch.randperm(T, generator=g)
        while torch.equal(perm, torch.arange(T)):
            perm = torch.randperm(T, generator=g)
        for use_pe in (False, True):
            case = f"tokens of shape {(batch, T, d)}, perm {perm.tolist()}, use_pe={use_pe}"
            result = run(fn, layer, tokens.clone(), perm.clone(), use_pe, case=case)
            got, want = measure("the largest difference", result)[0], _gap(layer, tokens, perm, use_pe)
            if (not use_pe and got <= 1e-4) or (use_pe and abs(got - want) <= 1e-3 * want + 1e-5):
                continue
            if use_pe and got <= 1e-4 and _gap(layer, tokens, perm, True, "travelled") <= 1e-4:
                return no(
                    "travelled",
                    f"On {case} the gap is rounding noise: you added the encoding before shuffling, so the positions "
                    "travelled with their tokens. Shuffle the tokens first, then add the encoding.",
                )
            for how, hint in _GAP_HINTS.items():
                if abs(got - _gap(layer, tokens, perm, use_pe, how)) <= 1e-3 * got + 1e-5:
                    return no(how, f"On {case}: {hint}.")
            if use_pe and batch > 1 and abs(got - _gap(layer, tokens[:1], perm, use_pe)) <= 1e-3 * got + 1e-5:
                return no(
                    "first-row",
                    f"On {case} you measured the first sequence only: take the largest difference over the batch.",
                )
            if not use_pe:
                return no(
                    "not-noise",
                    f"On {case} the gap should be rounding noise, got {got:.2e}: run the layer you are given on "
                    "the tokens with no encoding and no mask.",
                )
            return no(
                "other",
                f"On {case} expected a gap of {want:.4g}, got {got:.4g}: add tl.sinusoidal_encoding(T, d_model) "
                "after shuffling, and measure with the layer, tokens and permutation you are given.",
            )
    return CORRECT
