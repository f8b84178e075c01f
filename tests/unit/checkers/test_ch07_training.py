"""Mutation suite for the checkers of chapter 07 (training): classic mistakes are named, other routes pass."""

from __future__ import annotations

import math

import pytest
import torch
from _mutation import notebook_solution, raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def _notebook_solution(name: str):
    return notebook_solution("07_training", name)


_raises = raising(ZeroDivisionError("float division by zero"))


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("solution_noam", ex.check_noam),
        ("solution_smoothing_floor", ex.check_smoothing_floor),
        ("solution_floor_experiment", ex.check_floor_experiment),
    ],
)
def test_the_notebook_solution_passes(name, check):
    assert check(_notebook_solution(name)) == ex.CORRECT


# ---- Noam ---------------------------------------------------------------------------------------


def _noam(n, d, w):
    return d**-0.5 * min(n**-0.5, n * w**-1.5)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda n, d, w: min(n**-0.5, n * w**-1.5), "no-d_model"),
        (lambda n, d, w: d**0.5 * min(n**-0.5, n * w**-1.5), "d_model-power"),
        (lambda n, d, w: d**-0.5 * max(n**-0.5, n * w**-1.5), "max"),
        (lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-0.5), "warmup-power"),
        (lambda n, d, w: d**-0.5 * min(n**-0.5, n / w), "step-over-warmup"),
        (lambda n, d, w: d**-0.5 * n * w**-1.5, "warmup-only"),
        (lambda n, d, w: d**-0.5 * n**-0.5, "decay-only"),
        (lambda n, d, w: _noam(n, 512, w), "fixed-d_model"),
        (lambda n, d, w: _noam(n, d, 4000), "fixed-warmup"),
        (lambda n, d, w: _noam(n + 1, d, w), "step-plus-one"),
        (lambda n, d, w: _noam(n - 1, d, w) if n > 1 else _noam(n, d, w), "step-minus-one"),
        (lambda n, d, w: _noam(n, d, w) * 1e-3, "base-rate"),
        (lambda n, d, w: _noam(n, d, w) * 1.01, "other"),
        (lambda n, d, w: "fast", "not-a-number"),
        (lambda n, d, w: 1 / (n - 1), "raised"),
    ],
)
def test_noam_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_noam(wrong), mistake)


@pytest.mark.parametrize(
    "right",
    [
        _noam,
        lambda n, d, w: tl.noam_rate(n, d, w),
        lambda n, d, w: (n * w**-1.5 if n < w else n**-0.5) / math.sqrt(d),
        lambda n, d, w: torch.tensor(d, dtype=torch.float64).rsqrt() * min(n**-0.5, n / w**1.5),
    ],
)
def test_noam_other_routes_pass(right):
    assert ex.check_noam(right) == ex.CORRECT


# ---- the smoothing floor ------------------------------------------------------------------------


def _floor(V, e, base=math.e):
    q, p = e / V, 1 - e + e / V
    return (-p * math.log(p) - (V - 1) * q * math.log(q)) / math.log(base)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda V, e: -(1 - e) * math.log(1 - e) - e * math.log(e / (V - 1)), "all-but-target"),
        (lambda V, e: _floor(V, e, base=2), "bits"),
        (lambda V, e: _floor(V, e, base=10), "base-10"),
        (lambda V, e: -_floor(V, e), "sign"),
        (lambda V, e: math.log(V), "log-v"),
        (lambda V, e: -(V - 1) * (e / V) * math.log(e / V), "no-target-term"),
        (lambda V, e: -(1 - e + e / V) * math.log(1 - e + e / V) - e / V * math.log(e / V), "one-other-class"),
        (lambda V, e: -(1 - e) * math.log(1 - e) - (V - 1) * e / V * math.log(e / V), "target-share"),
        (lambda V, e: _floor(V, 0.1), "fixed-smoothing"),
        (lambda V, e: 0.0, "zero"),
        (lambda V, e: _floor(V, e) + 0.01, "other"),
        (lambda V, e: math.log(e / V), "other"),
        (lambda V, e: None if V > 5 else 1.0, "todo"),
        (lambda V, e: "low", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_smoothing_floor_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_smoothing_floor(wrong), mistake)


def _floor_by_tensor(V, e):
    q = torch.full((V,), e / V, dtype=torch.float64)
    q[0] += 1 - e
    return -(q * q.log()).sum()


@pytest.mark.parametrize(
    "right",
    [
        tl.smoothing_floor,
        _floor_by_tensor,
        lambda V, e: (
            torch.distributions.Categorical(probs=tl.smoothed_targets(torch.tensor(0), V, e).double()).entropy().item()
        ),
    ],
)
def test_smoothing_floor_other_routes_pass(right):
    assert ex.check_smoothing_floor(right) == ex.CORRECT


# ---- the floor by experiment --------------------------------------------------------------------


def _experiment(V, e, steps, lr=0.1, smoothing=True, optimiser="adam", record_after=False):
    logits = torch.zeros(V, requires_grad=True)
    opt = torch.optim.Adam([logits], lr=lr) if optimiser == "adam" else torch.optim.SGD([logits], lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = tl.label_smoothed_cross_entropy(logits, torch.tensor(0), smoothing=e if smoothing else 0.0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if record_after:
            with torch.no_grad():
                loss = tl.label_smoothed_cross_entropy(logits, torch.tensor(0), smoothing=e)
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda V, e, n: tl.smoothing_floor(V, e), "closed-form"),
        (lambda V, e, n: [tl.smoothing_floor(V, e)] * n, "floor-repeated"),
        (lambda V, e, n: 0.7, "not-a-list"),
        (lambda V, e, n: [math.log(V)] * n, "flat"),
        (lambda V, e, n: torch.linspace(math.log(V), tl.smoothing_floor(V, e), n).tolist(), "formula"),
        (lambda V, e, n: _experiment(V, e, n, smoothing=False), "below-floor"),
        (lambda V, e, n: _experiment(V, e, n, lr=1e-3), "above-floor"),
        (lambda V, e, n: _experiment(V, e, 300), "length"),
        (lambda V, e, n: _experiment(V, e, n, record_after=True), "first-loss"),
        (lambda V, e, n: _experiment(V, e, n)[:-1] + [tl.smoothing_floor(V, e)], "ends-on-floor"),
        (lambda V, e, n: [float("nan")] * n, "not-finite"),
        (lambda V, e, n: "low", "not-a-list"),
        (_raises, "raised"),
    ],
)
def test_floor_experiment_mistakes_are_named(wrong, mistake):
    rejected_as(ex.check_floor_experiment(wrong), mistake)


@pytest.mark.parametrize(
    "right",
    [
        lambda V, e, n: torch.tensor(_experiment(V, e, n)),
        lambda V, e, n: _experiment(V, e, n, lr=0.5, optimiser="sgd"),
    ],
)
def test_floor_experiment_other_routes_pass(right):
    assert ex.check_floor_experiment(right) == ex.CORRECT
