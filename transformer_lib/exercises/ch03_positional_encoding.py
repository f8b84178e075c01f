"""Checkers for the exercises of the positional-encoding chapter."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..positional import sinusoidal_encoding
from ._common import _TODO, CORRECT, _close, _measured, _shape

__all__ = ["check_encoding", "check_self_similarity", "check_wavelength", "check_permutation_gap"]


def _doubled_exponent(max_len: int, d: int) -> torch.Tensor:
    """A loop over dimension indices that uses 2*i/d again: every exponent doubled (a known bug)."""
    out = torch.zeros(max_len, d, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(0, d, 2):
            out[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d)))
            out[pos, i + 1] = math.cos(pos / (10000 ** ((2 * i) / d)))
    return out.float()


def check_encoding(fn: Callable[[int, int], torch.Tensor]) -> str:
    """fn(max_len, d_model) must return the sinusoidal encoding (max_len, d_model)."""
    for max_len, d in ((5, 4), (30, 10), (12, 64)):
        result = fn(max_len, d)
        if result is None:
            return _TODO
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != (max_len, d):
            return f"Expected shape ({max_len}, {d}), got {_shape(result)}."
        want = sinusoidal_encoding(max_len, d)
        if _close(result, want):
            continue
        swapped = torch.stack([want[:, 1::2], want[:, 0::2]], dim=-1).reshape(max_len, d)
        if _close(result, swapped):
            return "Sines and cosines are swapped: even dimensions take the sine."
        if _close(result, _doubled_exponent(max_len, d)):
            return "The exponent is doubled: use the pair index i in 2i/d, not the dimension index."
        return f"Wrong values for max_len={max_len}, d_model={d}; compare PE[1] with sin(1), cos(1), ..."
    return CORRECT


def check_self_similarity(fn: Callable[[int], float]) -> str:
    """fn(d_model) must return PE_p . PE_p, the dot product of a position's encoding with itself."""
    if fn(8) is None:
        return _TODO
    for d in (8, 64, 512):
        got = fn(d)
        if abs(got - d) < 1e-6:
            return "Each sin^2 + cos^2 pair sums to 1, so count pairs, not dimensions."
        if abs(got - 1) < 1e-6:
            return "That is one pair. Add up all d_model / 2 pairs."
        if abs(got - d / 2) > 1e-6:
            return f"For d_model={d} expected {d / 2}, got {got}."
    return CORRECT


def check_wavelength(fn: Callable[[int, int], float]) -> str:
    """fn(d_model, i) must return the wavelength, in positions, of dimension pair i."""
    if fn(64, 0) is None:
        return _TODO
    for d, i in ((64, 0), (64, 31), (512, 255), (16, 3)):
        got, want = fn(d, i), 2 * math.pi * 10000 ** (2 * i / d)
        if abs(got - want) <= 1e-6 * want:
            continue
        if abs(got - 10000 ** (2 * i / d)) < 1e-6 * want:
            return "That is 1 / frequency in radians. A full cycle is 2 pi radians: multiply by 2 pi."
        if abs(got - 2 * math.pi * 10000 ** (4 * i / d)) < 1e-6 * max(want, 1):
            return "The exponent is doubled: i is already the pair index, so use 2i/d."
        return f"For d_model={d}, pair {i}: expected {want:.4g} positions, got {got:.4g}."
    return CORRECT


def check_permutation_gap(fn) -> str:
    """Experiment: fn(use_pe) measures how far an encoder layer is from permutation-equivariant.

    The gap is the largest difference between layer(permuted x) and the permuted layer(x).

    Without a positional encoding self-attention cannot see order, so the gap is rounding noise;
    with one added to x before the layer, permuting the tokens changes what each one computes.
    """
    measured = _measured("the largest difference", fn(False), fn(True))
    if isinstance(measured, str):
        return measured
    a, b = measured
    if a > 1e-4:
        return (
            f"Without positions the gap should be rounding noise, got {a:.2e}. Compare layer(x[:, perm]) "
            "with layer(x)[:, perm], with the layer in eval mode (dropout off) and no mask."
        )
    if b < 1e-2:
        return (
            f"With positions the gap should be large, got {b:.2e}. Permute the tokens first, then add the "
            "encoding: the positions stay where they are while the tokens move."
        )
    return CORRECT
