"""Helpers of the checkers of chapters 07-12: compare an answer with the right one and with known mistakes."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ._common import _shape


def same(got, want: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
    """got is a tensor of want's shape whose values match want's (in float64; NaN matches NaN)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    if got.is_complex() or want.is_complex():
        return False
    return bool(torch.allclose(got.double().cpu(), want.double().cpu(), atol=atol, rtol=rtol, equal_nan=True))


def tensor_problem(got, want: torch.Tensor, case: str, kind: str = "") -> str | None:
    """What is wrong with got's type or shape, in words (None when it is a tensor of want's shape).

    kind "bool": got must be a bool tensor; "float": a floating tensor.
    """
    if not isinstance(got, torch.Tensor):
        return f"Return a tensor; on {case} your answer returned a {type(got).__name__}."
    if got.shape != want.shape:
        return f"On {case} expected shape {tuple(want.shape)}, got {_shape(got)}."
    if kind == "bool" and got.dtype != torch.bool:
        return f"The shape is right but the dtype is {got.dtype}: return a bool tensor (True where the loss counts)."
    if kind == "float" and not got.is_floating_point():
        return f"The shape is right but the dtype is {got.dtype}: return fractions as a float tensor."
    return None


def first_mistake(got, want, mistakes: Iterable[tuple[object, str]], atol: float = 1e-4) -> str | None:
    """The hint of the first known mistake whose result got equals (and the right answer does not)."""
    for wrong, hint in mistakes:
        if isinstance(wrong, torch.Tensor):
            if same(wrong, want, atol=atol):
                continue  # on this input the mistake cannot be told from the right answer
            if same(got, wrong, atol=atol):
                return hint
        elif isinstance(wrong, (int, float)) and isinstance(got, (int, float)):
            if math.isclose(wrong, want, rel_tol=1e-6, abs_tol=1e-12):
                continue
            if math.isclose(got, wrong, rel_tol=1e-6, abs_tol=1e-12):
                return hint
    return None


def number(got) -> float | None:
    """got as a float (a Python number or a one-element tensor), else None."""
    if isinstance(got, bool):
        return None
    if isinstance(got, (int, float)):
        return float(got)
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        return float(got.item())
    return None
