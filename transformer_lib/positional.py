"""Positional encodings: fixed sinusoids (Vaswani et al., 2017), a learned table, and rotary positions (RoPE).

Sinusoids and the learned table are *added* to the embeddings. Rotary positions (Su et al., 2024)
add nothing: attention rotates each query and key by an angle proportional to its position
(`apply_rotary`), so the stream carries no position and `RotaryPositions` only checks the length
and applies dropout."""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import ROTARY_LAYOUTS, check_rope_scaling

__all__ = [
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "apply_rotary",
    "rotary_tables",
    "rope_frequencies",
    "rotary_permutation",
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


def _quarter_turn(x: torch.Tensor, layout: str = "half", rotary_dim: int | None = None) -> torch.Tensor:
    """(..., d) -> (..., d): every pair of the first rotary_dim dimensions turned a quarter, (a, b) -> (-b, a).

    "half" pairs dimension i with i + r/2 (r = rotary_dim): the halves (x1, x2) become (-x2, x1).
    "interleaved" pairs 2i with 2i + 1. Dimensions past rotary_dim are not turned: they come out as 0,
    and `turn`'s tables leave them as they were.
    """
    d = x.shape[-1]
    r = d if rotary_dim is None else rotary_dim
    part = x[..., :r]
    if layout == "half":
        x1, x2 = part.chunk(2, dim=-1)  # (..., r/2) each
        turned = torch.cat((-x2, x1), dim=-1)  # (..., r)
    elif layout == "interleaved":
        x1, x2 = part[..., 0::2], part[..., 1::2]  # (..., r/2) each: the even and the odd dimensions
        turned = torch.stack((-x2, x1), dim=-1).flatten(-2)  # (..., r/2, 2) -> (..., r)
    else:
        raise ValueError(f"rotary layout must be one of {ROTARY_LAYOUTS}, got {layout!r}")
    if r == d:
        return turned
    return torch.cat((turned, torch.zeros_like(x[..., r:])), dim=-1)  # (..., d)


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


def rope_frequencies(
    r: int,
    base: float = 10000.0,
    scaling: str = "none",
    factor: float = 1.0,
    original_len: int | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, float]:
    """The turning rate of each of r/2 rotary pairs, (r/2,) radians per position, and the number both cos and sin
    tables are multiplied by (1 except for YaRN). Pair i turns by base^(-2i/r) per position, and its wavelength,
    the positions of one full turn, is 2 pi / rate. To read `factor` times the trained length `original_len`:

    - "linear" (position interpolation, Chen et al., 2023): every rate divided by `factor`, so the longer
      sequence's positions fall where the trained ones were; the fast pairs lose their fine detail.
    - "ntk" ("NTK-aware", bloc97, 2023): the base raised to base x factor^(r / (r - 2)), which leaves the fastest
      pair as it was and slows the slowest by exactly `factor`: interpolation for the slow pairs, extrapolation for
      the fast ones, in one formula.
    - "yarn" (Peng et al., 2023): per pair by wavelength: pairs that turn more than 32 times within the trained
      length keep their rate, pairs that turn less than once are interpolated (divided by `factor`), and between
      them a ramp linear in the pair index (as `transformers` and the YaRN code compute it; the paper's is linear in
      the number of turns); the tables are multiplied by 0.1 ln(factor) + 1, which sharpens the softmax back.
    - "llama3" (Llama 3.1): the same idea with wavelength bands: longer than the trained length, divided by
      `factor`; shorter than a quarter of it, kept; between, a smooth mix.
    """
    check_rope_scaling(scaling, factor, original_len)
    exponents = torch.arange(0, r, 2, device=device, dtype=torch.float32) / r  # (r/2,): 2i / r
    rates = base**-exponents  # (r/2,)
    if scaling == "none":
        return rates, 1.0
    if scaling == "linear":
        return rates / factor, 1.0
    if scaling == "ntk":
        return (base * factor ** (r / (r - 2))) ** -exponents, 1.0
    wavelengths = 2 * math.pi / rates  # (r/2,): positions per full turn
    if scaling == "yarn":
        # the pair (a fractional index) that turns exactly `turns` times within the trained length
        def pair_turning(turns: float) -> float:
            return r * math.log(original_len / (turns * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(math.floor(pair_turning(32.0)), 0), min(math.ceil(pair_turning(1.0)), r - 1)
        high = high + 0.001 if low == high else high  # a ramp of one pair would divide by zero
        interpolated = ((torch.arange(r // 2, device=device, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        mixed = rates / factor * interpolated + rates * (1 - interpolated)  # (r/2,): 0 = kept, 1 = interpolated
        return mixed, 0.1 * math.log(factor) + 1.0
    slow, fast = original_len / 1.0, original_len / 4.0  # llama3: wavelengths of the trained length and a quarter
    kept = torch.where(wavelengths > slow, rates / factor, rates)  # (r/2,)
    share = (original_len / wavelengths - 1.0) / (4.0 - 1.0)  # (r/2,): 0 at the slow band's edge, 1 at the fast's
    smooth = (1 - share) * kept / factor + share * kept
    between = (wavelengths <= slow) & (wavelengths >= fast)
    return torch.where(between, smooth, kept), 1.0


def rotary_tables(
    positions: torch.Tensor,
    d: int,
    base: float = 10000.0,
    layout: str = "half",
    rotary_dim: int | None = None,
    scaling: tuple[str, float, int | None] = ("none", 1.0, None),
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions (T,) -> (cos, sin), each (T, d) float32: the angles `apply_rotary` turns each pair by.

    Pair i of the first r = rotary_dim dimensions (all d by default) turns by position * base^(-2i/r);
    `layout` says where its two dimensions sit ("half": i and i + r/2; "interleaved": 2i and 2i + 1).
    Dimensions past r get angle 0 (cos 1, sin 0): they pass unchanged, as in GPT-J's partial rotation.
    `scaling` is (kind, factor, trained length) for reading past the trained length (`rope_frequencies`).
    Computed once and sliced, the tables give exactly what computing them for each call gives: a
    model keeps a table for positions 0..n and reads rows past..past+T from it.
    """
    r = d if rotary_dim is None else rotary_dim
    if r % 2 != 0 or not 0 < r <= d:
        raise ValueError(f"rotary_dim must be even and between 2 and the head width {d}, got {r}")
    inv_freq, gain = rope_frequencies(r, base, *scaling, device=positions.device)  # (r/2,), a number
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, r/2)
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)  # (T, r): pair (i, i + r/2) shares an angle
    elif layout == "interleaved":
        angles = angles.repeat_interleave(2, dim=-1)  # (T, r): pair (2i, 2i + 1) shares an angle
    else:
        raise ValueError(f"rotary layout must be one of {ROTARY_LAYOUTS}, got {layout!r}")
    if r < d:
        angles = torch.cat((angles, angles.new_zeros(angles.shape[0], d - r)), dim=-1)  # (T, d): the rest stays
    cos, sin = angles.cos(), angles.sin()
    if gain != 1.0:  # YaRN: the turned part of queries and keys grows, so its share of every score by gain squared
        cos, sin = cos.clone(), sin.clone()
        cos[:, :r], sin[:, :r] = cos[:, :r] * gain, sin[:, :r] * gain  # dimensions past r still pass unchanged
    return cos, sin


def turn(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str = "half", rotary_dim: int | None = None
) -> torch.Tensor:
    """x (..., T, d) turned pair by pair by the angles whose cos and sin are (T, d): the rotation of RoPE.

    `layout` and `rotary_dim` must be those the tables were made with (see rotary_tables).
    """
    return x * cos.to(x.dtype) + _quarter_turn(x, layout, rotary_dim) * sin.to(x.dtype)


def rotary_permutation(d: int, rotary_dim: int | None = None, to: str = "half") -> torch.Tensor:
    """The order of one head's d query (or key) rows that moves its rotary pairs into layout `to`: (d,) ids.

    From interleaved to "half", pair i's rows (2i, 2i + 1) go to (i, i + r/2): new row j is old row
    perm[j]. `to="interleaved"` gives the inverse order. Rows past rotary_dim stay where they are.
    Applied to the rows of both the query and the key projection of every head, it turns a model of
    one layout into the same function in the other layout: the scores are dot products, and the
    same reordering of both vectors leaves a dot product unchanged.
    """
    r = d if rotary_dim is None else rotary_dim
    if r % 2 != 0 or not 0 < r <= d:
        raise ValueError(f"rotary_dim must be even and between 2 and the head width {d}, got {r}")
    to_half = torch.cat((torch.arange(0, r, 2), torch.arange(1, r, 2), torch.arange(r, d)))  # (d,)
    if to == "half":
        return to_half
    if to == "interleaved":
        return torch.argsort(to_half)
    raise ValueError(f"rotary layout must be one of {ROTARY_LAYOUTS}, got {to!r}")


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
