"""Checkers for the exercises of the chapter "Learning without labels: wav2vec 2.0 and BART" (the feature
encoder's geometry, CTC's collapse, and the share of frames that wav2vec 2.0's masks hide)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .. import ctc, wav2vec2
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, reproducible, run

__all__ = ["check_receptive_field", "check_ctc_collapse", "check_hidden_share"]

# ---- the receptive field and hop of a stack of convolutions (by hand) -------------------------------

# (kernels, strides): wav2vec 2.0's own stack, the chapter's 8 kHz stack, and stacks of other shapes, strides of 1
# and kernels shorter than their strides among them, so that no shortcut fits them all
_FIELD_CASES = (
    ((10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)),
    ((10, 3, 3, 3, 3, 2), (5, 2, 2, 2, 2, 2)),
    ((7, 5, 3), (3, 1, 2)),
    ((4,), (4,)),
    ((2, 6, 3, 5), (3, 2, 4, 1)),
    ((5, 5), (1, 1)),
)
_FIELD_LIBRARY = "tl.wav2vec2.conv_geometry (or conv_frames)"


def _field(kernels, strides) -> tuple[int, int]:
    """The reference: each layer widens the field by (kernel - 1) times the hop of the layers before it."""
    field, hop = 1, 1
    for k, s in zip(kernels, strides):
        field += (k - 1) * hop
        hop *= s
    return field, hop


def _field_this_stride(kernels, strides):
    field, hop = 1, 1
    for k, s in zip(kernels, strides):
        hop *= s
        field += (k - 1) * hop
    return field, hop


def _field_no_hop(kernels, strides):
    return 1 + sum(k - 1 for k in kernels), math.prod(strides)


def _field_sum(kernels, strides):
    return sum(kernels), math.prod(strides)


def _field_from_zero(kernels, strides):
    field, hop = _field(kernels, strides)
    return field - 1, hop


def _field_times_kernel(kernels, strides):
    field, hop = 1, 1
    for k, s in zip(kernels, strides):
        field += k * hop
        hop *= s
    return field, hop


def _hop_sum(kernels, strides):
    return _field(kernels, strides)[0], sum(strides)


def _field_product(kernels, strides):
    return math.prod(kernels), math.prod(strides)


_FIELD_MISTAKES: tuple[tuple[str, Callable], ...] = (
    ("this-stride", _field_this_stride),
    ("no-hop", _field_no_hop),
    ("sum-of-kernels", _field_sum),
    ("from-zero", _field_from_zero),
    ("kernel-not-minus-one", _field_times_kernel),
    ("hop-sum", _hop_sum),
    ("kernel-product", _field_product),
)
_FIELD_HINTS = {
    "this-stride": "you multiplied the hop by a layer's own stride before widening the field with it: a layer's "
    "kernel spans frames of the layer below, which are `hop` samples apart, where hop is the product of the "
    "strides of the layers before it, not including its own",
    "no-hop": "you added each layer's kernel - 1 in samples: a layer's taps are frames of the layer below, each "
    "`hop` samples after the last, so the layer widens the field by (kernel - 1) * hop",
    "sum-of-kernels": "the field is not the sum of the kernels: each layer widens it by (kernel - 1) times the hop of "
    "the layers before it",
    "from-zero": "you are one sample short: one frame of the first layer already sees 1 sample before any widening, "
    "so start the field at 1",
    "kernel-not-minus-one": "each layer widens the field by (kernel - 1) * hop, not kernel * hop: its first tap "
    "sits on what the field already covers",
    "hop-sum": "the hop is the product of the strides, not their sum: each layer keeps one frame in `stride` of "
    "the frames below it",
    "kernel-product": "the field is not the product of the kernels: each layer widens it by (kernel - 1) times the "
    "hop of the layers before it",
    "swapped": "you returned (hop, field): return (receptive field, hop), the field first",
}


def _pair(got, case: str) -> tuple[float, float]:
    """The learner's (field, hop) as two floats, else a verdict naming what came back."""
    if isinstance(got, (str, bytes)) or not isinstance(got, Sequence) or len(got) != 2:
        what = f"a {type(got).__name__}" + (f" of length {len(got)}" if isinstance(got, Sequence) else "")
        raise Wrong("not-a-pair", f"On {case} you returned {what}: return two numbers, (receptive field, hop).")
    field, hop = measure("the receptive field and the hop", *got)
    return field, hop


@checker
def check_receptive_field(fn: Callable) -> str:
    """fn(kernels, strides) -> (receptive field, hop) in samples of unpadded 1-D convolutions, written by hand."""
    wants = [_field(k, s) for k, s in _FIELD_CASES]
    cases = [f"kernels={list(k)}, strides={list(s)}" for k, s in _FIELD_CASES]
    forbidden = (wav2vec2.conv_geometry, wav2vec2.conv_frames)
    gots = [
        _pair(run(fn, list(k), list(s), case=case, forbidden=forbidden, names=_FIELD_LIBRARY), case)
        for (k, s), case in zip(_FIELD_CASES, cases)
    ]
    if all(got == want for got, want in zip(gots, wants)):
        return CORRECT
    if len(set(gots)) == 1:
        return no("constant", f"You returned {gots[0]} for every stack: compute it from the kernels and strides given.")
    first = next(i for i, (got, want) in enumerate(zip(gots, wants)) if got != want)
    on = f"On {cases[first]} expected (field, hop) = {wants[first]}, got {tuple(gots[first])}"
    if all(got == want[::-1] for got, want in zip(gots, wants)):
        return no("swapped", f"{on}: {_FIELD_HINTS['swapped']}.")
    for mistake, wrong in _FIELD_MISTAKES:  # named only when the answer follows the mistake on every stack
        if all(got == wrong(k, s) for got, (k, s) in zip(gots, _FIELD_CASES)):
            return no(mistake, f"{on}: {_FIELD_HINTS[mistake]}.")
    if all(got[1] == want[1] for got, want in zip(gots, wants)):
        hint = "the hop is right; the field grows by (kernel - 1) * hop at each layer, hop being the product of the "
        return no("field", f"{on}: {hint}strides of the layers before it, starting from 1 sample.")
    hint = "the hop is the product of the strides; the field starts at 1 and grows by (kernel - 1) * (the hop so far)"
    return no("other", f"{on}: {hint}.")


# ---- CTC's collapse: merge repeats, then drop blanks (by hand) ----------------------------------------

# (path, blank): blanks of 0 and of other ids, repeats with and without a blank between them, paths that start and
# end with blanks, a path of blanks only, and a path with no blank at all
_COLLAPSE_CASES = (
    ([0, 3, 3, 0, 3, 5, 5, 5, 0, 0, 2], 0),
    ([4, 1, 1, 4, 1, 2, 4, 4, 2, 2, 4], 4),
    ([7, 7, 7, 7], 7),
    ([6, 6, 2, 9, 9, 2, 2, 0, 0, 6], 12),
    ([12, 5, 12, 5, 5, 12, 0, 0, 12, 3], 12),
    ([1, 0, 1, 0, 0, 1, 1, 2, 1], 0),
)
_COLLAPSE_LIBRARY = "tl.ctc.ctc_collapse (or greedy_ctc_decode)"


def _collapse(path, blank):
    out, last = [], None
    for symbol in path:
        if symbol != last and symbol != blank:
            out.append(symbol)
        last = symbol
    return out


def _blanks_first(path, blank):
    kept = [s for s in path if s != blank]
    return [s for i, s in enumerate(kept) if i == 0 or s != kept[i - 1]]


def _no_merge(path, blank):
    return [s for s in path if s != blank]


def _no_blank_drop(path, blank):
    return [s for i, s in enumerate(path) if i == 0 or s != path[i - 1]]


def _unique(path, blank):
    return [s for s in dict.fromkeys(path) if s != blank]


def _blank_zero(path, blank):
    return _collapse(path, 0)


def _last_ignored(path, blank):  # merges by looking ahead and forgets the last symbol
    return [s for i, s in enumerate(path[:-1]) if s != path[i + 1] and s != blank]


_COLLAPSE_MISTAKES: tuple[tuple[str, Callable], ...] = (
    ("blanks-first", _blanks_first),
    ("no-merge", _no_merge),
    ("no-blank-drop", _no_blank_drop),
    ("unique", _unique),
    ("blank-zero", _blank_zero),
    ("last-dropped", _last_ignored),
)
_COLLAPSE_HINTS = {
    "blanks-first": "you dropped the blanks before merging the repeats, so a label said twice with a blank between "
    "(a, blank, a) became one: merge runs of the same symbol first, then drop the blanks",
    "no-merge": "you dropped the blanks but kept every repeat: a run of the same symbol in neighbouring frames is "
    "one label, so merge runs first",
    "no-blank-drop": "you merged the repeats but kept the blanks: the blank means 'no label here', so drop it after "
    "merging",
    "unique": "you kept each symbol once over the whole path: only neighbours merge, so a label can come back after "
    "another symbol or a blank",
    "blank-zero": "you took 0 for the blank: the blank is the id you are given, `blank`",
    "last-dropped": "the path's last run is missing: compare each symbol with the one before it, not after it",
}


def _ids(got, case: str) -> list[int]:
    """The learner's labels as a list of ints (a list, a tuple or a 1-D tensor), else a verdict."""
    if isinstance(got, torch.Tensor):
        if got.dim() != 1 or got.is_floating_point():
            raise Wrong(
                "not-a-list",
                f"On {case} you returned a tensor of shape {tuple(got.shape)}: return a list "
                "of ints, the labels in order.",
            )
        return got.tolist()
    if isinstance(got, (list, tuple)) and all(isinstance(s, int) and not isinstance(s, bool) for s in got):
        return list(got)
    raise Wrong(
        "not-a-list",
        f"On {case} you returned {type(got).__name__} {got!r:.60}: return a list of ints, the labels in order.",
    )


@checker
def check_ctc_collapse(fn: Callable) -> str:
    """fn(path, blank) -> the label sequence a CTC path stands for: runs merged, then blanks dropped, by hand."""
    wants = [_collapse(p, b) for p, b in _COLLAPSE_CASES]
    cases = [f"path={p}, blank={b}" for p, b in _COLLAPSE_CASES]
    forbidden = (ctc.ctc_collapse, ctc.greedy_ctc_decode)
    gots = [
        _ids(run(fn, list(p), b, case=case, forbidden=forbidden, names=_COLLAPSE_LIBRARY), case)
        for (p, b), case in zip(_COLLAPSE_CASES, cases)
    ]
    if gots == wants:
        return CORRECT
    if all(g == gots[0] for g in gots):
        return no("constant", f"You returned {gots[0]} for every path: collapse the path you are given.")
    first = next(i for i, (got, want) in enumerate(zip(gots, wants)) if got != want)
    on = f"On {cases[first]} expected {wants[first]}, got {gots[first]}"
    for mistake, wrong in _COLLAPSE_MISTAKES:  # named only when the answer follows the mistake on every path
        if all(got == wrong(p, b) for got, (p, b) in zip(gots, _COLLAPSE_CASES)):
            return no(mistake, f"{on}: {_COLLAPSE_HINTS[mistake]}.")
    return no("other", f"{on}: merge each run of one symbol into one, then drop the blanks.")


# ---- the share of frames the masks hide (experiment) -------------------------------------------------

# (start_prob, span, frames, clips, seed): the paper's 0.065 and 10 on short and long clips, and other settings
_SHARE_CASES = (
    (0.065, 10, 49, 64, 0),
    (0.065, 10, 500, 16, 3),
    (0.2, 4, 30, 40, 11),
    (0.05, 6, 20, 100, 5),
    (0.4, 3, 12, 25, 7),
)


def _hidden(start_prob, span, frames, clips, seed, **kwargs) -> torch.Tensor:
    """The checker's own masks: (clips, frames) bool, drawn as the exercise asks."""
    return wav2vec2.span_mask(clips, frames, start_prob, span, generator=_seeded(seed), **kwargs)


def _closed_form(start_prob, span, frames, clips, seed):
    return 1 - (1 - start_prob) ** span


_SHARE_MISTAKES: tuple[tuple[str, Callable, str], ...] = (
    (
        "closed-form",
        _closed_form,
        "you returned the formula 1 - (1 - p)^span instead of measuring: draw the masks "
        "with tl.wav2vec2.span_mask and count",
    ),
    (
        "starts-only",
        lambda p, s, f, c, seed: _hidden(p, 1, f, c, seed).double().mean().item(),
        "you measured the share of frames that start a span: a span hides `span` frames from its start on, so pass "
        "`span` to span_mask",
    ),
    (
        "first-clip",
        lambda p, s, f, c, seed: _hidden(p, s, f, c, seed)[0].double().mean().item(),
        "you measured the first clip alone: average over every clip of the batch",
    ),
    (
        "count",
        lambda p, s, f, c, seed: float(_hidden(p, s, f, c, seed).sum()),
        "you returned how many frames are hidden: return their share of all clips x frames, a number from 0 to 1",
    ),
    (
        "min-spans",
        lambda p, s, f, c, seed: _hidden(p, s, f, c, seed, min_spans=2).double().mean().item(),
        "you drew with min_spans=2: the exercise measures span_mask's own rule (min_spans=0, the default)",
    ),
    (
        "away-from-edges",
        lambda p, s, f, c, seed: _hidden(p, s, f, c, seed)[:, s - 1 :].double().mean().item(),
        "you left the first frames out: the share is over every frame of every clip, the clip's start included",
    ),
)


@checker
def check_hidden_share(fn: Callable) -> str:
    """fn(start_prob, span, frames, clips, seed) -> the share of the (clips, frames) frames that
    tl.wav2vec2.span_mask hides, drawn with torch.Generator().manual_seed(seed): measured, not the formula."""
    wants = [_hidden(*case).double().mean().item() for case in _SHARE_CASES]
    names = [f"start_prob={p}, span={s}, frames={f}, clips={c}, seed={seed}" for p, s, f, c, seed in _SHARE_CASES]
    results = [run(fn, *case, case=name) for case, name in zip(_SHARE_CASES, names)]
    for result, name in zip(results, names):
        if isinstance(result, (str, bytes, bool)):
            raise Wrong("not-a-number", f"On {name} you returned {result!r:.40}: return the share as a float.")
    gots = measure("the share of frames hidden", *results)
    right = [math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9) for got, want in zip(gots, wants)]
    if all(right):
        p, s, f, c, seed = _SHARE_CASES[2]
        reproducible(
            fn,
            gots[2],
            (p, s, f, c, seed),
            (p, s, f, c, seed + 1),
            case=names[2],
            what="the share of frames hidden",
            draw="draw the masks",
        )
        return CORRECT
    if len(set(gots)) == 1:
        return no("constant", f"You returned {gots[0]:g} for every setting: measure it in the setting you are given.")
    first = right.index(False)
    on = f"On {names[first]} expected {wants[first]:.4f}, got {gots[first]:.4g}"
    for mistake, wrong, hint in _SHARE_MISTAKES:  # named only when the answer follows the mistake everywhere
        if all(math.isclose(got, wrong(*case), rel_tol=1e-6, abs_tol=1e-9) for got, case in zip(gots, _SHARE_CASES)):
            return no(mistake, f"{on}: {hint}.")
    if any(not 0 <= got <= 1 for got in gots):
        return no("not-a-share", f"{on}: a share of frames lies between 0 and 1.")
    hint = (
        "draw the masks with tl.wav2vec2.span_mask(clips, frames, start_prob, span, generator=...), the generator "
        "torch.Generator().manual_seed(seed) made once, and return the mean of the mask as a float"
    )
    return no("other", f"{on}: {hint}.")
