"""Checkers for the exercises of the decoder chapter."""

from __future__ import annotations

import math

import torch

from ._common import _TODO, CORRECT, _measured, _shape

__all__ = ["check_sample", "check_windows", "check_kv_cache_bytes", "check_future_leak"]


def check_sample(fn) -> str:
    """fn(logits (B, V), temperature, top_k, rng) must return (B, 1) ids: greedy, tempered, top-k."""
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, -2.0]]).repeat(2000, 1)
    g = torch.Generator().manual_seed(0)
    greedy = fn(logits[:50], 0.0, None, g)
    if greedy is None:
        return _TODO
    if not isinstance(greedy, torch.Tensor) or tuple(greedy.shape) != (50, 1):
        return f"Expected shape (B, 1) = (50, 1), got {_shape(greedy)}."
    if not torch.equal(greedy.flatten(), torch.ones(50, dtype=torch.long)):
        return "With temperature 0, return the argmax (token 1 here)."
    picks = fn(logits, 1.0, 2, g).flatten()
    if not set(picks.tolist()) <= {1, 3}:
        return f"top_k=2 must only ever pick tokens 1 and 3, got {sorted(set(picks.tolist()))}."
    share, want = (picks == 3).float().mean().item(), math.exp(4) / (math.exp(4) + math.exp(5))
    if abs(share - want) > 0.04:
        return f"Token 3 should be picked {want:.0%} of the time with top_k=2, got {share:.0%}."
    hot = torch.bincount(fn(logits, 100.0, None, g).flatten(), minlength=5).float() / logits.shape[0]
    if hot.min() < 0.1:  # at temperature 100 the five tokens are close to equally likely
        return "At a very high temperature every token should appear: divide the logits by the temperature."
    return CORRECT


def check_windows(fn) -> str:
    """fn(ids (N,), starts (B,), block_size) must return x, y (B, block_size) with y = x shifted by one."""
    ids, starts = torch.arange(100, 200), torch.tensor([1, 10, 90])
    result = fn(ids, starts, 8)
    if result is None:
        return _TODO
    x, y = result
    if tuple(x.shape) != (3, 8) or tuple(y.shape) != (3, 8):
        return f"Expected x and y of shape (3, 8), got {_shape(x)} and {_shape(y)}."
    if torch.equal(x, y):
        return "y must be x shifted by one: the target at each position is the next token."
    if torch.equal(y, x - 1):
        return "Shifted the wrong way: y[b, t] is the token after x[b, t]."
    ok = torch.equal(x[1], ids[10:18]) and torch.equal(x[0], ids[1:9]) and torch.equal(y, x + 1)
    return CORRECT if ok else "Not quite: x[b] = ids[starts[b] : starts[b] + block_size]."


def check_kv_cache_bytes(fn) -> str:
    """fn(num_layers, d_model, context, batch, bytes_per_value) must return the KV cache's size in bytes."""
    if fn(1, 4, 2, 1, 2) is None:
        return _TODO
    for case in ((2, 64, 128, 8, 4), (24, 1024, 2048, 1, 2), (12, 768, 1024, 2, 2)):
        got, (L, d, T, B, nbytes) = fn(*case), case
        want = 2 * L * d * T * B * nbytes
        if got == want // 2:
            return "Half of it: the cache holds keys AND values for every layer."
        if got == want // nbytes:
            return "That counts numbers, not bytes: multiply by bytes_per_value."
        if got != want:
            return f"For {case} expected {want:,} bytes, got {got:,}."
    return CORRECT


def check_future_leak(fn) -> str:
    """Experiment: fn(causal) measures how much the logits at earlier positions move when a later token changes.

    With the causal mask an earlier position cannot see the change; without it, it can, which is
    exactly the leak that would let a language model copy the next token during training.
    """
    measured = _measured("the largest change", fn(True), fn(False))
    if isinstance(measured, str):
        return measured
    a, b = measured
    if a > 1e-5:
        return (
            f"With the causal mask the earlier positions should not move, got {a:.2e}. Compare only positions "
            "before the token you change, in eval mode."
        )
    if b < 1e-3:
        return (
            f"Without the mask the earlier positions should move, got {b:.2e}. Run the decoder with "
            "tgt_mask=None in that case, and change a token after the positions you compare."
        )
    return CORRECT
