"""Checkers for the exercises of the tokenization chapter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..tokenization import _merge, train_bpe
from ._common import CORRECT, _measured, attempt

__all__ = ["check_pair_counts", "check_merge", "check_compression"]


def _counts(words: dict, weighted: bool = True, overlapping: bool = True, adjacent: bool = True) -> dict:
    counts = Counter()
    for word, n in words.items():
        if adjacent:
            pairs = list(zip(word, word[1:]))
        else:
            pairs = [(a, b) for i, a in enumerate(word) for b in word[i + 1 :]]
        for pair in pairs if overlapping else dict.fromkeys(pairs):
            counts[pair] += n if weighted else 1
    return dict(counts)


_WORDS = (
    {(1, 2, 3): 4, (2, 3): 1, (3, 3, 3): 2, (5,): 7},
    {(7, 7, 7, 7): 3, (8, 7): 5, (7, 8, 9): 2},
    {(4, 1): 6, (1, 4, 1, 4): 1, (): 3},
)


def check_pair_counts(fn: Callable[[dict], dict]) -> str:
    """fn(words) with words = {tuple of ids: how often that word occurs} -> {adjacent pair: occurrences}."""
    for words in _WORDS:
        case = f"words={words}"
        got, hint = attempt(fn, dict(words), case=case)
        if hint:
            return hint
        if not isinstance(got, dict):
            return f"On {case} return a dict (a Counter is one) from pair to count, got {type(got).__name__}."
        got = {tuple(pair): n for pair, n in got.items() if n}
        want = _counts(words)
        if got == want:
            continue
        if got == _counts(words, weighted=False):
            return f"On {case}: every pair counted once per word. Weight each word by its count."
        if got == _counts(words, overlapping=False) or got == _counts(words, weighted=False, overlapping=False):
            return f"On {case}: a word like (3, 3, 3) holds the pair (3, 3) twice, overlapping. Count both."
        if got == _counts(words, adjacent=False):
            return f"On {case}: count only adjacent pairs, ids next to each other inside one word."
        joined = Counter()
        flat = [i for word, n in words.items() for _ in range(n) for i in word]
        joined.update(zip(flat, flat[1:]))
        if got == dict(joined):
            return f"On {case}: you counted pairs across word boundaries. Pairs stay inside one word."
        return f"On {case} expected {want}, got {got}."
    return CORRECT


def _right_to_left(ids: list, pair: tuple, new_id: int) -> list:
    return _merge(ids[::-1], pair[::-1], new_id)[::-1]


def check_merge(fn: Callable[[list, tuple, int], list]) -> str:
    """fn(ids, pair, new_id) -> ids with every non-overlapping occurrence of pair, left to right, replaced."""
    for ids, pair, new_id in (
        ([1, 2, 3, 1, 2], (1, 2), 9),
        ([4, 4, 4], (4, 4), 7),
        ([5, 6], (6, 5), 8),
        ([], (1, 2), 3),
        ([2, 2, 2, 2, 2, 3, 2, 2], (2, 2), 11),
        ([6, 1, 6, 1, 6], (1, 6), 4),
        ([12, 1, 2, 12, 21, 2, 1, 2], (1, 2), 99),  # multi-digit ids: "12" holds "1", "2" but is not the pair
        ([101, 10, 1, 10, 1, 110], (10, 1), 256),
    ):
        case = f"ids={ids}, pair={pair}, new_id={new_id}"
        got, hint = attempt(fn, list(ids), pair, new_id, case=case)
        if hint:
            return hint
        want = _merge(ids, pair, new_id)
        try:
            got = list(got)
        except TypeError:
            return f"On {case} return a list of ids, got {type(got).__name__}."
        if got == want:
            continue
        if got == _first_only(ids, pair, new_id):
            return f"On {case}: only the first occurrence was merged. Replace every occurrence of the pair."
        if got == _keep_second(ids, pair, new_id):
            return f"On {case}: replace both ids of the pair by the new one, not just the first."
        if got == _right_to_left(ids, pair, new_id):
            return f"On {case}: the occurrences overlap; scan left to right -> {want}, got {got}."
        return f"On {case} expected {want}, got {got}."
    return CORRECT


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2 :]
    return list(ids)


def _keep_second(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out += [new_id, ids[i + 1]]
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


_TEXTS = (
    "The naïve café's crème brûlée, twice. " * 30 + "Where the bee sucks, there suck I.",
    "to be or not to be, that is the question; " * 25 + "whether 'tis nobler in the mind to suffer",
)


def check_compression(fn: Callable[[str, int], float]) -> str:
    """Experiment: fn(text, num_merges) must measure characters per token of text under train_bpe(text, num_merges).

    The checker runs it on texts and merge counts of its own and compares with its own measurement.
    """
    for text in _TEXTS:
        results = []
        for n in (0, 7, 30):
            case = f"a text of {len(text)} characters ({text[:20]!r}...) with {n} merges"
            got, hint = attempt(fn, text, n, case=case)
            if hint:
                return hint
            measured = _measured("characters per token", got)
            if isinstance(measured, str):
                return measured
            got = measured[0]
            tokens = len(train_bpe(text, n).encode(text))
            want = len(text) / tokens
            results.append(got)
            if abs(got - want) < 1e-6:
                continue
            if abs(got * want - 1) < 1e-6:
                return (
                    f"On {case}: that is tokens per character ({got:.3f}); measure characters per token ({want:.3f})."
                )
            nbytes = len(text.encode("utf-8"))
            if nbytes != len(text) and abs(got - nbytes / tokens) < 1e-6:
                return f"On {case} you measured bytes per token; count characters, len(text), instead."
            if abs(got - len(text.split()) / tokens) < 1e-6:
                return f"On {case} you counted words; count characters, len(text)."
            return f"On {case} the text has {want:.3f} characters per token, you measured {got:.3f}."
        if not results[-1] > results[0]:
            return "More merges should give fewer, longer tokens: characters per token should grow."
    return CORRECT
