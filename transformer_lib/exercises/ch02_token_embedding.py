"""Checkers for the exercises of the token-embedding chapter."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._common import _TODO, CORRECT, _close, _measured, _shape

__all__ = ["check_embed", "check_embedding_parameters", "check_pad", "check_scale_ratio"]


def check_embed(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(ids (B, S), table (V, d)) must return table rows (B, S, d) via a one-hot product."""
    g = torch.Generator().manual_seed(123)
    table, ids = torch.randn(11, 5, generator=g), torch.randint(0, 11, (3, 4), generator=g)
    result = fn(ids, table)
    if result is None:
        return _TODO
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != (3, 4, 5):
        return f"Expected shape (B, S, d) = (3, 4, 5), got {_shape(result)}. Multiply (B, S, V) by (V, d)."
    if _close(result, table[ids]):
        return CORRECT
    return "Right shape, wrong values: row t of the table should come back for id t."


def check_embedding_parameters(fn: Callable[[int, int], int]) -> str:
    """fn(vocab_size, d_model) must return the number of parameters of an embedding table."""
    if fn(10, 4) is None:
        return _TODO
    for v, d in ((10, 4), (32_000, 512), (7, 3)):
        got = fn(v, d)
        if got == v * d + d:
            return "An embedding table has no bias: it is only the V x d matrix."
        if got == v + d:
            return "Add those numbers up per entry: one number per token per dimension."
        if got != v * d:
            return f"For vocab_size={v}, d_model={d} expected {v * d}, got {got}."
    return CORRECT


def check_pad(fn: Callable[[list, int], torch.Tensor]) -> str:
    """fn(seqs, pad_id) must right-pad id lists into a (B, S_max) long tensor."""
    from ..tasks import pad_sequences

    for seqs, pad in (([[5, 6, 7], [8]], 0), ([[1], [2, 3], []], 9), ([[4, 4]], 0)):
        result = fn(seqs, pad)
        if result is None:
            return _TODO
        want = pad_sequences(seqs, pad)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.long:
            return f"Expected a torch.long tensor, got {type(result).__name__} {getattr(result, 'dtype', '')}."
        if tuple(result.shape) != tuple(want.shape):
            return f"For {seqs}: expected shape {tuple(want.shape)}, got {_shape(result)}."
        if torch.equal(result, want):
            continue
        longest = want.shape[1]
        left = torch.tensor([[pad] * (longest - len(q)) + list(q) for q in seqs], dtype=torch.long)
        if torch.equal(result, left):
            return "The padding is on the left. Put it on the right, after the real tokens."
        return f"For {seqs} with pad_id={pad}: expected {want.tolist()}, got {result.tolist()}. Use pad_id, not 0."
    return CORRECT


def check_scale_ratio(fn) -> str:
    """Experiment: fn(d_model) measures the token-to-position norm ratio for nn.Embedding's N(0, 1) start.

    The ratio is the mean norm of sqrt(d) * embedding over the mean norm of the positional encoding.

    A row of N(0, 1) entries has norm about sqrt(d); times sqrt(d) that is d. Every sinusoidal row
    has norm sqrt(d / 2). So the measured ratio must come out near sqrt(2 d).
    """
    for d in (64, 512):
        measured = _measured("the ratio", fn(d))
        if isinstance(measured, str):
            return measured
        value = measured[0]
        want = (2 * d) ** 0.5
        if abs(value - want) < 0.1 * want:
            continue
        if abs(value - 2**0.5) < 0.2:
            return f"For d_model={d} you get about sqrt(2): multiply the embeddings by sqrt(d_model) first."
        if abs(value - 1 / want) < 0.1 / want:
            return "The ratio is upside down: embedding norm divided by positional-encoding norm."
        return f"For d_model={d} expected a ratio near {want:.1f} (sqrt(2 d)), measured {value:.2f}."
    return CORRECT
