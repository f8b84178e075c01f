"""Mutation suite for the template chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

import pytest
import torch
from _mutation import raising, rejected

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
    ("wrong", "phrase"),
    [
        (lambda n: tl.causal_mask(n), "allowed mask"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(0), "diagonal is blocked"),
        (lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1), "past keys"),
        (lambda n: torch.ones(n, n).triu(1), "values are right, but the dtype is torch.float32"),
        (lambda n: torch.ones(4, 4, dtype=torch.bool).triu(1), "expected shape (7, 7)"),  # right only for size 4
        (lambda n: torch.ones(n, n, dtype=torch.bool).triu(2), "wrong values"),
        (_raises, "raised ValueError on size=4"),
    ],
)
def test_future_mask_names_the_mistake(wrong, phrase):
    rejected(ex.check_future_mask(wrong), phrase)


def test_future_mask_accepts_other_routes():
    assert ex.check_future_mask(solution_future_mask) == ex.CORRECT
    assert ex.check_future_mask(lambda n: torch.arange(n)[None, :] > torch.arange(n)[:, None]) == ex.CORRECT
    assert ex.check_future_mask(lambda n: ~tl.causal_mask(n)) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda n: n * n, "every entry"),
        (lambda n: n * (n - 1) // 2, "include the diagonal"),
        (lambda n: n * (n + 1), "halve it"),
        (lambda n: 6, "expected"),  # right only for n = 3
        (lambda n: "n(n+1)/2", "as a number"),
        (_raises, "raised ValueError on n=1"),
    ],
)
def test_allowed_count_names_the_mistake(wrong, phrase):
    rejected(ex.check_allowed_count(wrong), phrase)


def test_allowed_count_accepts_other_routes():
    assert ex.check_allowed_count(solution_allowed_count) == ex.CORRECT
    assert ex.check_allowed_count(lambda n: n * (n + 1) / 2) == ex.CORRECT  # a float
    assert ex.check_allowed_count(lambda n: sum(range(1, n + 1))) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda p, n: tl.causal_mask(p + n)[:n], "first rows"),
        (lambda p, n: tl.causal_mask(n), "cached keys too"),
        (lambda p, n: ~tl.causal_mask(p + n)[p:], "reversed"),
        (lambda p, n: tl.causal_mask(p + n)[p:].float(), "values are right, but the dtype"),
        (lambda p, n: torch.ones(n, p + n, dtype=torch.bool), "wrong values"),
        (_raises, "raised ValueError on past=3"),
    ],
)
def test_cached_rows_names_the_mistake(wrong, phrase):
    rejected(ex.check_cached_rows(wrong), phrase)


def test_cached_rows_accepts_other_routes():
    assert ex.check_cached_rows(solution_cached_rows) == ex.CORRECT
    by_comparison = lambda p, n: torch.arange(p + n)[None, :] <= torch.arange(p, p + n)[:, None]
    assert ex.check_cached_rows(by_comparison) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda m: (m.shape[0] + 1) / (2 * m.shape[0]), "used the formula"),  # the closed form
        (lambda m: 0.5, "got 0.5000"),  # a constant
        (lambda m: (~m).float().mean().item(), "blocked entries"),
        (lambda m: m.sum().item(), "count of true entries"),
        (lambda m: m.float().mean(0), "as a number"),
        (_raises, "raised ValueError on a causal mask of shape (1, 1)"),
    ],
)
def test_mask_fraction_names_the_mistake(wrong, phrase):
    rejected(ex.check_mask_fraction(wrong), phrase)


def test_mask_fraction_accepts_other_routes():
    assert ex.check_mask_fraction(solution_mask_fraction) == ex.CORRECT
    assert ex.check_mask_fraction(lambda m: m.sum().item() / m.numel()) == ex.CORRECT
    assert ex.check_mask_fraction(lambda m: torch.count_nonzero(m).double() / m.numel()) == ex.CORRECT
