"""Checkers for the exercises of the template chapter (how a chapter notebook works)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..masks import causal_mask
from ._common import _TODO, CORRECT, _measured, _shape

__all__ = ["check_future_mask", "check_allowed_count", "check_cached_rows", "check_mask_fraction"]


def check_future_mask(fn: Callable[[int], torch.Tensor]) -> str:
    """fn(size) must return the blocked (future) positions: (size, size) bool, True where key > query."""
    result = fn(4)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
        return f"Expected a bool tensor, got {type(result).__name__} {getattr(result, 'dtype', '')}."
    if tuple(result.shape) != (4, 4):
        return f"Expected shape (4, 4) for size 4, got {_shape(result)}."
    for n in (4, 7, 1):
        got, blocked = fn(n).cpu(), ~causal_mask(n)
        if torch.equal(got, blocked):
            continue
        if torch.equal(got, ~blocked):
            return "Not quite: this is the allowed mask (True = may attend). Negate it."
        if torch.equal(got, blocked | torch.eye(n, dtype=torch.bool)):
            return "Not quite: the diagonal is blocked too. A position may attend to itself."
        return f"Not quite: wrong for size {n}. True exactly where the key lies after the query."
    return CORRECT


def check_allowed_count(fn: Callable[[int], int]) -> str:
    """fn(n) must return how many True entries tl.causal_mask(n) has."""
    if fn(3) is None:
        return _TODO
    for n in (1, 3, 10, 57):
        got, want = fn(n), n * (n + 1) // 2
        if got == want:
            continue
        if got == n * n:
            return "That counts every entry. Only the lower triangle, diagonal included, is True."
        if got == n * (n - 1) // 2:
            return "Almost: include the diagonal; each position may attend to itself."
        return f"For n={n} expected {want}, got {got}."
    return CORRECT


def check_cached_rows(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(past, new) must return the causal-mask rows for `new` queries after `past` cached positions."""
    if fn(2, 1) is None:
        return _TODO
    for past, new in ((3, 2), (0, 4), (5, 1)):
        got, want = fn(past, new), causal_mask(past + new)[past:]
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            return (
                f"For past={past}, new={new}: expected shape {tuple(want.shape)}, (new, past + new); got {_shape(got)}."
            )
        if torch.equal(got.cpu(), want):
            continue
        if torch.equal(got.cpu(), causal_mask(past + new)[:new]):
            return "Those are the first rows. The new queries are the last rows: positions past .. past + new - 1."
        return f"Wrong values for past={past}, new={new}: a query sees every cached key and new keys up to itself."
    return CORRECT


def check_mask_fraction(fn) -> str:
    """Experiment: fn(n) measures the fraction of a causal mask's n x n entries that are True."""
    for n in (1, 2, 7, 1000):
        measured = _measured("the fraction", fn(n))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = (n + 1) / (2 * n)
        if abs(value - want) < 1e-6:
            continue
        if abs(value - (n - 1) / (2 * n)) < 1e-6:
            return f"For n={n} you counted the blocked entries ({value:.4f}); measure the allowed ones (True)."
        if abs(value - want * n * n) < 1e-6:
            return "That is the count of allowed entries; divide by n * n to get the fraction."
        return f"Not quite: for n={n} the measured fraction should be {want:.4f}, got {value:.4f}."
    return CORRECT
