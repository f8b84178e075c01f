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


def _measured(what: str, *results) -> list[float] | str:
    """An experiment's results as floats, or the feedback to give instead of checking them.

    A result that is None means the exercise is not answered yet; one that is not a number (a
    tensor of one element counts) gets a hint that names `what` should have been returned.
    """
    if any(r is None for r in results):
        return _TODO
    try:
        return [float(r) for r in results]
    except (TypeError, ValueError, RuntimeError):
        got = " and ".join(type(r).__name__ for r in results)
        return f"Return {what} as a number, got {got}."
