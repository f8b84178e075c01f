"""Checkers for the exercises of the tokenization chapter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..tokenization import _merge, train_bpe
from ._common import _TODO, CORRECT, _measured

__all__ = ["check_pair_counts", "check_merge", "check_compression"]


def check_pair_counts(fn: Callable[[dict], dict]) -> str:
    """fn(words) with words = {tuple of ids: how often that word occurs} -> {adjacent pair: occurrences}."""
    words = {(1, 2, 3): 4, (2, 3): 1, (3, 3, 3): 2, (5,): 7}
    got = fn(words)
    if got is None:
        return _TODO
    if not isinstance(got, dict):
        return f"Return a dict (a Counter is one) from pair to count, got {type(got).__name__}."
    want = Counter()
    for w, f in words.items():
        for pair in zip(w, w[1:]):
            want[pair] += f
    got = {pair: n for pair, n in got.items() if n}
    if got == dict(want):
        return CORRECT
    if got.get((2, 3)) == 2:
        return "Not quite: (2, 3) occurs in two words seen 4 and 1 times, so 5 times. Weight each word by its count."
    if got.get((3, 3)) in (2, 1):
        return "Not quite: (3, 3, 3) holds the pair (3, 3) twice, overlapping, so it counts 2 x 2 = 4 times."
    if (1, 3) in got or (5,) in got:
        return "Count only adjacent pairs: ids next to each other inside one word."
    return f"For {words} expected {dict(want)}, got {got}."


def check_merge(fn: Callable[[list, tuple, int], list]) -> str:
    """fn(ids, pair, new_id) -> ids with every non-overlapping occurrence of pair, left to right, replaced."""
    if fn([1, 2], (1, 2), 9) is None:
        return _TODO
    for ids, pair, new_id in (
        ([1, 2, 3, 1, 2], (1, 2), 9),
        ([4, 4, 4], (4, 4), 7),
        ([5, 6], (6, 5), 8),
        ([], (1, 2), 3),
    ):
        got, want = fn(list(ids), pair, new_id), _merge(ids, pair, new_id)
        if got is None or list(got) != want:
            if ids == [1, 2, 3, 1, 2] and list(got or []) == [9, 3, 1, 2]:
                return "Not quite: only the first occurrence was merged. Replace every occurrence of the pair."
            if ids == [1, 2, 3, 1, 2] and list(got or []) == [9, 2, 3, 9, 2]:
                return "Not quite: replace both ids of the pair by the new one, not just the first."
            if ids == [4, 4, 4]:
                return (
                    f"For {ids} and pair {pair}: the occurrences overlap; take them left to right -> {want}, got {got}."
                )
            return f"For {ids}, pair {pair}, new id {new_id}: expected {want}, got {got}."
    return CORRECT


def check_compression(fn: Callable[[str, int], float]) -> str:
    """Experiment: fn(text, num_merges) must measure characters per token of text under train_bpe(text, num_merges)."""
    text = "The naïve café's crème brûlée, twice. " * 40 + "Where the bee sucks, there suck I."
    results = _measured("characters per token", *(fn(text, n) for n in (0, 30)))
    if isinstance(results, str):
        return results
    want = [len(text) / len(train_bpe(text, n).encode(text)) for n in (0, 30)]
    nbytes = len(text.encode("utf-8"))
    for got, w, n in zip(results, want, (0, 30)):
        if abs(got - w) < 1e-6:
            continue
        if abs(got * w - 1) < 1e-6:
            return f"That is tokens per character ({got:.3f}); the chapter measures characters per token ({w:.3f})."
        if abs(got / w - nbytes / len(text)) < 1e-6:
            return f"With {n} merges you measured bytes per token; count characters, len(text), instead."
        return f"With {n} merges this text has {w:.3f} characters per token, you measured {got:.3f}."
    if not results[1] > results[0]:
        return "More merges should give fewer, longer tokens: characters per token should grow."
    return CORRECT
