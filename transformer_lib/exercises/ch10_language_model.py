"""Checkers for the exercises of the language-model chapter (Shakespeare)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ._common import _TODO, CORRECT, _measured, _shape

__all__ = ["check_bits_per_char", "check_nucleus_set", "check_temperature_loss"]


def check_bits_per_char(fn: Callable[[float, int, int], float]) -> str:
    """fn(nats_per_token, num_tokens, num_chars) -> bits per character of the whole text."""
    if fn(1.0, 10, 10) is None:
        return _TODO
    for nats, tokens, chars in ((1.0, 10, 10), (2.2, 400, 1000), (0.7, 50, 120)):
        got, want = fn(nats, tokens, chars), nats * tokens / chars / math.log(2)
        if not isinstance(got, (int, float)):
            return f"Return a number, got {type(got).__name__}."
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        if math.isclose(got, nats * tokens / chars, rel_tol=1e-6):
            return "That is nats per character. Divide by log(2) to get bits."
        if math.isclose(got, nats / math.log(2), rel_tol=1e-6):
            return "That is bits per token. Spread the token's bits over its characters: times tokens / chars."
        if math.isclose(got, nats * chars / tokens / math.log(2), rel_tol=1e-6):
            return "Upside down: total bits are nats_per_token * num_tokens / log(2); divide them by num_chars."
        return f"For {nats} nats per token, {tokens} tokens and {chars} characters expected {want:.4f}, got {got}."
    return CORRECT


def _kept(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus rule on probabilities: likeliest first, keep a token while the mass before it is short of top_p."""
    sorted_probs, order = probs.sort(descending=True)  # (V,) each
    keep = (sorted_probs.cumsum(0) - sorted_probs) < top_p  # (V,) in sorted order
    return torch.zeros_like(keep).scatter(0, order, keep)


def check_nucleus_set(fn: Callable[[torch.Tensor, float], torch.Tensor]) -> str:
    """fn(probs (V,), top_p) -> (V,) bool: the smallest set of likeliest tokens whose mass reaches top_p."""
    probs = torch.tensor([0.125, 0.5, 0.03125, 0.25, 0.09375])  # exact in binary, so sums are exact too
    got = fn(probs, 0.6)
    if got is None:
        return _TODO
    if not isinstance(got, torch.Tensor) or got.dtype != torch.bool or got.shape != probs.shape:
        return f"Return a bool tensor of shape (5,), got {_shape(got)} {getattr(got, 'dtype', '')}."
    for p in (0.6, 0.8, 0.01, 1.0):
        got, want = fn(probs, p), _kept(probs, p)
        if torch.equal(got, want):
            continue
        if not got.any():
            return "The likeliest token is always kept, however small top_p is."
        if not got.all() and probs[got].min() < probs[~got].max():
            return f"For top_p={p} you kept a token less likely than one you dropped: sort by probability first."
        if got.sum() < want.sum():
            return (
                f"Too few tokens for top_p={p}: the token whose probability carries the mass past top_p "
                "belongs to the set too."
            )
        return f"Too many tokens for top_p={p}: expected {want.tolist()}, got {got.tolist()}."
    return CORRECT


def check_temperature_loss(fn: Callable[[torch.Tensor, torch.Tensor, float], float]) -> str:
    """Experiment: fn(logits (N, V), targets (N,), temperature) -> mean cross-entropy in bits of softmax(logits / T)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2000, 12, generator=g) * 2.0  # (N, V)
    targets = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]  # (N,): drawn from the model itself
    temperatures = (0.5, 1.0, 2.0)
    results = _measured("the loss in bits", *(fn(logits, targets, t) for t in temperatures))
    if isinstance(results, str):
        return results
    want = [F.cross_entropy(logits / t, targets).item() / math.log(2) for t in temperatures]
    for got, w, t in zip(results, want, temperatures):
        if math.isclose(got, w, rel_tol=1e-4):
            continue
        if math.isclose(got, w * math.log(2), rel_tol=1e-4):
            return "That is the loss in nats; divide by log(2) for bits."
        if t != 1.0 and math.isclose(got, F.cross_entropy(logits * t, targets).item() / math.log(2), rel_tol=1e-4):
            return "Divide the logits by the temperature; you multiplied them."
        return f"At temperature {t} expected {w:.4f} bits, got {got:.4f}."
    if not results[1] < min(results[0], results[2]):
        return "On text drawn from the model itself, temperature 1 should give the lowest loss."
    return CORRECT
