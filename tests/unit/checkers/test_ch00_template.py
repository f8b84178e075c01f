"""Mutation suite for the template chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex

_raises = raising(ValueError("negative dimension"))


# The notebook's solutions (notebooks/00_template.ipynb).
def solution_future_mask(size):
    return torch.ones(size, size, dtype=torch.bool).triu(diagonal=1)


def solution_allowed_count(n):
    return n * (n + 1) // 2


def solution_cached_rows(past, new):
    return tl.causal_mask(past + new)[past:]


def solution_mask_fraction(mask):
    return mask.float().mean().item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n: tl.causal_mask(n), "allowed"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(0), "diagonal-blocked"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "past-keys"),
        (lambda n: torch.ones(n, n).triu(1), "dtype"),
        (lambda n: torch.ones(4, 4, dtype=torch.bool).triu(1), "shape"),  # right only for size 4
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(2), "other"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(1).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_future_mask_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_future_mask(wrong), mistake)


def test_future_mask_accepts_other_routes():
    assert ex.check_future_mask(solution_future_mask) == ex.CORRECT
    assert ex.check_future_mask(lambda n: torch.arange(n)[None, :] > torch.arange(n)[:, None]) == ex.CORRECT
    assert ex.check_future_mask(lambda n: ~tl.causal_mask(n)) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n: n * n, "every-entry"),
        (lambda n: n * (n - 1) // 2, "no-diagonal"),
        (lambda n: n * (n + 1), "not-halved"),
        (lambda n: 6, "other"),  # right only for n = 3
        (lambda n: "n(n+1)/2", "not-a-number"),
        (lambda n: int(tl.causal_mask(n).sum()), "by-hand"),
        (_raises, "raised"),
    ],
)
def test_allowed_count_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_allowed_count(wrong), mistake)


def test_allowed_count_accepts_other_routes():
    assert ex.check_allowed_count(solution_allowed_count) == ex.CORRECT
    assert ex.check_allowed_count(lambda n: n * (n + 1) / 2) == ex.CORRECT  # a float
    assert ex.check_allowed_count(lambda n: sum(range(1, n + 1))) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda p, n: tl.causal_mask(p + n)[:n], "first-rows"),
        (lambda p, n: tl.causal_mask(n), "no-cached-keys"),
        (lambda p, n: ~tl.causal_mask(p + n)[p:], "reversed"),
        (lambda p, n: tl.causal_mask(p + n)[p:].float(), "dtype"),
        (lambda p, n: torch.ones(n, p + n, dtype=torch.bool), "other"),
        (lambda p, n: tl.causal_mask(p + n), "shape"),
        (_raises, "raised"),
    ],
)
def test_cached_rows_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_cached_rows(wrong), mistake)


def test_cached_rows_accepts_other_routes():
    assert ex.check_cached_rows(solution_cached_rows) == ex.CORRECT
    by_comparison = lambda p, n: torch.arange(p + n)[None, :] <= torch.arange(p, p + n)[:, None]
    assert ex.check_cached_rows(by_comparison) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda m: (m.shape[0] + 1) / (2 * m.shape[0]), "formula"),  # the closed form
        (lambda m: 0.5, "other"),  # a constant
        (lambda m: (m.sum().item() + 1) / m.numel(), "other"),  # a measurement off by one entry: not the formula
        (lambda m: (~m).float().mean().item(), "blocked"),
        (lambda m: m.sum().item(), "count"),
        (lambda m: m.float().mean(0), "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_mask_fraction_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_mask_fraction(wrong), mistake)


def test_mask_fraction_accepts_other_routes():
    assert ex.check_mask_fraction(solution_mask_fraction) == ex.CORRECT
    assert ex.check_mask_fraction(lambda m: m.sum().item() / m.numel()) == ex.CORRECT
    assert ex.check_mask_fraction(lambda m: torch.count_nonzero(m).double() / m.numel()) == ex.CORRECT
