"""Checkers for the exercises of the training chapter: schedules and label smoothing."""

from __future__ import annotations

import math

from ..training import noam_rate, smoothing_floor
from ._common import CORRECT, _measured

__all__ = ["check_noam", "check_smoothing_floor", "check_floor_experiment"]


def check_noam(fn) -> str:
    """fn(step_num, d_model, warmup) must equal the paper's d_model^-0.5 * min(n^-0.5, n * warmup^-1.5)."""
    cases = [(1, 512, 4000), (100, 512, 4000), (4000, 512, 4000), (20000, 512, 4000), (50, 64, 10), (3, 128, 7)]
    for n, d, w in cases:
        measured = _measured("the learning rate", fn(n, d, w))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = noam_rate(n, d, w)
        if math.isclose(value, want, rel_tol=1e-6):
            continue
        if math.isclose(value, want * d**0.5, rel_tol=1e-6):
            return "Almost: multiply by d_model ** -0.5, so that wider models take smaller steps."
        if math.isclose(value, d**-0.5 * max(n**-0.5, n * w**-1.5), rel_tol=1e-6):
            return "Use min, not max: the rate follows the smaller of the rising and the falling branch."
        return f"Not quite: at step {n} with d_model={d}, warmup={w} expected {want:.4g}, got {value:.4g}."
    return CORRECT


def check_smoothing_floor(fn) -> str:
    """fn(vocab_size, smoothing) must equal the entropy of the smoothed target (nats)."""
    for V, eps in [(10, 0.1), (42, 0.1), (1000, 0.2), (5, 0.5)]:
        measured = _measured("the floor", fn(V, eps))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = smoothing_floor(V, eps)
        if math.isclose(value, want, rel_tol=1e-6):
            continue
        other = eps / (V - 1)  # the other convention: smoothing spread over the wrong classes only
        if math.isclose(value, -(1 - eps) * math.log(1 - eps) - (V - 1) * other * math.log(other), rel_tol=1e-6):
            return (
                "That spreads smoothing over the V - 1 wrong classes. PyTorch (and tl) spread it over all V "
                "classes, the target included: the target gets 1 - smoothing + smoothing / V."
            )
        if math.isclose(value, math.log(V), rel_tol=1e-6) or value == 0:
            return "Not the floor: it is the entropy of the smoothed target distribution, -sum q log q."
        return f"Not quite: for V={V}, smoothing={eps} expected {want:.4f}, got {value:.4f}."
    return CORRECT


def check_floor_experiment(fn) -> str:
    """fn(vocab_size, smoothing) runs an optimisation and returns the lowest smoothed loss it reached.

    The outcome must sit on the floor: not below it (impossible) and not far above it (unfinished).
    """
    for V, eps in [(8, 0.2), (30, 0.1)]:
        measured = _measured("the lowest loss", fn(V, eps))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        floor = smoothing_floor(V, eps)
        if value < floor - 1e-3:
            return (
                f"For V={V}, smoothing={eps} you report {value:.4f}, below the floor {floor:.4f}, which no "
                "prediction can reach. Is the loss label-smoothed (smoothing=...)?"
            )
        if value > floor + 0.01:
            return (
                f"For V={V}, smoothing={eps} the lowest loss was {value:.4f}, still above the floor "
                f"{floor:.4f}: run more steps or raise the learning rate, and return the minimum."
            )
    return CORRECT
