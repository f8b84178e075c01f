"""Checkers for the exercises of the positional-encoding chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..encoder import EncoderLayer
from ..positional import sinusoidal_encoding
from ._common import CORRECT, Wrong, _seeded, checker, counting_calls, measure, no, not_skipped, run
from ._match import _close, expect_tensor, spot

__all__ = ["check_encoding", "check_self_similarity", "check_wavelength", "check_permutation_gap"]

_ENCODING_HINTS = {  # by id ("On <the input>: " goes before each)
    "swapped": "Sines and cosines are swapped: even dimensions take the sine, odd ones the cosine.",
    "not-interleaved": "All sines come first, then all cosines: interleave them, sine in 2i, cosine in 2i + 1.",
    "doubled-exponent": "The exponent is doubled: your i steps by 2 and you still use 2i/d. Use the pair index i.",
    "halved-exponent": "The exponent is halved: it is 2i/d with the pair index i, not i/d.",
    "multiplied": "You multiplied the position by 10000^(2i/d): divide it, pos / 10000^(2i/d).",
    "off-by-one": "Off by one: positions start at 0 (row 0 is sin 0 = 0, cos 0 = 1), not at 1.",
}
_GAP_HINTS = {  # by id, after "On <the input>: "; got and want are filled in
    "travelled": "the gap is rounding noise: the encoding, added before shuffling, moved with its token. Add it after.",
    "unshuffled": "compare with the shuffled layer(tokens): apply perm to its output too.",
    "inverse": "you un-shuffled the output with the inverse permutation; apply perm itself.",
    "mean": "that is the mean difference. Return the largest one, .abs().max().",
    "first-row": "you measured the first sequence only: take the largest difference over the batch.",
    "not-noise": "the gap should be rounding noise, got {got:.2e}: run the layer on the tokens, no encoding, no mask.",
    "other": "expected a gap of {want:.4g}, got {got:.4g}: add tl.sinusoidal_encoding(T, d_model) after shuffling.",
}


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
    for max_len, d in ((5, 4), (30, 10), (12, 64), (9, 6)):
        case = f"max_len={max_len}, d_model={d}"
        result = run(fn, max_len, d, case=case, forbidden=(sinusoidal_encoding,), names="tl.sinusoidal_encoding")
        if isinstance(result, torch.Tensor) and result.shape == (d, max_len):
            return no("transposed", f"On {case} the shape is (d_model, max_len) = {(d, max_len)}: a row per position.")
        want = sinusoidal_encoding(max_len, d)
        expect_tensor(result, want, case)
        if _close(result, want, atol=1e-4):
            continue
        spot(result, want, [(w, m, f"On {case}: {_ENCODING_HINTS[m]}") for w, m in _encoding_mistakes(max_len, d)])
        for other in (4, 10, 64, 6, 512):  # a d_model written into the exponent, from a case of its own
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
        for value, mistake, hint in (
            (d, "dims", "each sin^2 + cos^2 pair sums to 1, so count pairs, not dims."),
            (1, "one-pair", "that is one pair. Add up all d_model / 2 pairs."),
            (math.sqrt(d / 2), "length", "that is the length |PE_p|. The dot product is its square."),
            (d / 2 - 1, "off-by-one", "off by one pair. There are exactly d_model / 2 pairs."),
            (d / 2 + 1, "off-by-one", "off by one pair. There are exactly d_model / 2 pairs."),
        ):
            if _near(got, value):
                return no(mistake, f"For d_model={d} you got {got:.4g}: {hint}")
        return no("other", f"For d_model={d} expected {d / 2:g}, got {got:g}: add sin^2 + cos^2 over the pairs.")
    return CORRECT


@checker
def check_wavelength(fn: Callable[[int, int], float]) -> str:
    """fn(d_model, i) must return the wavelength, in positions, of dimension pair i."""
    for d, i in ((64, 0), (64, 31), (512, 255), (16, 3), (10, 2)):
        got = measure("the wavelength", run(fn, d, i, case=f"d_model={d}, pair i={i}"))[0]
        rate = 10000 ** (2 * i / d)  # 1 / the angular frequency of pair i, in radians per position
        want = 2 * math.pi * rate
        if _near(got, want):
            continue
        for value, mistake, hint in (
            (rate, "radians", "that is 1 / frequency in radians. A full cycle is 2 pi radians: multiply by 2 pi."),
            (1 / want, "frequency", "that is the frequency in cycles per position. The wavelength is its inverse."),
            (2 * math.pi * rate**2, "doubled-exponent", "the exponent is doubled. i is the pair index: use 2i/d."),
            (2 * math.pi * rate**0.5, "halved-exponent", "the exponent is halved. With the pair index i it is 2i/d."),
            (2 * math.pi / rate, "angular-frequency", "that is 2 pi times the angular frequency: divide 2 pi by it."),
        ):
            if _near(got, value):
                return no(mistake, f"For d_model={d}, pair {i}: {hint}")
        return no("other", f"For d_model={d}, pair {i}: expected {want:.4g} positions, got {got:.4g}.")
    return CORRECT


def _gap(layer, tokens, perm, use_pe, how: str = "right") -> float:
    """The largest change shuffling the tokens makes, measured right or as the classic mistake `how` does."""
    pe = sinusoidal_encoding(*tokens.shape[1:]) if use_pe else 0.0
    with torch.no_grad():
        shuffled, plain = layer(tokens[:, perm] + pe), layer(tokens + pe)
    compared = {"unshuffled": plain, "inverse": plain[:, perm.argsort()]}.get(how, plain[:, perm])
    diff = (shuffled - compared).abs()
    return (diff.mean() if how == "mean" else diff.max()).item()


def _reject_gap(got: float, want: float, case: str, layer, tokens, perm, use_pe) -> None:
    """Raise the verdict for a wrong gap: the first classic mistake whose measurement it is, else "other"."""
    measures = lambda *gap: abs(got - _gap(layer, *gap)) <= 1e-3 * got + 1e-5
    travelled = tokens + sinusoidal_encoding(*tokens.shape[1:])  # added before shuffling: moves with its tokens
    hows = [how for how in ("unshuffled", "inverse", "mean") if measures(tokens, perm, use_pe, how)]
    if use_pe and got <= 1e-4 and _gap(layer, travelled, perm, False) <= 1e-4:
        mistake = "travelled"
    elif hows:
        mistake = hows[0]
    elif use_pe and tokens.shape[0] > 1 and measures(tokens[:1], perm, use_pe):
        mistake = "first-row"
    else:
        mistake = "other" if use_pe else "not-noise"
    raise Wrong(mistake, f"On {case}: " + _GAP_HINTS[mistake].format(got=got, want=want))


@checker
def check_permutation_gap(fn) -> str:
    """Experiment: fn(layer, tokens, perm, use_pe) measures the largest gap between layer(shuffled tokens) and the
    shuffled layer(tokens), the encoding added after shuffling when use_pe: rounding noise without it, a real gap with
    it."""
    skipped = None  # the first case whose answer came without running the layer
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
            with counting_calls(layer) as calls:
                result = run(fn, layer, tokens.clone(), perm.clone(), use_pe, case=case)
            skipped = skipped or (None if calls[0] else case)  # judged once the numbers are right
            got, want = measure("the largest difference", result)[0], _gap(layer, tokens, perm, use_pe)
            if (not use_pe and got <= 1e-4) or (use_pe and abs(got - want) <= 1e-3 * want + 1e-5):
                continue
            _reject_gap(got, want, case, layer, tokens, perm, use_pe)
    not_skipped(skipped, "the layer")
    return CORRECT
