"""Checkers for the exercises of the tokenization chapter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..tokenization import _merge, train_bpe
from ._common import CORRECT, checker, measure, no, run

__all__ = ["check_pair_counts", "check_merge", "check_compression"]

_WORDS = (
    {(1, 2, 3): 4, (2, 3): 1, (3, 3, 3): 2, (5,): 7},
    {(7, 7, 7, 7): 3, (8, 7): 5, (7, 8, 9): 2},
    {(4, 1): 6, (1, 4, 1, 4): 1, (): 3},
)
_OVERLAP = "a word like (3, 3, 3) holds the pair (3, 3) twice, overlapping. Count both."
_PAIR_MISTAKES = (  # (the flags of _counts that make it, its id, its hint)
    ({"weighted": False}, "unweighted", "every pair counted once per word. Weight each word by its count."),
    ({"overlapping": False}, "overlap", _OVERLAP),
    ({"weighted": False, "overlapping": False}, "overlap", _OVERLAP),
    ({"adjacent": False}, "not-adjacent", "count only adjacent pairs, ids next to each other inside one word."),
    ({"across": True}, "across-words", "you counted pairs across word boundaries. Pairs stay inside one word."),
)
_MERGE_HINTS = {  # by id, with the merge expected and the one got filled in
    "first-only": "only the first occurrence was merged. Replace every occurrence of the pair.",
    "kept-second": "replace both ids of the pair by the new one, not just the first.",
    "right-to-left": "the occurrences overlap; scan left to right -> {want}, got {got}.",
    "digits": "you merged digits inside longer ids (expected {want}, got {got}): compare whole ids, not their text.",
    "other": "expected {want}, got {got}.",
}
_TEXTS = (
    "The naïve café's crème brûlée, twice. " * 30 + "Where the bee sucks, there suck I.",
    "to be or not to be, that is the question; " * 25 + "whether 'tis nobler in the mind to suffer",
)


def _counts(words: dict, weighted=True, overlapping=True, adjacent=True, across=False) -> dict:
    """The pair counts of words: right, or with the mistakes the flags name."""
    if across:  # the words run together
        flat = [i for word, n in words.items() for _ in range(n) for i in word]
        return dict(Counter(zip(flat, flat[1:])))
    counts = Counter()
    for word, n in words.items():
        pairs = list(zip(word, word[1:])) if adjacent else [(a, b) for i, a in enumerate(word) for b in word[i + 1 :]]
        for pair in pairs if overlapping else dict.fromkeys(pairs):
            counts[pair] += n if weighted else 1
    return dict(counts)


@checker
def check_pair_counts(fn: Callable[[dict], dict]) -> str:
    """fn(words) with words = {tuple of ids: how often that word occurs} -> {adjacent pair: occurrences}."""
    for words in _WORDS:
        case = f"words={words}"
        got = run(fn, dict(words), case=case)
        if not isinstance(got, dict):
            return no("not-a-dict", f"On {case} return a dict of counts (a Counter is one), got {type(got).__name__}.")
        got, want = {tuple(pair): n for pair, n in got.items() if n}, _counts(words)
        if got == want:
            continue
        for flags, mistake, hint in _PAIR_MISTAKES:
            if got == _counts(words, **flags):
                return no(mistake, f"On {case}: {hint}")
        return no("other", f"On {case} expected {want}, got {got}.")
    return CORRECT


def _wrong_merge(ids: list, pair: tuple, new_id: int, first_only=False, keep_second=False) -> list:
    """A merge with the mistake the flag names: only the first occurrence replaced, or the pair's second id kept."""
    out, i, done = [], 0, False
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair and not done:
            out += [new_id, ids[i + 1]] if keep_second else [new_id]
            i, done = i + 2, first_only
        else:
            out.append(ids[i])
            i += 1
    return out


@checker
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
        got = run(fn, list(ids), pair, new_id, case=case)
        try:
            got = list(got)
        except TypeError:
            return no("not-a-list", f"On {case} return a list of ids, got {type(got).__name__}.")
        want = _merge(ids, pair, new_id)
        mistakes = {
            "first-only": _wrong_merge(ids, pair, new_id, first_only=True),
            "kept-second": _wrong_merge(ids, pair, new_id, keep_second=True),
            "right-to-left": _merge(ids[::-1], pair[::-1], new_id)[::-1],
            # merged in the ids' text: with the pair (1, 2), "21 2" becomes "299", a merge inside an id
            "digits": [int(t) for t in " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id)).split()],
        }
        if got != want:
            mistake = next((m for m, wrong in mistakes.items() if got == wrong), "other")
            return no(mistake, f"On {case}: " + _MERGE_HINTS[mistake].format(want=want, got=got))
    return CORRECT


@checker
def check_compression(fn: Callable[[str, int], float]) -> str:
    """Experiment: fn(text, num_merges) must measure characters per token of text under train_bpe(text, num_merges)."""
    for text in _TEXTS:
        for n in (7, 30, 0):  # 0 last: with no merges, bytes per token is 1, what a constant 1.0 gives too
            case = f"a text of {len(text)} characters ({text[:20]!r}...) with {n} merges"
            got = measure("characters per token", run(fn, text, n, case=case))[0]
            tokens = len(train_bpe(text, n).encode(text))
            want = len(text) / tokens
            if abs(got - want) < 1e-6:
                continue
            if abs(got * want - 1) < 1e-6:
                hint = f"that is tokens per character ({got:.3f}); measure characters per token ({want:.3f})"
                return no("inverted", f"On {case}: {hint}.")
            if abs(got - len(text.encode("utf-8")) / tokens) < 1e-6:
                return no("bytes", f"On {case} you measured bytes per token; count characters, len(text), instead.")
            if abs(got - len(text.split()) / tokens) < 1e-6:
                return no("words", f"On {case} you counted words; count characters, len(text).")
            return no("other", f"On {case} the text has {want:.3f} characters per token, you measured {got:.3f}.")
    return CORRECT
