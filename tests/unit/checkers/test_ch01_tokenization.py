"""Mutation suite for the tokenization chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from _mutation import raising, rejected

import transformer_lib as tl
from transformer_lib import exercises as ex

_raises = raising(AttributeError("'tuple' object has no attribute 'items'"))


# The notebook's solutions (notebooks/01_tokenization.ipynb).
def solution_pair_counts(words):
    counts = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:]):
            counts[pair] += n
    return counts


def solution_merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def solution_compression(text, num_merges):
    return len(text) / len(tl.train_bpe(text, num_merges).encode(text))


def _pairs(words, weighted=True, overlapping=True, adjacent=True, across=False):
    counts = Counter()
    if across:
        flat = [i for w, n in words.items() for _ in range(n) for i in w]
        counts.update(zip(flat, flat[1:]))
        return counts
    for w, n in words.items():
        pairs = list(zip(w, w[1:])) if adjacent else [(a, b) for i, a in enumerate(w) for b in w[i + 1 :]]
        for pair in pairs if overlapping else dict.fromkeys(pairs):
            counts[pair] += n if weighted else 1
    return counts


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda w: _pairs(w, weighted=False), "weight each word"),
        (lambda w: _pairs(w, overlapping=False), "overlapping"),
        (lambda w: _pairs(w, adjacent=False), "only adjacent pairs"),
        (lambda w: _pairs(w, across=True), "across word boundaries"),
        (lambda w: {(1, 2): 4, (2, 3): 5, (3, 3): 4}, "expected"),  # right only for the first corpus
        (lambda w: list(_pairs(w).items()), "return a dict"),
        (_raises, "raised AttributeError on words="),
    ],
)
def test_pair_counts_names_the_mistake(wrong, phrase):
    rejected(ex.check_pair_counts(wrong), phrase)


def test_pair_counts_accepts_other_routes():
    assert ex.check_pair_counts(solution_pair_counts) == ex.CORRECT

    def with_defaultdict(words):
        counts = defaultdict(int)
        for word, n in words.items():
            for i in range(len(word) - 1):
                counts[word[i], word[i + 1]] += n
        return counts

    assert ex.check_pair_counts(with_defaultdict) == ex.CORRECT


def _merge(ids, pair, new_id, first_only=False, keep_second=False, reverse=False):
    if reverse:
        return _merge(ids[::-1], pair[::-1], new_id)[::-1]
    out, i, done = [], 0, False
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair and not done:
            out += [new_id, ids[i + 1]] if keep_second else [new_id]
            i, done = i + 2, first_only
        else:
            out.append(ids[i])
            i += 1
    return out


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda i, p, n: _merge(i, p, n, first_only=True), "every occurrence"),
        (lambda i, p, n: _merge(i, p, n, keep_second=True), "both ids"),
        (lambda i, p, n: _merge(i, p, n, reverse=True), "scan left to right"),
        (lambda i, p, n: [x for x in i if x not in p] + [n], "expected"),
        (lambda i, p, n: 5, "return a list of ids"),
        (_raises, "raised AttributeError on ids=[1, 2, 3, 1, 2]"),
    ],
)
def test_merge_names_the_mistake(wrong, phrase):
    rejected(ex.check_merge(wrong), phrase)


def test_merge_accepts_other_routes():
    assert ex.check_merge(solution_merge) == ex.CORRECT
    assert ex.check_merge(lambda i, p, n: tuple(solution_merge(i, p, n))) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "phrase"),
    [
        (lambda t, n: 1 / solution_compression(t, n), "tokens per character"),
        (lambda t, n: len(t.encode("utf-8")) / len(tl.train_bpe(t, n).encode(t)), "bytes per token"),
        (lambda t, n: len(t.split()) / len(tl.train_bpe(t, n).encode(t)), "counted words"),
        (lambda t, n: 1.0 + n / 30, "you measured"),  # a formula in the number of merges
        (lambda t, n: "about 2", "as a number"),
        (_raises, "raised AttributeError on a text of"),
    ],
)
def test_compression_names_the_mistake(wrong, phrase):
    rejected(ex.check_compression(wrong), phrase)


def test_compression_accepts_other_routes():
    assert ex.check_compression(solution_compression) == ex.CORRECT
    per_token = lambda t, n: sum(1 for _ in t) / len(tl.train_bpe(t, n).encode(t))
    assert ex.check_compression(per_token) == ex.CORRECT
