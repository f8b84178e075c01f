"""Mutation suite for the positional-encoding chapter's checkers: classic mistakes are named, other routes pass."""

from __future__ import annotations

import math

import pytest
import torch
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex
from transformer_lib.exercises.ch03_positional_encoding import _doubled_exponent, _table

_raises = raising(ValueError("math domain error"))


# The notebook's solutions (notebooks/03_positional_encoding.ipynb).
def solution_encoding(max_len, d_model):
    out = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            out[pos, 2 * i] = math.sin(angle)
            out[pos, 2 * i + 1] = math.cos(angle)
    return out


def solution_self_similarity(d_model):
    return d_model / 2


def solution_wavelength(d_model, i):
    return 2 * math.pi * 10000 ** (2 * i / d_model)


def solution_permutation_gap(layer, tokens, perm, use_pe):
    positions = tl.sinusoidal_encoding(tokens.shape[1], tokens.shape[2])

    def run(t):
        return layer(t + positions if use_pe else t)

    with torch.no_grad():
        return (run(tokens[:, perm]) - run(tokens)[:, perm]).abs().max().item()


def _vectorised(max_len, d):  # by hand, without loops
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(max_len, d)


def _loop(max_len, d, angle):
    out = torch.zeros(max_len, d, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(0, d, 2):  # i steps by 2: a dimension index
            out[pos, i] = math.sin(angle(pos, i, d))
            out[pos, i + 1] = math.cos(angle(pos, i, d))
    return out


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda m, d: _table(m, d, lambda i: 2 * i / d)[:, [j ^ 1 for j in range(d)]], "swapped"),
        (lambda m, d: _loop(m, d, lambda p, i, d: p / 10000 ** (2 * i / d)), "doubled-exponent"),
        (_doubled_exponent, "doubled-exponent"),  # the same bug, by whole tables
        (lambda m, d: _table(m, d, lambda i: i / d), "halved-exponent"),
        (lambda m, d: _table(m, d, lambda i: 2 * i / d, start=1), "off-by-one"),
        (lambda m, d: _table(m, d, lambda i: -2 * i / d), "multiplied"),
        (lambda m, d: _table(m, d, lambda i: 2 * i / 64), "fixed-d_model"),
        (
            lambda m, d: _table(m, d, lambda i: 2 * i / d)[:, list(range(0, d, 2)) + list(range(1, d, 2))],
            "not-interleaved",
        ),
        (lambda m, d: _table(m, d, lambda i: 2 * i / d).T, "transposed"),
        (lambda m, d: _vectorised(m, d)[:, :-1], "shape"),
        (lambda m, d: tl.sinusoidal_encoding(m, d), "by-hand"),
        (lambda m, d: tl.SinusoidalPositionalEncoding(d, max_len=m).pe[:m], "by-hand"),
        (lambda m, d: _table(m, d, lambda i: 2 * i / d, base=1000.0), "other"),
        (_raises, "raised"),
    ],
)
def test_encoding_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_encoding(wrong), mistake)


def test_encoding_accepts_other_routes():
    assert ex.check_encoding(solution_encoding) == ex.CORRECT
    assert ex.check_encoding(lambda m, d: _loop(m, d, lambda p, i, d: p / 10000 ** (i / d))) == ex.CORRECT  # float64
    assert ex.check_encoding(lambda m, d: _table(m, d, lambda i: 2 * i / d)) == ex.CORRECT
    assert ex.check_encoding(_vectorised) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda d: float(d), "dims"),
        (lambda d: 1.0, "one-pair"),
        (lambda d: math.sqrt(d / 2), "length"),
        (lambda d: d / 2 - 1, "off-by-one"),
        (lambda d: d / 2 + 1, "off-by-one"),
        (lambda d: 32.0, "other"),  # right only for d_model = 64
        (_raises, "raised"),
        (lambda d: "d/2", "not-a-number"),
    ],
)
def test_self_similarity_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_self_similarity(wrong), mistake)


def test_self_similarity_accepts_other_routes():
    assert ex.check_self_similarity(solution_self_similarity) == ex.CORRECT
    measured = lambda d: (tl.sinusoidal_encoding(50, d)[37] @ tl.sinusoidal_encoding(50, d)[37]).item()  # 31.999998
    assert ex.check_self_similarity(measured) == ex.CORRECT
    assert ex.check_self_similarity(lambda d: torch.tensor(d // 2)) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda d, i: 10000 ** (2 * i / d), "radians"),
        (lambda d, i: 2 * math.pi * 10000 ** (4 * i / d), "doubled-exponent"),
        (lambda d, i: 2 * math.pi * 10000 ** (i / d), "halved-exponent"),
        (lambda d, i: 1 / (2 * math.pi * 10000 ** (2 * i / d)), "frequency"),
        (lambda d, i: 2 * math.pi * 10000 ** (-2 * i / d), "angular-frequency"),
        (lambda d, i: 2 * math.pi * 10000 ** (2 * i / 64), "other"),  # right only for d_model = 64
        (_raises, "raised"),
    ],
)
def test_wavelength_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_wavelength(wrong), mistake)


def test_wavelength_accepts_other_routes():
    assert ex.check_wavelength(solution_wavelength) == ex.CORRECT
    assert ex.check_wavelength(lambda d, i: 2 * math.pi / math.exp(-2 * i / d * math.log(10000.0))) == ex.CORRECT


def _gap(layer, tokens, perm, use_pe, travel=False, unshuffled=False, inverse=False, mean=False, fixed_pe=False):
    pe = tl.sinusoidal_encoding(6, 16) if fixed_pe else tl.sinusoidal_encoding(tokens.shape[1], tokens.shape[2])
    with torch.no_grad():
        if travel and use_pe:
            x = tokens + pe
            return (layer(x[:, perm]) - layer(x)[:, perm]).abs().max().item()
        run = lambda t: layer(t + pe if use_pe else t)
        plain = run(tokens)
        compared = plain if unshuffled else plain[:, perm.argsort()] if inverse else plain[:, perm]
        diff = (run(tokens[:, perm]) - compared).abs()
        return (diff.mean() if mean else diff.max()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda layer, t, p, u: 1.0 if u else 0.0, "other"),  # constants
        (lambda layer, t, p, u: _gap(layer, t, p, u, travel=True), "travelled"),
        (lambda layer, t, p, u: _gap(layer, t, p, u, unshuffled=True), "unshuffled"),
        (lambda layer, t, p, u: _gap(layer, t, p, u, inverse=True), "inverse"),
        (lambda layer, t, p, u: _gap(layer, t, p, u, mean=True), "mean"),
        (lambda layer, t, p, u: _gap(layer, t, p, u, fixed_pe=True), "raised"),  # fails on T=9
        (lambda layer, t, p, u: _gap(layer, t, p, True), "not-noise"),  # the encoding even when use_pe is False
        (lambda layer, t, p, u: solution_permutation_gap(layer, t, p, u) * 2, "other"),
        (lambda layer, t, p, u: "large", "not-a-number"),
    ],
)
def test_permutation_gap_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_permutation_gap(wrong), mistake)


def test_permutation_gap_accepts_other_routes():
    assert ex.check_permutation_gap(solution_permutation_gap) == ex.CORRECT

    def inverse_route(layer, tokens, perm, use_pe):  # un-shuffle the shuffled run instead, in float64 for the diff
        pe = tl.SinusoidalPositionalEncoding(tokens.shape[2], max_len=tokens.shape[1]).pe[: tokens.shape[1]]
        with torch.no_grad():
            run = lambda t: layer(t + pe if use_pe else t)
            back = run(tokens[:, perm])[:, perm.argsort()]
            return float((back.double() - run(tokens).double()).abs().max())

    assert ex.check_permutation_gap(inverse_route) == ex.CORRECT


def test_a_gap_predicted_instead_of_measured_is_named():
    def predicts(layer, tokens, perm, use_pe):  # without positions the theory says 0: the layer is never run
        return solution_permutation_gap(layer, tokens, perm, use_pe) if use_pe else 0.0

    rejected_as(ex.check_permutation_gap(predicts), "skipped")
