"""Mutation suite for the tokenization chapter's checkers: classic mistakes are named, other valid routes pass."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from _mutation import raising, rejected_as

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
    ("wrong", "mistake"),
    [
        (lambda w: _pairs(w, weighted=False), "unweighted"),
        (lambda w: _pairs(w, overlapping=False), "overlap"),
        (lambda w: _pairs(w, adjacent=False), "not-adjacent"),
        (lambda w: _pairs(w, across=True), "across-words"),
        (lambda w: {(1, 2): 4, (2, 3): 5, (3, 3): 4}, "other"),  # right only for the first corpus
        (lambda w: list(_pairs(w).items()), "not-a-dict"),
        (lambda w: [], "not-a-dict"),
        (_raises, "raised"),
    ],
)
def test_pair_counts_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_pair_counts(wrong), mistake)


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
    ("wrong", "mistake"),
    [
        (lambda i, p, n: _merge(i, p, n, first_only=True), "first-only"),
        (lambda i, p, n: _merge(i, p, n, keep_second=True), "kept-second"),
        (lambda i, p, n: _merge(i, p, n, reverse=True), "right-to-left"),
        (lambda i, p, n: [x for x in i if x not in p] + [n], "other"),
        (lambda i, p, n: 5, "not-a-list"),
        (_raises, "raised"),
    ],
)
def test_merge_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_merge(wrong), mistake)


def test_merge_accepts_other_routes():
    assert ex.check_merge(solution_merge) == ex.CORRECT
    assert ex.check_merge(lambda i, p, n: tuple(solution_merge(i, p, n))) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda t, n: 1 / solution_compression(t, n), "inverted"),
        (lambda t, n: len(t.encode("utf-8")) / len(tl.train_bpe(t, n).encode(t)), "bytes"),
        (lambda t, n: len(t.split()) / len(tl.train_bpe(t, n).encode(t)), "words"),
        (lambda t, n: 1.0 + n / 30, "other"),  # a formula in the number of merges
        (lambda t, n: "about 2", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_compression_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_compression(wrong), mistake)


def test_compression_accepts_other_routes():
    assert ex.check_compression(solution_compression) == ex.CORRECT
    per_token = lambda t, n: sum(1 for _ in t) / len(tl.train_bpe(t, n).encode(t))
    assert ex.check_compression(per_token) == ex.CORRECT
