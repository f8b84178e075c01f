"""Mutation suite for the masks chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex

_raises = raising(KeyError("padding"))


# The notebook's solutions (notebooks/05_masks.ipynb).
def solution_padding_mask(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]


def solution_target_mask(tokens, pad_id):
    T = tokens.shape[1]
    causal_ = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
    return (tokens != pad_id)[:, None, None, :] & causal_


def solution_masks_needed(family):
    return {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding", "causal"}}[family]


def solution_padding_ablation(layer, tokens, num_pad, use_mask):
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    mask = tl.padding_mask(torch.tensor([[1] * T + [0] * num_pad]).expand(B, -1), pad_id=0) if use_mask else None
    with torch.no_grad():
        return (layer(padded, mask)[:, :T] - layer(tokens)).abs().max().item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda t, p: (t == p)[:, None, None, :], "reversed"),
        (lambda t, p: t != p, "no-broadcast"),
        (lambda t, p: (t != p)[:, None, :, None], "keys-axis"),
        (lambda t, p: (t != p)[:, None, None, 1:], "shape"),
        (lambda t, p: (t != p).tolist(), "not-a-tensor"),
        (lambda t, p: (t != 0)[:, None, None, :], "pad-zero"),
        (lambda t, p: (t != p)[:, None, None, :].float(), "dtype"),
        (lambda t, p: (t == p)[:, None, None, :].float(), "dtype"),  # and the values reversed
        (lambda t, p: (t > p)[:, None, None, :], "other"),
        (lambda t, p: (t != p).view(2, 1, 1, -1), "raised"),  # right only for B = 2
        (_raises, "raised"),
    ],
)
def test_padding_mask_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_padding_mask(wrong), mistake)


def test_padding_mask_accepts_other_routes():
    assert ex.check_padding_mask(solution_padding_mask) == ex.CORRECT
    assert ex.check_padding_mask(lambda t, p: t.ne(p).unsqueeze(1).unsqueeze(1)) == ex.CORRECT
    assert ex.check_padding_mask(lambda t, p: ~(t == p).reshape(t.shape[0], 1, 1, -1)) == ex.CORRECT


def _target(t, p, keys=True, causal="tril", combine="and", queries=False):
    T = t.shape[1]
    k = (t != p)[:, None, None, :]
    c = {"tril": torch.ones(T, T, dtype=torch.bool).tril(), "triu": torch.ones(T, T, dtype=torch.bool).triu(),
         "strict": torch.ones(T, T, dtype=torch.bool).tril(-1)}[causal]  # fmt: skip
    m = (k & c if combine == "and" else k | c) if keys else c.expand(t.shape[0], 1, T, T)
    return m & (t != p)[:, None, :, None] if queries else m


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda t, p: ~_target(t, p), "reversed"),
        (lambda t, p: (t != p)[:, None, None, :].expand(-1, 1, t.shape[1], -1), "padding-only"),
        (lambda t, p: _target(t, p, keys=False), "future-only"),
        (lambda t, p: _target(t, p, causal="triu"), "upper-triangle"),
        (lambda t, p: _target(t, p, causal="strict"), "diagonal"),
        (lambda t, p: _target(t, p, combine="or"), "or-not-and"),
        (lambda t, p: _target(t, p, queries=True), "queries"),
        (
            lambda t, p: (t != p)[:, None, :, None] & torch.ones(t.shape[1], t.shape[1], dtype=torch.bool).tril(),
            "queries",
        ),
        (lambda t, p: _target(t, 0), "pad-zero"),
        (lambda t, p: _target(t, p)[:, 0], "head-axis"),
        (lambda t, p: _target(t, p).long(), "dtype"),
        (lambda t, p: (t != p)[:, None, None, :] & tl.causal_mask(5), "raised"),
        (_raises, "raised"),
    ],
)
def test_target_mask_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_target_mask(wrong), mistake)


def test_target_mask_accepts_other_routes():
    assert ex.check_target_mask(solution_target_mask) == ex.CORRECT
    via_library = lambda t, p: tl.padding_mask(t, p) & tl.causal_mask(t.shape[1])
    assert ex.check_target_mask(via_library) == ex.CORRECT
    by_comparison = lambda t, p: (
        (t != p)[:, None, None, :] & (torch.arange(t.shape[1])[None, :] <= torch.arange(t.shape[1])[:, None])
    )
    assert ex.check_target_mask(by_comparison) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda f: {"padding", "causal"}, "extra-causal"),  # an encoder-only model with a causal mask
        (lambda f: {"padding"}, "missing-causal"),  # a language model without one
        (
            lambda f: {
                "encoder-only": {"padding"},
                "decoder-only": {"causal", "padding"},
                "encoder-decoder": {"padding", "causal"},
            }[f],
            "extra-padding",
        ),  # fmt: skip
        (
            lambda f: {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"padding"}}[f],
            "missing-causal",
        ),
        (
            lambda f: {"encoder-only": set(), "decoder-only": {"causal"}, "encoder-decoder": {"causal"}}[f],
            "missing-padding",
        ),
        (
            lambda f: {"encoder-only": {"padding"}, "decoder-only": {"causal"}, "encoder-decoder": {"causal"}}[f],
            "missing-padding",
        ),
        (lambda f: "padding", "string"),
        (lambda f: 2, "not-a-set"),
        (lambda f: {"pad"}, "names"),
        (_raises, "raised"),
    ],
)
def test_masks_needed_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_masks_needed(wrong), mistake)


def test_masks_needed_accepts_other_routes():
    assert ex.check_masks_needed(solution_masks_needed) == ex.CORRECT
    as_lists = lambda f: ["padding"] * ("encoder" in f) + ["causal"] * ("decoder" in f)
    assert ex.check_masks_needed(as_lists) == ex.CORRECT


def _ablation(layer, tokens, num_pad, use_mask, always=None, reversed_=False, mean=False, partial=False):
    B, T, d = tokens.shape
    padded = torch.cat([tokens, torch.zeros(B, num_pad, d)], dim=1)
    keep = torch.tensor([True] * T + [False] * num_pad)[None, None, None, :]
    if partial:  # only the first padded key masked: the real tokens still see the others
        keep = torch.tensor([True] * T + [False] + [True] * (num_pad - 1))[None, None, None, :]
    use = use_mask if always is None else always
    mask = (~keep if reversed_ else keep) if use else None
    with torch.no_grad():
        change = (layer(padded, mask)[:, :T] - layer(tokens)).abs()
    return (change.mean() if mean else change.max()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda layer, t, n, u: 0.0 if u else 0.5, "other"),  # constants
        (lambda layer, t, n, u: _ablation(layer, t, n, u, always=True), "masked"),
        (lambda layer, t, n, u: _ablation(layer, t, n, u, always=False), "unmasked"),
        (lambda layer, t, n, u: _ablation(layer, t, n, u, reversed_=True), "reversed"),
        (lambda layer, t, n, u: _ablation(layer, t, n, u, partial=True), "moved"),
        (lambda layer, t, n, u: _ablation(layer, t, n, u, mean=True), "mean"),
        (lambda layer, t, n, u: _ablation(layer, t, 3, u), "other"),  # right only for num_pad = 3
        (_raises, "raised"),
    ],
)
def test_padding_ablation_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_padding_ablation(wrong), mistake)


def test_padding_ablation_accepts_other_routes():
    assert ex.check_padding_ablation(solution_padding_ablation) == ex.CORRECT
    assert ex.check_padding_ablation(lambda layer, t, n, u: _ablation(layer, t, n, u)) == ex.CORRECT


def test_a_change_predicted_instead_of_measured_is_named():
    def predicts(layer, tokens, num_pad, use_mask):  # with the mask the theory says 0: the layer is never run
        return 0.0 if use_mask else solution_padding_ablation(layer, tokens, num_pad, use_mask)

    rejected_as(ex.check_padding_ablation(predicts), "skipped")
