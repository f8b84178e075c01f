"""What every checker shares: the verdicts, the student edition's friendly error, tensor comparisons."""

from __future__ import annotations

import torch

CORRECT = "Correct!"
_TODO = "Not answered yet: write your answer in the exercise cell, run it, then run this cell again."


class NotYetDone(NotImplementedError):
    """Raised by an exercise stub in the student edition: the exercise is still to be done."""

    def __init__(self, exercise: str = "this exercise"):
        super().__init__(f"{exercise} is not done yet. Write your answer in its cell, run it, then run the checker.")


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _close(a, b, atol=1e-5) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=atol)


def _number(x) -> float | None:
    """x as a float, or None when it is not a number (a tensor of one element counts)."""
    try:
        return float(x)
    except (TypeError, ValueError, RuntimeError):
        return None
