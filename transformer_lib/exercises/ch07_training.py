"""Checkers for the exercises of the training chapter: schedules and label smoothing."""

from __future__ import annotations

import contextlib
import math

import torch

from ..training import noam_rate, smoothing_floor
from ._common import CORRECT, aten_ops, checker, counting_ops, measure, no, run
from ._match import near, number, spot

__all__ = ["check_noam", "check_smoothing_floor", "check_floor_experiment"]


# the rate each classic mistake computes for step n, d_model d and warmup w, by id
_NOAM_MISTAKES = {
    "no-d_model": lambda n, d, w: min(n**-0.5, n * w**-1.5),
    "d_model-power": lambda n, d, w: d**0.5 * min(n**-0.5, n * w**-1.5),
    "max": lambda n, d, w: d**-0.5 * max(n**-0.5, n * w**-1.5),
    "warmup-power": lambda n, d, w: d**-0.5 * min(n**-0.5, n * w**-0.5),
    "step-over-warmup": lambda n, d, w: d**-0.5 * min(n**-0.5, n / w),
    "warmup-only": lambda n, d, w: d**-0.5 * n * w**-1.5,
    "decay-only": lambda n, d, w: d**-0.5 * n**-0.5,
    "fixed-d_model": lambda n, d, w: noam_rate(n, 512, w),
    "fixed-warmup": lambda n, d, w: noam_rate(n, d, 4000),
    "step-plus-one": lambda n, d, w: noam_rate(n + 1, d, w),
    "step-minus-one": lambda n, d, w: noam_rate(max(n - 1, 1), d, w),
    "base-rate": lambda n, d, w: noam_rate(n, d, w) * 1e-3,
}
_NOAM_HINTS = {
    "no-d_model": "Almost: multiply by d_model ** -0.5, so that wider models take smaller steps.",
    "d_model-power": "The factor is d_model ** -0.5 (one over its root), not d_model ** 0.5.",
    "max": "Use min, not max: the rate follows the smaller of the rising and the falling branch.",
    "warmup-power": "The warm-up branch is step * warmup ** -1.5, not warmup ** -0.5.",
    "step-over-warmup": "The warm-up branch is step * warmup ** -1.5, not step / warmup.",
    "warmup-only": "Only the warm-up branch: take the min with step ** -0.5, which decays after warm-up.",
    "decay-only": "Only the decay branch: take the min with step * warmup ** -1.5, the linear warm-up.",
    "fixed-d_model": "Your answer uses d_model=512 whatever d_model it is given.",
    "fixed-warmup": "Your answer uses warmup=4000 whatever warmup it is given.",
    "step-plus-one": "Off by one: step_num already counts from 1, as in the paper; do not add 1.",
    "step-minus-one": "Off by one: step_num counts from 1, as in the paper; do not subtract 1.",
    "base-rate": "Do not multiply by a base learning rate: the formula is the rate.",
}


@checker
def check_noam(fn) -> str:
    """fn(step_num, d_model, warmup) must equal d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), steps from 1."""
    # steps before, at and after the warm-up; a mistake is named only when the answer follows it on every input
    cases = [(1, 512, 4000), (100, 512, 4000), (4000, 512, 4000), (20000, 512, 4000), (50, 64, 10), (3, 128, 7)]
    cases += [(7, 96, 7), (250, 24, 1000), (1500, 1024, 300), (2, 40, 2)]
    values = [
        measure("the learning rate", run(fn, n, d, w, case=f"step {n} with d_model={d}, warmup={w}"))[0]
        for n, d, w in cases
    ]
    wrong = [(c, v) for c, v in zip(cases, values) if not near(v, noam_rate(*c))]
    if not wrong:
        return CORRECT
    (n, d, w), value = wrong[0]
    detail = f"At step {n} with d_model={d}, warmup={w} expected {noam_rate(n, d, w):.6g}, got {value:.6g}."
    for mistake, rate in _NOAM_MISTAKES.items():
        if all(near(v, rate(*c)) for c, v in zip(cases, values)):
            return no(mistake, f"{_NOAM_HINTS[mistake]} ({detail})")
    return no("other", f"Not quite: {detail}")


_h = lambda p, count=1: -count * p * math.log(p)  # the entropy (nats) of `count` classes of probability p each
# the number each classic mistake computes for V classes and smoothing e, by id
_FLOOR_MISTAKES = {
    "all-but-target": lambda V, e: _h(1 - e) + _h(e / (V - 1), V - 1),
    "bits": lambda V, e: smoothing_floor(V, e) / math.log(2),
    "base-10": lambda V, e: smoothing_floor(V, e) / math.log(10),
    "sign": lambda V, e: -smoothing_floor(V, e),
    "log-v": lambda V, e: math.log(V),
    "no-target-term": lambda V, e: _h(e / V, V - 1),
    "one-other-class": lambda V, e: _h(1 - e + e / V) + _h(e / V),
    "target-share": lambda V, e: _h(1 - e) + _h(e / V, V - 1),
    "fixed-smoothing": lambda V, e: smoothing_floor(V, 0.1),
    "zero": lambda V, e: 0.0,
}
_FLOOR_HINTS = {
    "all-but-target": "That spreads smoothing over V - 1 classes, not V: the target gets 1 - smoothing + smoothing/V.",
    "bits": "That is in bits (log base 2): the loss is in nats, use the natural log.",
    "base-10": "That uses log base 10: the loss is in nats, use the natural log.",
    "sign": "The sign is flipped: the entropy is -sum q log q, a positive number.",
    "log-v": "log V is the loss of a uniform prediction, not the floor: it is the entropy of the smoothed target.",
    "no-target-term": "The target's own term is missing: add -p log p with p = 1 - smoothing + smoothing / V.",
    "one-other-class": "There are V - 1 other classes, each with smoothing / V: multiply their term by V - 1.",
    "target-share": "The target gets 1 - smoothing + smoothing / V (its share of the uniform part), not 1 - smoothing.",
    "fixed-smoothing": "Your answer uses smoothing=0.1 whatever smoothing it is given.",
    "zero": "The floor is not 0 with label smoothing: it is the entropy of the smoothed target, -sum q log q.",
}


@checker
def check_smoothing_floor(fn) -> str:
    """fn(vocab_size, smoothing) must equal the entropy (nats) of the target smoothed over all V classes."""
    for V, eps in [(10, 0.1), (42, 0.1), (1000, 0.2), (5, 0.5), (3, 0.9), (77, 0.35)]:
        case = f"V={V}, smoothing={eps}"
        value = measure("the floor", run(fn, V, eps, case=case))[0]
        want = smoothing_floor(V, eps)
        if not near(value, want):
            spot(value, want, [(floor(V, eps), m, _FLOOR_HINTS[m]) for m, floor in _FLOOR_MISTAKES.items()])
            return no("other", f"Not quite: for {case} expected {want:.4f}, got {value:.4f}.")
    return CORRECT


# a prediction of the logits, under every spelling of the loss (F.cross_entropy, log_softmax, softmax, logsumexp)
_PREDICTIONS = aten_ops("_log_softmax", "_softmax", "_safe_softmax", "logsumexp")


@checker
def check_floor_experiment(fn) -> str:
    """Experiment: fn(vocab_size, smoothing, steps) optimises free logits and returns the loss at every step."""
    # unseen settings; the short run must stay above the floor and compute a softmax per step, so no formula passes
    for V, eps, steps in [(8, 0.2, 300), (30, 0.1, 400), (13, 0.45, 300), (50, 0.3, 4)]:
        case = f"vocab_size={V}, smoothing={eps}, steps={steps}"
        # counted on the short run only: a dispatch mode costs time per operation, and a formula computes none
        predictions = counting_ops(_PREDICTIONS) if steps < 10 else contextlib.nullcontext()
        with torch.random.fork_rng(), predictions:
            torch.manual_seed(V)
            got = run(fn, V, eps, steps, case=case)
        floor, curve = smoothing_floor(V, eps), None
        if isinstance(got, torch.Tensor) and got.ndim:
            got = got.detach().flatten().tolist()
        if isinstance(got, (list, tuple)):
            with contextlib.suppress(TypeError, ValueError, RuntimeError):  # a list of what is not a number
                curve = [float(v) for v in got]
        if curve is None and number(got) is not None and near(number(got), floor):
            return no("closed-form", "That is the closed form, not a measurement: return the loss at every step.")
        if curve is None:
            return no("not-a-list", "Return the list of losses, one per step, not a single number.")
        if len(curve) != steps:
            return no("length", f"For {case} expected {steps} losses, one per step, got {len(curve)}: use steps.")
        if not all(math.isfinite(v) for v in curve):
            return no("not-finite", f"For {case} the losses are not all finite: check the learning rate.")
        if abs(curve[0] - math.log(V)) > 1e-3 and all(abs(v - floor) < 1e-6 for v in curve):
            return no("floor-repeated", "That is the floor repeated: record the loss the optimiser reaches each step.")
        if abs(curve[0] - math.log(V)) > 1e-3:
            return no(
                "first-loss",
                f"For {case} the first loss is {curve[0]:.4f}, but zero logits give log(V) = {math.log(V):.4f}: start "
                "from torch.zeros(vocab_size) and record the loss before each step.",
            )
        lowest = min(curve)
        if lowest < floor - 1e-3:
            return no(
                "below-floor",
                f"For {case} you report {lowest:.4f}, below the floor {floor:.4f}: label-smooth the loss.",
            )
        if len(set(curve)) == 1:
            return no("flat", f"For {case} the loss never changes: take an optimiser step after each loss.")
        if steps >= 10 and lowest > floor + 0.01:
            return no(
                "above-floor",
                f"For {case} the lowest loss {lowest:.4f} stays above the floor {floor:.4f}: raise the learning rate.",
            )
        if steps < 10 and predictions.count < steps:
            return no(
                "formula",
                f"For {case} your code computed {predictions.count} softmaxes for {steps} losses: compute the loss of "
                "the current logits at every step, not a curve from a formula.",
            )
        if steps < 10 and abs(curve[-1] - floor) < 1e-6:
            return no(
                "ends-on-floor",
                f"For {case} your curve ends exactly on the floor after {steps} steps: return the losses you measured.",
            )
    return CORRECT
