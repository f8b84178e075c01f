"""Checkers for the exercises of the template chapter (how a chapter notebook works)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import masks
from ..masks import causal_mask
from ._common import CORRECT, Wrong, _seeded, aten_ops, checker, measure, no, refusing, run
from ._match import _shape

__all__ = ["check_future_mask", "check_allowed_count", "check_cached_rows", "check_mask_fraction"]

_MASK_HINTS = {  # the hint of each classic mistake of a mask, by id ("On <the input>: " goes before it)
    "allowed": "this is the allowed mask (True = may attend, the book's convention). Negate it.",
    "diagonal-blocked": "the diagonal is blocked too. A position may attend to itself.",
    "past-keys": "those are the past keys (lower triangle). The future is above the diagonal, triu(1).",
    "first-rows": "those are the first rows. The new queries are the last rows, past .. past + new - 1.",
    "reversed": "reversed. In this book True means 'may attend'.",
}


def _expect_mask(got, want: torch.Tensor, case: str, mistakes: list[tuple[torch.Tensor, str]], other: str) -> None:
    """Raise the verdict unless got is the bool mask want: its type, shape, dtype, a (mask, id) mistake or "other"."""
    if not isinstance(got, torch.Tensor):
        raise Wrong("not-a-tensor", f"On {case} return a tensor, got {type(got).__name__}.")
    if tuple(got.shape) != tuple(want.shape):
        raise Wrong("shape", f"On {case} expected shape {tuple(want.shape)}, got {_shape(got)}.")
    if got.dtype != torch.bool:
        values = "the values are right, but " if torch.equal(got.cpu().bool(), want) else ""
        raise Wrong("dtype", f"On {case}: {values}the dtype is {got.dtype}. Return a bool tensor.")
    if not torch.equal(got.cpu(), want):
        mistake = next((m for wrong, m in mistakes if torch.equal(got.cpu(), wrong)), "other")
        raise Wrong(mistake, f"On {case}: {_MASK_HINTS.get(mistake, other)}")


@checker
def check_future_mask(fn: Callable[[int], torch.Tensor]) -> str:
    """fn(size) must return the blocked (future) positions: (size, size) bool, True where key > query."""
    for n in (4, 7, 1, 10):
        blocked = ~causal_mask(n)
        # with the diagonal: the allowed mask transposed; without it, the lower triangle
        mistakes = [(~blocked, "allowed"), (causal_mask(n).T, "diagonal-blocked"), (blocked.T, "past-keys")]
        other = "wrong values. True exactly where the key lies after the query."
        _expect_mask(run(fn, n, case=f"size={n}"), blocked, f"size={n}", mistakes, other)
    return CORRECT


@checker
def check_allowed_count(fn: Callable[[int], int]) -> str:
    """fn(n) must return how many True entries tl.causal_mask(n) has, by a formula in n: masks and triangles refuse."""
    guarded = refusing(fn, ops=aten_ops("tril", "triu", "tril_indices", "triu_indices"))
    forbidden = (masks.causal_mask, masks.target_mask, masks.sliding_window_mask)
    names = "a mask (tl.causal_mask, or a triangle from torch.tril)"
    for n in (1, 3, 10, 57, 8):
        got = measure("the count", run(guarded, n, case=f"n={n}", forbidden=forbidden, names=names))[0]
        want = n * (n + 1) // 2
        mistakes = {  # the wrong counts, by value (no two are equal for these n)
            n * n: ("every-entry", "that counts every entry. Only the lower triangle, diagonal included, is True."),
            n * (n - 1) // 2: ("no-diagonal", "almost, include the diagonal; each position may attend to itself."),
            n * (n + 1): ("not-halved", "you got n (n + 1): halve it, 1 + 2 + ... + n = n (n + 1) / 2."),
        }
        if abs(got - want) < 1e-6:
            continue
        mistake, hint = mistakes.get(got, ("other", f"expected {want}, got {got:g}."))
        return no(mistake, f"For n={n}: {hint}")
    return CORRECT


@checker
def check_cached_rows(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(past, new) must return the causal-mask rows for `new` queries after `past` cached positions."""
    for past, new in ((3, 2), (0, 4), (5, 1), (2, 6)):
        case = f"past={past}, new={new}"
        got = run(fn, past, new, case=case)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (new, new) and past:
            hint = f"the new queries see the {past} cached keys too, (new, past + new)"
            return no("no-cached-keys", f"On {case} the shape is (new, new): {hint}.")
        want = causal_mask(past + new)[past:]
        other = "wrong values. A query sees every cached key and the new keys up to itself."
        _expect_mask(got, want, case, [(causal_mask(past + new)[:new], "first-rows"), (~want, "reversed")], other)
    return CORRECT


def _ignores_entries(fn, mask: torch.Tensor, value: float) -> bool:
    """fn gives `value` again for a mask of the same shape with other entries: it does not read them."""
    other = torch.zeros_like(mask)
    other[0, 0] = True  # one True entry: a fraction far from any formula's
    try:
        return abs(measure("the fraction", run(fn, other, case="another mask"))[0] - value) < 1e-9
    except Wrong:
        return False


@checker
def check_mask_fraction(fn) -> str:
    """Experiment: fn(mask) measures the fraction of True entries, on causal masks and on masks that are not."""
    g = _seeded(8)
    masks = [causal_mask(n) for n in (1, 2, 7, 300)]
    masks += [torch.rand(5, 9, generator=g) < 0.3, torch.rand(12, 12, generator=g) < 0.8]
    for mask in masks:
        n = mask.shape[0]
        kind = "a causal mask" if torch.equal(mask, causal_mask(n)) else "a random mask"
        case = f"{kind} of shape {tuple(mask.shape)}"
        value = measure("the fraction", run(fn, mask.clone(), case=case))[0]
        want = mask.float().mean().item()
        if abs(value - want) < 1e-6:
            continue
        if abs(value - (1 - want)) < 1e-6:
            return no("blocked", f"On {case} you measured the blocked entries ({value:.4f}): measure the True ones.")
        if abs(value - mask.sum().item()) < 1e-6:
            return no("count", f"On {case} that is the count of True entries; divide by the number of entries.")
        if abs(value - (n + 1) / (2 * n)) < 1e-6 and _ignores_entries(fn, mask, value):
            return no("formula", f"On {case} you used the formula (n + 1) / 2n. Measure the fraction from the entries.")
        return no("other", f"On {case} the fraction of True entries is {want:.4f}, got {value:.4f}.")
    return CORRECT
