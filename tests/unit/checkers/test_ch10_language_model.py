"""Mutation suite for the checkers of chapter 10 (the language model): classic mistakes are named, other routes pass."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("10_language_model", name)


_raises = raising(ZeroDivisionError("float division by zero"))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_bits_per_char", ex.check_bits_per_char),
        ("solution_nucleus_set", ex.check_nucleus_set),
        ("solution_temperature_loss", ex.check_temperature_loss),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


# ---- bits per character -------------------------------------------------------------------------

LN2 = math.log(2)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n, t, c: n * t / c, "nats"),
        (lambda n, t, c: n / LN2, "per-token"),
        (lambda n, t, c: n, "nats-per-token"),
        (lambda n, t, c: n * c / t / LN2, "upside-down"),
        (lambda n, t, c: n * c / t, "upside-down-nats"),
        (lambda n, t, c: n * t / c * LN2, "times-log2"),
        (lambda n, t, c: n * t / c / math.log(10), "log10"),
        (lambda n, t, c: n * t / LN2, "total"),
        (lambda n, t, c: n / c / LN2, "no-tokens"),
        (lambda n, t, c: n * t / c / LN2 if t == c else 1.0, "other"),
        (lambda n, t, c: "many", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_bits_per_char_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_bits_per_char(wrong), mistake)


@pytest.mark.parametrize(
    "right",
    [
        lambda n, t, c: math.log2(math.exp(n * t / c)),
        lambda n, t, c: torch.tensor(n * t) / c / torch.log(torch.tensor(2.0, dtype=torch.float64)),
        lambda n, t, c: (n / LN2) * (t / c),
    ],
)
def test_bits_per_char_other_routes_pass(right):
    assert ex.check_bits_per_char(right) == ex.CORRECT


# ---- nucleus set --------------------------------------------------------------------------------


def _nucleus(probs, p, rule="before", order="sorted"):
    if order == "given":
        s, idx = probs, torch.arange(len(probs))
    else:
        s, idx = probs.sort(descending=True)
    c = s.cumsum(0)
    if rule == "before":
        keep = c - s < p
    elif rule == "after":  # too few: the token that crosses top_p is dropped
        keep = c < p
    else:  # Hugging Face's shift: drop where cumsum > p, then shift right by one (keeps one too many at p)
        drop = c > p
        drop[1:] = drop[:-1].clone()
        drop[0] = False
        keep = ~drop
    if order == "sorted-mask":
        return keep
    return torch.zeros_like(keep).scatter(0, idx, keep)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda pr, p: _nucleus(pr, p, rule="shift"), "one-too-many"),
        (lambda pr, p: _nucleus(pr, p, rule="after"), "too-few"),
        (lambda pr, p: _nucleus(pr, p, order="given"), "unsorted"),
        (lambda pr, p: _nucleus(pr, p, order="sorted-mask"), "sorted-mask"),
        (lambda pr, p: pr > p, "none-kept"),
        (lambda pr, p: pr > 0, "too-many"),
        (lambda pr, p: _nucleus(pr, p) | ((torch.arange(len(pr)) == 0) & (p == 0.5)), "unsorted"),  # one input
        (lambda pr, p: _nucleus(pr, p) if p != 0.5 else _nucleus(pr, 0.3), "too-few"),  # one input, too few
        (lambda pr, p: _nucleus(pr, p).long(), "dtype"),
        (lambda pr, p: _nucleus(pr, p).nonzero()[:, 0], "shape"),
        (lambda pr, p: _nucleus(pr, p).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_nucleus_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_nucleus_set(wrong), mistake)


def test_the_boundary_case_is_exact():
    probs = torch.tensor([0.125, 0.5, 0.03125, 0.25, 0.09375])
    assert ex.check_nucleus_set(lambda pr, p: _nucleus(pr, p)) == ex.CORRECT
    assert _nucleus(probs, 0.75, rule="shift").sum() == 3  # the mistake keeps 0.125 after 0.5 + 0.25 = 0.75
    assert _nucleus(probs, 0.75).sum() == 2


def _nucleus_loop(probs, p):
    keep, mass = torch.zeros(len(probs), dtype=torch.bool), 0.0
    for i in sorted(range(len(probs)), key=lambda i: -probs[i].item()):
        if mass >= p:
            break
        keep[i] = True
        mass += probs[i].item()
    return keep


@pytest.mark.parametrize(
    "right",
    [
        _nucleus,
        _nucleus_loop,
        lambda pr, p: tl.nucleus(pr.log(), p),
    ],
)
def test_nucleus_other_routes_pass(right):
    assert ex.check_nucleus_set(right) == ex.CORRECT


# ---- temperature and loss -----------------------------------------------------------------------


def _bits(lg, y, t):
    return F.cross_entropy(lg / t, y).item() / LN2


def _bits_by_exp(lg, y, t, stable=False):
    """softmax written out, exp over its sum, then -log2 of the target's: exp overflows above about 88."""
    s = lg / t  # (N, V)
    e = (s - s.amax(-1, keepdim=True) if stable else s).exp()
    return -(e / e.sum(-1, keepdim=True)).gather(1, y[:, None]).log2().mean().item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda lg, y, t: F.cross_entropy(lg / t, y).item(), "nats"),
        (lambda lg, y, t: _bits(lg * t * t, y, t), "multiplied"),
        (lambda lg, y, t: _bits(lg, y, 1.0), "temperature-ignored"),
        (lambda lg, y, t: F.cross_entropy(lg / t, y, reduction="sum").item() / LN2, "total"),
        (lambda lg, y, t: F.cross_entropy(lg / t, y).item() / math.log(10), "log10"),
        (lambda lg, y, t: -_bits(lg, y, t), "sign"),
        (lambda lg, y, t: torch.distributions.Categorical(logits=lg / t).entropy().mean().item() / LN2, "entropy"),
        (lambda lg, y, t: _bits(lg, y, 1.0) / t, "loss-divided"),
        (lambda lg, y, t: {0.5: 3.1, 1.0: 2.0, 2.0: 2.4}.get(t, 2.2), "not-measured"),
        (lambda lg, y, t: None if t > 5 else "low", "not-a-number"),
        (lambda lg, y, t: _bits(lg, y, t) * 1.01, "other"),
        (_raises, "raised"),
        (_bits_by_exp, "overflow"),
        (lambda lg, y, t: _bits_by_exp(lg.double(), y, t), "overflow"),  # float64 overflows above about 709
    ],
)
def test_temperature_loss_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_temperature_loss(wrong), mistake)


def test_numbers_typed_from_the_first_input_fail_on_the_others():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2000, 12, generator=g) * 2.0
    targets = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
    typed = {t: _bits(logits, targets, t) for t in (0.5, 1.0, 2.0)}
    feedback = ex.check_temperature_loss(lambda lg, y, t: typed.get(t, 1.0))
    rejected_as(feedback, "not-measured")  # 1.0 for the (700, 31) logits at 0.8, and 1.0 again for others
    assert "at temperature 0.8" in feedback


@pytest.mark.parametrize(
    "right",
    [
        lambda lg, y, t: -(lg / t).log_softmax(-1).gather(1, y[:, None]).mean().item() * math.log2(math.e),
        lambda lg, y, t: torch.tensor(-(lg.double() / t).softmax(-1)[torch.arange(len(y)), y].log2().mean().item()),
        lambda lg, y, t: _bits_by_exp(lg, y, t, stable=True),
    ],
)
def test_temperature_loss_other_routes_pass(right):
    assert ex.check_temperature_loss(right) == ex.CORRECT
