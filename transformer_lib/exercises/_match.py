"""The one comparison module of the checkers: compare an answer with the right one and with known mistakes.

`_close` (float32) and `same` (float64, NaN equal to NaN) differ only in precision; `expect_tensor`
raises the verdict for a wrong type, shape or dtype, `spot` the first known mistake an answer
equals, and `number` reads a scalar answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ._common import Wrong


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _close(a, b, atol=1e-5) -> bool:
    """a is a tensor of b's shape whose values match b's in float32 (allclose's rtol, this atol)."""
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol)


def same(got, want: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
    """got is a tensor of want's shape whose values match want's (in float64; NaN matches NaN)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    if got.is_complex() or want.is_complex():
        return False
    return bool(torch.allclose(got.double().cpu(), want.double().cpu(), atol=atol, rtol=rtol, equal_nan=True))


def near(a: float, b: float, rel: float = 1e-6) -> bool:
    """Two numbers equal to a relative tolerance (a must be finite)."""
    return math.isfinite(a) and math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def number(got) -> float | None:
    """got as a float (a Python number or a one-element tensor), else None."""
    if isinstance(got, bool):
        return None
    if isinstance(got, (int, float)):
        return float(got)
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        return float(got.item())
    return None


def expect_tensor(got, want: torch.Tensor, case: str, kind: str = "") -> None:
    """Raise the verdict for got's type, shape or dtype ("not-a-tensor", "shape", "dtype"); nothing if it has
    want's shape (kind "bool": a bool tensor; "float": a floating one)."""
    if not isinstance(got, torch.Tensor):
        raise Wrong("not-a-tensor", f"Return a tensor; on {case} your answer returned a {type(got).__name__}.")
    if got.shape != want.shape:
        raise Wrong("shape", f"On {case} expected shape {tuple(want.shape)}, got {_shape(got)}.")
    if kind == "bool" and got.dtype != torch.bool:
        hint = "return a bool tensor (True where the loss counts)"
        raise Wrong("dtype", f"The shape is right but the dtype is {got.dtype}: {hint}.")
    if kind == "float" and not got.is_floating_point():
        raise Wrong("dtype", f"The shape is right but the dtype is {got.dtype}: return fractions as a float tensor.")


def spot(got, want, mistakes: Iterable[tuple[object, str, str]], atol: float = 1e-4) -> None:
    """Raise the verdict of the first known mistake, (its result, id, hint), whose result got equals and the
    right answer does not; nothing when got equals none of them."""
    for wrong, mistake, hint in mistakes:
        if isinstance(wrong, torch.Tensor):
            if not same(wrong, want, atol=atol) and same(got, wrong, atol=atol):
                raise Wrong(mistake, hint)
        elif isinstance(wrong, (int, float)) and isinstance(got, (int, float)):
            if not math.isclose(wrong, want, rel_tol=1e-6, abs_tol=1e-12) and math.isclose(
                got, wrong, rel_tol=1e-6, abs_tol=1e-12
            ):
                raise Wrong(mistake, hint)
