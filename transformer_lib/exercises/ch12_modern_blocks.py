"""Checkers for the exercises of the chapter "From 2017 to today"."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ._common import _TODO, CORRECT, _close, _shape

__all__ = ["check_rms_norm", "check_rotary", "check_position_accuracy"]


def check_rms_norm(fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]) -> str:
    """fn(x (..., d), weight (d,), eps) -> x / sqrt(mean(x**2) + eps) * weight, over the last dimension."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 8, generator=g) * 3 + 1  # (3, 5, 8): a mean far from 0 tells RMSNorm from LayerNorm
    weight = torch.rand(8, generator=g) + 0.5  # (8,)
    got = fn(x, weight, 1e-5)
    if got is None:
        return _TODO
    want = torch.nn.functional.rms_norm(x, (8,), weight, 1e-5)  # PyTorch's own, not ours
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        return f"Return a tensor shaped like x, {tuple(x.shape)}; got {_shape(got)}."
    if _close(got, want, atol=1e-4):
        tiny = fn(torch.zeros(2, 8), torch.ones(8), 1e-5)
        if not torch.isfinite(tiny).all():
            return "An all-zero vector gives NaN: add eps inside the square root."
        return CORRECT
    if _close(got, torch.nn.functional.layer_norm(x, (8,), weight, None, 1e-5), atol=1e-4):
        return "That is LayerNorm: RMSNorm does not subtract the mean, it divides by the root mean square."
    if _close(got, want / weight, atol=1e-4):
        return "Almost: multiply by the learned weight (the gain) at the end."
    if _close(got, x / (x.pow(2).sum(-1, keepdim=True) + 1e-5).sqrt() * weight, atol=1e-4):
        return "Use the mean of the squares over the last dimension, not their sum."
    return "Not equal to torch.nn.functional.rms_norm: x / sqrt(mean(x**2, last dim) + eps) * weight."


def _rotate(x: torch.Tensor, positions: torch.Tensor, pairs: str = "halves") -> torch.Tensor:
    """The closed form of RoPE: each pair of coordinates turned by position * base ** (-2i / d)."""
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,): one frequency per pair
    angle = positions[:, None].double() * theta  # (T, d/2)
    if pairs == "halves":  # coordinates i and i + d/2 form a pair (Llama's layout in Hugging Face)
        a, b = x[..., : d // 2].double(), x[..., d // 2 :].double()
    else:  # coordinates 2i and 2i + 1 form a pair (the RoFormer paper's layout)
        a, b = x[..., 0::2].double(), x[..., 1::2].double()
    ra, rb = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    if pairs == "halves":
        return torch.cat([ra, rb], dim=-1).to(x.dtype)
    return torch.stack([ra, rb], dim=-1).flatten(-2).to(x.dtype)


def check_rotary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> str:
    """fn(x (B, h, T, d_k), positions (T,)) -> x, each (i, i + d_k/2) pair turned by position * 10000**(-2i/d_k)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 6, 8, generator=g)  # (B, h, T, d_k)
    positions = torch.tensor([0, 1, 2, 5, 9, 40])
    got = fn(x, positions)
    if got is None:
        return _TODO
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        return f"Return a tensor shaped like x, {tuple(x.shape)}; got {_shape(got)}."
    want = _rotate(x, positions)
    if _close(got, want, atol=1e-5):
        return CORRECT
    if _close(got, _rotate(x, positions, pairs="adjacent"), atol=1e-5):
        return (
            "Those are the paper's adjacent pairs (2i, 2i + 1). This book, like Llama in Hugging Face, pairs "
            "coordinate i with i + d_k/2, so that weights load unchanged."
        )
    if _close(got, _rotate(x, -positions), atol=1e-5):
        return "Rotated the wrong way: the first of the pair becomes a cos - b sin, the second a sin + b cos."
    if _close(got[..., 0, :], x[..., 0, :], atol=1e-5) and not _close(got[..., 1, :], want[..., 1, :], atol=1e-5):
        return "Position 0 is right, the others are not: check the angles, position * base ** (-2i / d_k) for pair i."
    return "Not the rotation: compare one pair at position 1 with the closed form by hand."


def check_position_accuracy(fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> str:
    """Experiment: fn(predictions (B, T), tokens (B, T), shift) -> (T - shift,) accuracies.

    Position i (from shift on) is right when predictions[:, i] == tokens[:, i - shift].
    """
    tokens = torch.tensor([[5, 6, 7, 8, 9, 1], [2, 3, 4, 5, 6, 7]])  # (2, 6)
    shift = 2
    predictions = torch.tensor([[0, 0, 5, 6, 0, 0], [0, 0, 2, 0, 4, 5]])  # (2, 6)
    got = fn(predictions, tokens, shift)
    if got is None:
        return _TODO
    want = (predictions[:, shift:] == tokens[:, :-shift]).float().mean(0)  # (4,): positions 2..5, [1, .5, .5, .5]
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        if isinstance(got, torch.Tensor) and got.numel() == tokens.shape[1]:
            return f"Positions before `shift` have no token to copy: return T - shift = {want.numel()} values."
        return f"Return one accuracy per position from shift on, shape {tuple(want.shape)}; got {_shape(got)}."
    if torch.allclose(got.float(), want):
        return CORRECT
    wrong_way = (predictions[:, :-shift] == tokens[:, shift:]).float().mean(0)
    if torch.allclose(got.float(), wrong_way):
        return "Shifted the wrong way: position i copies the token `shift` places *before* it, tokens[:, i - shift]."
    return f"Expected {want.tolist()} (the mean over the batch at each position), got {got.tolist()}."
