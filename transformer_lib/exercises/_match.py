"""Comparing an answer with the right one and with known mistakes: `_close` (float32) and `same` (float64, NaN
equal to NaN) differ only in precision; `expect_tensor` checks type, shape and dtype, `spot` names a mistake."""

from __future__ import annotations

import functools
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
    """got is a real tensor of want's shape whose values match want's (in float64; NaN matches NaN)."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.is_complex() or want.is_complex():
        return False
    return bool(torch.allclose(got.double().cpu(), want.double().cpu(), atol=atol, rtol=rtol, equal_nan=True))


def near(a: float, b: float, rel: float = 1e-6) -> bool:
    """Two numbers equal to a relative tolerance (a must be finite)."""
    return math.isfinite(a) and math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def number(got) -> float | None:
    """got as a float (a Python number or a one-element tensor; not a bool), else None."""
    if isinstance(got, (int, float)) and not isinstance(got, bool):
        return float(got)
    if isinstance(got, torch.Tensor) and got.numel() == 1:
        return float(got.item())
    return None


def expect_tensor(got, want: torch.Tensor, case: str, kind: str = "") -> None:
    """Raise the verdict for got's type, shape or dtype (kind "bool" or "float") unless it is a tensor like want."""
    if not isinstance(got, torch.Tensor):
        raise Wrong("not-a-tensor", f"Return a tensor; on {case} your answer returned a {type(got).__name__}.")
    if got.shape != want.shape:
        raise Wrong("shape", f"On {case} expected shape {tuple(want.shape)}, got {_shape(got)}.")
    wanted = {"bool": "a bool tensor (True where the loss counts)", "float": "fractions as a float tensor"}
    if (kind == "bool" and got.dtype != torch.bool) or (kind == "float" and not got.is_floating_point()):
        raise Wrong("dtype", f"The shape is right but the dtype is {got.dtype}: return {wanted[kind]}.")


def spot(got, want, mistakes: Iterable[tuple[object, str, str]], atol: float = 1e-4) -> None:
    """Raise the verdict of the first known mistake, (its result, id, hint), that got equals and want does not."""
    close = functools.partial(math.isclose, rel_tol=1e-6, abs_tol=1e-12)
    for wrong, mistake, hint in mistakes:
        if isinstance(wrong, torch.Tensor):
            if not same(wrong, want, atol=atol) and same(got, wrong, atol=atol):
                raise Wrong(mistake, hint)
        elif isinstance(wrong, (int, float)) and isinstance(got, (int, float)):
            if not close(wrong, want) and close(got, wrong):
                raise Wrong(mistake, hint)
