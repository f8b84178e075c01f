"""What every checker shares: verdicts, running the learner's code (`run`) and reading a measurement (`measure`).

A checker, decorated with `@checker`, returns `CORRECT` or a `Verdict`: its hint, a string whose `.mistake` is the
id of the mistake (the tests assert ids). Below a checker, `raise Wrong(mistake, hint)`. Comparing is `_match`'s.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import random
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

CORRECT = "Correct!"
_TODO = "Not answered yet: write your answer in the exercise cell, run it, then run this cell again."


class Verdict(str):
    """A checker's "not yet": reads as its hint, and `.mistake` is the id of the mistake it names."""

    mistake: str

    def __new__(cls, mistake: str, hint: str) -> Verdict:
        verdict = super().__new__(cls, hint)
        verdict.mistake = mistake
        return verdict


class Wrong(Exception):
    """Raised below a checker: the checker's verdict is this one (see `checker`)."""

    def __init__(self, mistake: str, hint: str):
        super().__init__(hint)
        self.verdict = Verdict(mistake, hint)


def checker(check: Callable[..., str]) -> Callable[..., str]:
    """Decorate a checker: a `Wrong` raised while it runs becomes its verdict, and the caller's random streams
    (torch's, on the CPU and every CUDA device in use, Python's and numpy's) are as they were before the call, so
    that the next draw in the learner's notebook is the one it would have been without the check."""

    @functools.wraps(check)
    def checked(*args, **kwargs) -> str:
        saved = _random_states()
        try:
            return check(*args, **kwargs)
        except Wrong as wrong:
            return wrong.verdict
        finally:
            _restore_random_states(saved)

    return checked


def _random_states() -> tuple:
    numpy = sys.modules.get("numpy")  # only where the notebook has it loaded
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda, random.getstate(), numpy.random.get_state() if numpy else None


def _restore_random_states(saved: tuple) -> None:
    cpu, cuda, python, numpy_state = saved
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(python)
    if numpy_state is not None:
        sys.modules["numpy"].random.set_state(numpy_state)


def no(mistake: str, hint: str) -> Verdict:
    """The verdict naming `mistake` (an id; "other" for the generic last resort), with its hint."""
    return Verdict(mistake, hint)


class NotYetDone(NotImplementedError):
    """Raised by an exercise stub in the student edition: the exercise is still to be done."""

    def __init__(self, exercise: str = "this exercise"):
        super().__init__(f"{exercise} is not done yet. Write your answer in its cell, run it, then run the checker.")


def measure(what: str, *results) -> list[float]:
    """An experiment's results as floats (a one-element tensor is one), else the verdict: "todo" or "not-a-number"."""
    if any(r is None for r in results):
        raise Wrong("todo", _TODO)
    try:
        return [float(r) for r in results]
    except (TypeError, ValueError, RuntimeError):
        got = " and ".join(type(r).__name__ for r in results)
        raise Wrong("not-a-number", f"Return {what} as a number, got {got}.") from None


@contextlib.contextmanager
def counting_calls(module: nn.Module) -> Iterator[list[int]]:
    """While the block runs, count the forward passes of the module and of every module inside it (called as m(x)
    or m.forward(x)); a deep copy counts too, and computes with its own weights: yields a one-element list holding
    the count."""
    calls, modules = [0], list(module.modules())

    def counting(forward: Callable) -> Callable:
        def counted(self, *args, **kwargs):
            calls[0] += 1
            return forward(self, *args, **kwargs)

        return counted

    for m in modules:  # a bound method on the instance: nn.Module.__call__ finds it first; deepcopy rebinds it
        m.forward = types.MethodType(counting(type(m).forward), m)
    try:
        yield calls
    finally:
        for m in modules:
            del m.forward


def not_skipped(case: str | None, what: str) -> None:
    """Raise "skipped" when the learner's experiment, right in every number, never ran `what` on `case` (None: it
    ran everywhere): it returned the answer theory predicts instead of measuring it."""
    if case is not None:
        hint = f"your function never ran {what}: it returned the number theory predicts instead of measuring it"
        raise Wrong(
            "skipped", f"On {case}: {hint}. Run the experiment in every setting; the measurement tests the prediction."
        )


def reproducible(fn: Callable, first: float, again: tuple, other: tuple, *, case: str, what: str, draw: str) -> None:
    """A seeded experiment measures what its generator draws: fn(*again) (the seed that gave `first`) must give
    `first` again, and fn(*other) (another seed) another number. `draw` says what to draw with the generator."""
    repeated = run(fn, *again, case=f"{case} with the same seed again")
    same, new = measure(what, repeated, run(fn, *other, case=f"{case} with another seed"))
    how = f"{draw} with the generator you are given (torch.randn(..., generator=generator))"
    if not math.isclose(same, first, rel_tol=1e-5, abs_tol=1e-12):
        raise Wrong("seed-ignored", f"The same seed gave two different numbers: {how}.")
    if new == same:
        raise Wrong("not-measured", f"Two seeds gave exactly the same number, so nothing was measured: {how}.")


_BY_HAND = "transformer_lib.exercises: written by hand"  # the message of the error a refused call raises


def _refuse(*args, **kwargs):
    raise NotImplementedError("transformer_lib.exercises: written by hand")  # no global names: runs as others' code


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Within the block torch runs on one thread, restored after: a checker's small models run a batch in a
    fraction of the time two threads of a busy machine take."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def by_hand(*functions: Callable) -> Iterator[None]:
    """Within the block, every call of these library functions raises, however they were imported: their code
    is swapped (under decorators too). Compute the checker's own expectations before the block."""
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


def run(fn: Callable, *args, case: str, forbidden: Sequence[Callable] = (), names: str = "") -> Any:
    """The learner's fn(*args) on the input `case`, else the verdict: "raised" (naming the input), "in-place",
    "todo" (None) or "by-hand" (it called a `forbidden` library function, `names`). `NotYetDone` goes through."""
    before = _snapshot(args)
    try:
        with by_hand(*forbidden):
            result = fn(*args)
    except NotYetDone:
        raise
    except Exception as error:  # the learner's bug, reported as a hint
        if isinstance(error, NotImplementedError) and str(error) == _BY_HAND:
            hint = f"This exercise asks you to write it by hand, but your answer called {names or 'the library'}."
            raise Wrong("by-hand", hint) from None
        raise Wrong("raised", f"Your code raised {type(error).__name__} on {case}: {error}") from None
    if changed := _changed(before, args):
        raise Wrong(
            "in-place",
            f"On {case} your code changed its input in place ({changed}). A function should leave what it is given "
            "as it was: work on a copy (x.clone()) or write out-of-place operations (x = x / s, not x /= s).",
        )
    if result is None:
        raise Wrong("todo", _TODO)
    return result


def _snapshot(args: tuple) -> list[tuple[str, object, object]]:
    """(what, the live object, a copy of it) for every tensor, module, list and dict among the arguments."""
    saved = []
    for i, arg in enumerate(args):
        where = f"argument {i + 1}"
        if isinstance(arg, torch.Tensor):
            saved.append((f"{where}, a tensor", arg, arg.detach().clone()))
        elif isinstance(arg, nn.Module):
            for name, t in arg.state_dict(keep_vars=True).items():
                saved.append((f"{where}'s {name}", t, t.detach().clone()))
        elif isinstance(arg, (list, dict)):
            with contextlib.suppress(Exception):  # something that cannot be copied: not watched
                saved.append((f"{where}, a {type(arg).__name__}", arg, copy.deepcopy(arg)))
    return saved


def _changed(saved: list[tuple[str, object, object]], args: tuple) -> str | None:
    """The first watched argument that no longer equals its copy, named; None when all are as they were."""
    for what, live, kept in saved:
        if isinstance(live, torch.Tensor):
            now = live.detach()
            if now.shape != kept.shape or not torch.equal(now.cpu(), kept.cpu()) and not _both_nan(now, kept):
                return what
        else:
            with contextlib.suppress(Exception):
                if _differs(live, kept):
                    return what
    return None


def _both_nan(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.is_floating_point() and bool(torch.allclose(a.cpu(), b.cpu(), rtol=0, atol=0, equal_nan=True))


def _differs(a, b) -> bool:
    """a != b for lists and dicts that may hold tensors."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) != len(b) or any(_differs(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() != b.keys() or any(_differs(a[k], b[k]) for k in a)
    return bool(a != b)


class _RefuseTorch(torch.overrides.TorchFunctionMode):
    """While active, a call of one of these torch functions raises the by-hand error."""

    def __init__(self, functions: Sequence[Callable]):
        super().__init__()
        self.functions = functions

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.functions:
            raise NotImplementedError(_BY_HAND)
        return func(*args, **(kwargs or {}))


class counting_ops(TorchDispatchMode):
    """Within the block, count (`.count`) the calls of these ATen operator families: did the learner's code really
    compute what its numbers claim? Named in lowercase: it is used like a function, as a context manager."""

    def __init__(self, packets: Sequence):
        super().__init__()
        self.packets = {p for p in packets if p is not None}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.packets:
            self.count += 1
        return func(*args, **(kwargs or {}))


class _RefuseOps(counting_ops):
    """While active, an ATen operator of these families raises the by-hand error; with a `source`, only when it
    reads that tensor, a view of its storage (``.data``, ``.detach()``, ``.T``) or a copy of its values."""

    def __init__(self, packets: Sequence, source: torch.Tensor | None = None):
        super().__init__(packets)
        self.source = source

    def _reads_source(self, t: object) -> bool:
        if self.source is None or not isinstance(t, torch.Tensor):
            return self.source is None
        with contextlib.suppress(RuntimeError, NotImplementedError):  # a tensor without storage
            if t.untyped_storage().data_ptr() == self.source.untyped_storage().data_ptr():
                return True
        return t.shape == self.source.shape and t.dtype == self.source.dtype and bool(torch.equal(t, self.source))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.packets and args and self._reads_source(args[0]):
            raise NotImplementedError(_BY_HAND)
        return func(*args, **(kwargs or {}))


def aten_ops(*names: str) -> tuple:
    """The ATen operator families of these names that this torch has (a name it lacks is left out)."""
    return tuple(p for p in (getattr(torch.ops.aten, n, None) for n in names) if p is not None)


def refusing(
    fn: Callable, *torch_functions: Callable, ops: Sequence = (), source: torch.Tensor | None = None
) -> Callable:
    """fn, with these torch functions (e.g. F.layer_norm, however imported) and ATen operators (`aten_ops`: every
    spelling, method, view and nn module; with `source`, only reading that tensor) refused while it runs."""

    def guarded(*args):
        refuse_ops = _RefuseOps(ops, source) if ops else contextlib.nullcontext()
        with _RefuseTorch(torch_functions), refuse_ops:
            return fn(*args)

    return guarded


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
