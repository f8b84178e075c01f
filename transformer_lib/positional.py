"""Positional encodings: fixed sinusoids (Vaswani et al., 2017), a learned table, and rotary positions (RoPE).

Sinusoids and the learned table are *added* to the embeddings. Rotary positions (Su et al., 2024)
add nothing: attention rotates each query and key by an angle proportional to its position
(`apply_rotary`), so the stream carries no position and `RotaryPositions` only checks the length
and applies dropout."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = [
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "apply_rotary",
    "rotary_tables",
    "RotaryPositions",
]


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] = cos(same); shape (max_len, d_model).

    `i` counts pairs of dimensions from 0, so dimension 2i and 2i+1 share one frequency.
    """
    if d_model % 2 != 0:
        raise ValueError(
            f"sinusoidal encoding pairs a sine with a cosine, so d_model must be even; got d_model={d_model}"
        )
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,): 0, 2, 4, ...
    inv_freq = torch.exp(-math.log(base) * two_i / d_model)  # (d_model/2,) = base^(-2i/d_model)
    angles = position * inv_freq  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe.float()


def _check_length(x: torch.Tensor, offset: int, max_len: int, d_model: int) -> int:
    if x.dim() != 3:
        raise ValueError(f"expected embeddings of shape (B, S, d_model), got shape {tuple(x.shape)}")
    if x.shape[-1] != d_model:
        raise ValueError(f"expected last dimension d_model={d_model}, got {x.shape[-1]}")
    _, S, _ = x.shape
    if offset + S > max_len:
        raise ValueError(
            f"sequence of length {S} (starting at position {offset}) is longer than max_len={max_len}; "
            "build the encoding with a larger max_len"
        )
    return S


class SinusoidalPositionalEncoding(nn.Module):
    """Add fixed sinusoids to batch-first embeddings (B, S, d_model), then apply dropout."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        # Not a parameter and not saved: it is recomputed from the formula.
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, S, d_model) -> (B, S, d_model); positions start at `offset` (used by the KV cache)."""
        S = _check_length(x, offset, self.max_len, self.d_model)
        pe = self.pe[offset : offset + S].to(dtype=x.dtype)  # (S, d_model), broadcast over B
        return self.dropout(x + pe)


class LearnedPositionalEncoding(nn.Module):
    """Add a trained vector per position (as BERT and GPT-2 do), then apply dropout."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, S, d_model) -> (B, S, d_model); positions start at `offset`."""
        S = _check_length(x, offset, self.max_len, self.d_model)
        positions = torch.arange(offset, offset + S, device=x.device)  # (S,)
        return self.dropout(x + self.table(positions))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(..., d) -> (..., d): the halves (x1, x2) become (-x2, x1), a quarter turn of every pair (i, i + d/2)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate queries or keys by their positions (RoPE): x (..., T, d), positions (T,) -> (..., T, d).

    Dimensions i and i + d/2 form a pair, as in Hugging Face's Llama, and the pair at position p
    turns by the angle p * base^(-2i/d). A dot product of a rotated query at position m with a
    rotated key at position n then depends on m - n only.
    """
    d = x.shape[-1]
    if d % 2 != 0:
        raise ValueError(f"rotary positions turn pairs of dimensions, so the head width must be even; got {d}")
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"expected one position per row, shape ({x.shape[-2]},), got {tuple(positions.shape)}")
    return turn(x, *rotary_tables(positions, d, base))


def rotary_tables(positions: torch.Tensor, d: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (T,) -> (cos, sin), each (T, d) float32: the angles `apply_rotary` turns each pair by.

    Computed once and sliced, they give exactly what computing them for each call gives: a model
    keeps a table for positions 0..n and reads rows past..past+T from it.
    """
    inv_freq = base ** (-torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) / d)  # (d/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, d/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, d): pair (i, i + d/2) shares an angle
    return angles.cos(), angles.sin()


def turn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., T, d) turned pair by pair by the angles whose cos and sin are (T, d): the rotation of RoPE."""
    return x * cos.to(x.dtype) + _rotate_half(x) * sin.to(x.dtype)


class RotaryPositions(nn.Module):
    """What a model with rotary positions does to its embeddings: checks the length, applies dropout, adds nothing."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, S, d_model) -> (B, S, d_model); the positions are applied inside attention."""
        _check_length(x, offset, self.max_len, self.d_model)
        return self.dropout(x)
