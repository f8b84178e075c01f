"""What every checker shares: the verdicts, the student edition's friendly error, tensor comparisons."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

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


_BY_HAND = "transformer_lib.exercises: written by hand"  # the message of the error a refused call raises


def _refuse(*args, **kwargs):
    raise NotImplementedError("transformer_lib.exercises: written by hand")  # no global names: runs as others' code


@contextlib.contextmanager
def by_hand(*functions: Callable) -> Iterator[None]:
    """Within the block, every call of one of these library functions raises, however it was imported.

    The function objects themselves are changed (their code is swapped, under decorators too), so
    `tl.f`, `from ... import f` and a name bound before the check all refuse. Compute the checker's
    own expectations before the block.
    """
    saved = []
    try:
        for function in functions:
            target = getattr(function, "__func__", function)  # a bound method: its function
            while hasattr(target, "__wrapped__"):  # e.g. under @torch.no_grad(): the function it wraps
                target = target.__wrapped__
            if target.__closure__:
                raise TypeError(f"by_hand cannot guard {target.__qualname__}: it has a closure")
            saved.append((target, target.__code__))
            target.__code__ = _refuse.__code__
        yield
    finally:
        for target, code in saved:
            target.__code__ = code


def attempt(
    fn: Callable, *args, case: str, forbidden: Sequence[Callable] = (), names: str = ""
) -> tuple[Any, str | None]:
    """Run the learner's fn(*args); return (result, None), or (None, the hint to give instead).

    Never raises on a wrong answer: an exception in the learner's code becomes a hint that names the
    input (`case`) it failed on. `NotYetDone` (the student edition's stub) is let through, so the
    notebook says which exercise is still to do. With `forbidden`, those library functions refuse
    to run (see `by_hand`); `names` says in the hint which ones they are.
    """
    try:
        with by_hand(*forbidden):
            result = fn(*args)
    except NotYetDone:
        raise
    except Exception as error:  # the learner's bug, reported as a hint
        if isinstance(error, NotImplementedError) and str(error) == _BY_HAND:
            return None, f"This exercise asks you to write it by hand, but your answer called {names or 'the library'}."
        return None, f"Your code raised {type(error).__name__} on {case}: {error}"
    if result is None:
        return None, _TODO
    return result, None


class _RefuseTorch(torch.overrides.TorchFunctionMode):
    """While active, a call of one of these torch functions raises the by-hand error."""

    def __init__(self, functions: Sequence[Callable]):
        super().__init__()
        self.functions = functions

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.functions:
            raise NotImplementedError(_BY_HAND)
        return func(*args, **(kwargs or {}))


def refusing(fn: Callable, *torch_functions: Callable) -> Callable:
    """fn, wrapped so that these torch functions (e.g. F.layer_norm) refuse while it runs.

    For torch's own functions, whose code `by_hand` cannot swap: a torch function mode sees every
    call, however the function was imported. Pass the result to `attempt`, which turns the refusal
    into the by-hand hint.
    """

    def guarded(*args):
        with _RefuseTorch(torch_functions):
            return fn(*args)

    return guarded


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
