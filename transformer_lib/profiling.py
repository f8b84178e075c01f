"""What a computation costs: its wall time, the memory autograd keeps for the backward pass, and its peak memory."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator

import torch

__all__ = ["median_seconds", "saved_tensor_bytes", "peak_bytes"]


def _sync(device: torch.device | str | None) -> None:
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def median_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1, device=None) -> float:
    """Median wall time of fn() over `repeats` calls, after `warmup` untimed calls.

    On a CUDA device, pass it as `device` so that each call is waited for before the clock stops.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def saved_tensor_bytes(fn: Callable[[], object]) -> int:
    """Bytes of the tensors autograd saves for backward while fn() runs its forward pass.

    This is the activation memory that training holds between the forward and the backward pass,
    measured on any device. A storage saved by several operations is counted once; a tensor that
    needs no gradient anywhere saves nothing.
    """
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Within the block, what C++ writes to the process's stderr (file descriptor 2) goes nowhere: the profiler's
    own logger writes two lines there for every profile on some builds ("profiler_start", "profiler_stop"), which
    a notebook would show as output. Anything else written to fd 2 meanwhile is lost too (in a script, a warning
    that fn() raises); an exception still propagates."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_bytes(fn: Callable[[], object]) -> int:
    """The most CPU memory fn()'s tensors held at once, in bytes, counted from its first allocation: the peak of
    the running total of what each operation allocated and freed, as torch.profiler records it (every operation's
    own allocations, so that nested calls are counted once). Tensors that existed before fn() are not counted; the
    result fn() returns is. For CUDA, torch.cuda.max_memory_allocated measures the same on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    total = peak = 0
    for event in sorted(prof.profiler.function_events, key=lambda e: e.time_range.start):  # in the order they ran
        total += event.self_cpu_memory_usage  # bytes allocated minus bytes freed by the operation itself
        peak = max(peak, total)
    return peak
