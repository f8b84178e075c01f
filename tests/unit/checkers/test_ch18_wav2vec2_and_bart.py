"""Mutation suite for the checkers of chapter 18 (learning without labels: wav2vec 2.0 and BART): classic mistakes
are named, other valid routes pass."""

from __future__ import annotations

import math
import time

import pytest
import torch
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch18_wav2vec2_and_bart as ex18


# The notebook's solutions (notebooks/18_wav2vec2_and_bart.ipynb).
def receptive_field(kernels, strides):
    field, hop = 1, 1  # one frame of nothing sees one sample, one sample after the last
    for kernel, stride in zip(kernels, strides):
        field += (kernel - 1) * hop  # the kernel's taps are frames of the layer below, `hop` samples apart
        hop *= stride
    return field, hop


def ctc_collapse(path, blank):
    labels, previous = [], None
    for symbol in path:
        if symbol != previous and symbol != blank:  # a new run that is not a blank
            labels.append(symbol)
        previous = symbol
    return labels


def hidden_share(start_prob, span, frames, clips, seed):
    generator = torch.Generator().manual_seed(seed)
    mask = tl.wav2vec2.span_mask(clips, frames, start_prob, span, generator=generator)  # (clips, frames)
    return mask.double().mean().item()


SOLUTIONS = [
    (receptive_field, ex18.check_receptive_field),
    (ctc_collapse, ex18.check_ctc_collapse),
    (hidden_share, ex18.check_hidden_share),
]
CHECKS = [check for _, check in SOLUTIONS]


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_the_notebook_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", CHECKS)
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    rejected_as(check(raising(IndexError("index 7 is out of bounds"))), "raised")
    assert "index 7" in check(raising(IndexError("index 7 is out of bounds")))


@pytest.mark.parametrize(
    ("check", "wrong", "named"),
    [
        (ex18.check_receptive_field, lambda k, s: (k[1], s[1]), "kernels=[4], strides=[4]"),
        (ex18.check_ctc_collapse, lambda p, b: [p[10]], "path=[7, 7, 7, 7], blank=7"),
        (ex18.check_hidden_share, lambda p, s, f, c, seed: [0.0] * f * c + [1.0][s], "span=10, frames=49"),
    ],
)
def test_a_failing_input_is_named(check, wrong, named):
    verdict = check(wrong)
    rejected_as(verdict, "raised")
    assert named in verdict


@pytest.mark.parametrize(("solution", "check"), SOLUTIONS)
def test_a_check_leaves_torchs_random_state_as_it_was_and_takes_little_time(solution, check):
    state = torch.random.get_rng_state()
    start = time.perf_counter()
    assert check(solution) == CORRECT
    assert time.perf_counter() - start < 10  # a generous net against hangs; well under a second on a laptop core
    assert torch.equal(torch.random.get_rng_state(), state)


# ---- the receptive field and hop -----------------------------------------------------------------


def _layer_by_layer(update):
    def fn(kernels, strides):
        field, hop = 1, 1
        for k, s in zip(kernels, strides):
            field, hop = update(field, hop, k, s)
        return field, hop

    return fn


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_layer_by_layer(lambda f, h, k, s: (f + (k - 1) * h * s, h * s)), "this-stride"),
        (lambda k, s: (1 + sum(x - 1 for x in k), math.prod(s)), "no-hop"),
        (lambda k, s: (sum(k), math.prod(s)), "sum-of-kernels"),
        (lambda k, s: (receptive_field(k, s)[0] - 1, receptive_field(k, s)[1]), "from-zero"),
        (_layer_by_layer(lambda f, h, k, s: (f + k * h, h * s)), "kernel-not-minus-one"),
        (lambda k, s: (receptive_field(k, s)[0], sum(s)), "hop-sum"),
        (lambda k, s: (math.prod(k), math.prod(s)), "kernel-product"),
        (lambda k, s: receptive_field(k, s)[::-1], "swapped"),
        (lambda k, s: (400, 320), "constant"),  # wav2vec 2.0's numbers typed in
        (lambda k, s: (receptive_field(k, s)[0] + 1, receptive_field(k, s)[1]), "field"),
        (lambda k, s: receptive_field(k, s)[0], "not-a-pair"),
        (lambda k, s: (receptive_field(k, s)[0], "hop"), "not-a-number"),
        (lambda k, s: tl.wav2vec2.conv_geometry(k, s), "by-hand"),
        (lambda k, s: (k.pop(), receptive_field(k, s))[1], "in-place"),
    ],
)
def test_receptive_field_mistakes_are_named(wrong, mistake):
    rejected_as(ex18.check_receptive_field(wrong), mistake)


def _field_backwards(kernels, strides):
    """From the top layer down: the field of one top frame, in frames of each layer below, then in samples."""
    field = 1
    for k, s in reversed(list(zip(kernels, strides))):
        field = (field - 1) * s + k  # frames of the layer below that the field covers
    return field, math.prod(strides)


def _by_probing(kernels, strides):
    """Push an impulse through a stack of ones-kernels and see which samples reach the first output frame."""
    length = receptive_field(kernels, strides)[0] * 3
    x = torch.zeros(1, 1, length, dtype=torch.float64, requires_grad=True)
    y = x
    for k, s in zip(kernels, strides):
        y = torch.nn.functional.conv1d(y, torch.ones(1, 1, k, dtype=torch.float64), stride=s)
    y[0, 0, 0].backward()
    reached = x.grad[0, 0].nonzero().flatten()
    hop = math.prod(strides)
    return int(reached.max() - reached.min() + 1), hop


@pytest.mark.parametrize("right", [_field_backwards, _by_probing, lambda k, s: list(receptive_field(k, s))])
def test_receptive_field_other_routes_pass(right):
    assert ex18.check_receptive_field(right) == CORRECT


def test_the_field_reference_gives_the_papers_numbers():
    assert ex18._field(tl.wav2vec2.BASE_KERNELS, tl.wav2vec2.BASE_STRIDES) == (400, 320)
    for kernels, strides in ex18._FIELD_CASES:
        assert ex18._field(kernels, strides) == tl.wav2vec2.conv_geometry(kernels, strides)


# ---- CTC's collapse ------------------------------------------------------------------------------


def _blanks_dropped_first(path, blank):
    kept = [x for x in path if x != blank]
    return [x for i, x in enumerate(kept) if i == 0 or x != kept[i - 1]]


def _collapse_in_place(path, blank):
    out = ctc_collapse(path, blank)
    path.clear()
    return out


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_blanks_dropped_first, "blanks-first"),
        (lambda p, b: [x for x in p if x != b], "no-merge"),
        (lambda p, b: [x for i, x in enumerate(p) if i == 0 or x != p[i - 1]], "no-blank-drop"),
        (lambda p, b: [x for x in dict.fromkeys(p) if x != b], "unique"),
        (lambda p, b: ctc_collapse(p, 0), "blank-zero"),
        (lambda p, b: [x for i, x in enumerate(p[:-1]) if x != p[i + 1] and x != b], "last-dropped"),
        (lambda p, b: [3, 5, 2], "constant"),
        (lambda p, b: ctc_collapse(p, b)[:-1] if len(ctc_collapse(p, b)) > 1 else ctc_collapse(p, b), "other"),
        (lambda p, b: torch.tensor(ctc_collapse(p, b), dtype=torch.float32), "not-a-list"),
        (lambda p, b: "".join(map(str, ctc_collapse(p, b))), "not-a-list"),
        (lambda p, b: tl.ctc.ctc_collapse(p, b), "by-hand"),
        (_collapse_in_place, "in-place"),
    ],
)
def test_ctc_collapse_mistakes_are_named(wrong, mistake):
    rejected_as(ex18.check_ctc_collapse(wrong), mistake)


def _collapse_with_groupby(path, blank):
    import itertools

    return [symbol for symbol, _ in itertools.groupby(path) if symbol != blank]


def _collapse_with_tensors(path, blank):
    t = torch.tensor(path)
    keep = torch.ones_like(t, dtype=torch.bool)
    keep[1:] = t[1:] != t[:-1]  # the first frame of each run
    return t[keep & (t != blank)]  # a 1-D tensor of ints


@pytest.mark.parametrize(
    "right", [_collapse_with_groupby, _collapse_with_tensors, lambda p, b: tuple(ctc_collapse(p, b))]
)
def test_ctc_collapse_other_routes_pass(right):
    assert ex18.check_ctc_collapse(right) == CORRECT


def test_the_collapse_reference_is_the_librarys():
    for path, blank in ex18._COLLAPSE_CASES:
        assert ex18._collapse(path, blank) == tl.ctc.ctc_collapse(path, blank)


# ---- the share of frames hidden ------------------------------------------------------------------


def _global_stream(start_prob, span, frames, clips, seed):
    return tl.wav2vec2.span_mask(clips, frames, start_prob, span).double().mean().item()


def _seed_zero(start_prob, span, frames, clips, seed):
    return hidden_share(start_prob, span, frames, clips, 0)


def _generator_per_clip(start_prob, span, frames, clips, seed):
    rows = [
        tl.wav2vec2.span_mask(1, frames, start_prob, span, generator=torch.Generator().manual_seed(seed + i))
        for i in range(clips)
    ]
    return torch.cat(rows).double().mean().item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda p, s, f, c, seed: 1 - (1 - p) ** s, "closed-form"),
        (lambda p, s, f, c, seed: hidden_share(p, 1, f, c, seed), "starts-only"),
        (
            lambda p, s, f, c, seed: (
                tl.wav2vec2.span_mask(c, f, p, s, generator=torch.Generator().manual_seed(seed))[0]
                .double()
                .mean()
                .item()
            ),
            "first-clip",
        ),
        (
            lambda p, s, f, c, seed: (
                tl.wav2vec2.span_mask(c, f, p, s, generator=torch.Generator().manual_seed(seed)).sum().item()
            ),
            "count",
        ),
        (
            lambda p, s, f, c, seed: (
                tl.wav2vec2.span_mask(c, f, p, s, min_spans=2, generator=torch.Generator().manual_seed(seed))
                .double()
                .mean()
                .item()
            ),
            "min-spans",
        ),
        (
            lambda p, s, f, c, seed: (
                tl.wav2vec2.span_mask(c, f, p, s, generator=torch.Generator().manual_seed(seed))[:, s - 1 :]
                .double()
                .mean()
                .item()
            ),
            "away-from-edges",
        ),
        (lambda p, s, f, c, seed: 0.489, "constant"),
        (_global_stream, "other"),
        (_seed_zero, "other"),
        (_generator_per_clip, "other"),
        (lambda p, s, f, c, seed: -hidden_share(p, s, f, c, seed), "not-a-share"),
        (lambda p, s, f, c, seed: str(hidden_share(p, s, f, c, seed)), "not-a-number"),
    ],
)
def test_hidden_share_mistakes_are_named(wrong, mistake):
    rejected_as(ex18.check_hidden_share(wrong), mistake)


def _counted_by_hand(start_prob, span, frames, clips, seed):
    mask = tl.wav2vec2.span_mask(clips, frames, start_prob, span, generator=torch.Generator().manual_seed(seed))
    return int(mask.sum()) / (clips * frames)


def _as_tensor(start_prob, span, frames, clips, seed):
    mask = tl.wav2vec2.span_mask(clips, frames, start_prob, span, generator=torch.Generator().manual_seed(seed))
    return mask.float().mean()  # a one-element float32 tensor: within the checker's tolerance


@pytest.mark.parametrize("right", [_counted_by_hand, _as_tensor])
def test_hidden_share_other_routes_pass(right):
    assert ex18.check_hidden_share(right) == CORRECT


def test_a_share_that_ignores_the_seed_only_on_a_second_call_is_named():
    calls = []

    def drifting(start_prob, span, frames, clips, seed):
        calls.append(seed)
        return hidden_share(start_prob, span, frames, clips, seed + (len(calls) > len(ex18._SHARE_CASES)))

    rejected_as(ex18.check_hidden_share(drifting), "seed-ignored")
