"""int8 weights: per-channel, weight-only quantization of a model's linear layers, absmax or zero-point.

Each output row i of a weight W (out, in) gets its own scale s_i = max_j abs(W_ij) / 127, and is
stored as the int8 numbers q_ij = round(W_ij / s_i), between -127 and 127. The layer keeps q and s
(one byte per weight instead of four, plus one float per row) and computes with q * s: the
activations stay in float, which is why this is called weight-only. The error of each weight is at
most s_i / 2, so a row with one large weight loses precision on all its small ones: that is why
each row (channel) gets its own scale rather than one for the whole matrix.

That is absmax (symmetric) quantization: the grid of 255 steps is centred on zero, so a row whose
weights run from -0.1 to 0.3 leaves the steps below -0.1 unused. Zero-point (asymmetric, affine)
quantization fits the grid to the row's own range instead: each row i gets a scale
s_i = (max_i - min_i) / 255 and a zero point z_i, the integer that stands for 0.0, and stores
q_ij = round(W_ij / s_i) + z_i as unsigned bytes from 0 to 255; W_ij comes back as (q_ij - z_i) * s_i.
The range always includes 0 (min_i <= 0 <= max_i), so that a zero weight stays exactly zero, as
PyTorch's observers do. It pays one more number per row and a subtraction.

    quantize_model(model)                       # every nn.Linear (except those in `skip`) -> Int8Linear, in place
    quantize_model(model, scheme="zero_point")  # the same with a zero point per row
    model_bytes(model)                          # the bytes its parameters and buffers take
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "quantize_per_channel",
    "quantize_per_channel_zero_point",
    "dequantize",
    "Int8Linear",
    "quantize_model",
    "model_bytes",
    "SCHEMES",
]

QMAX = 127  # int8's symmetric range: -127 .. 127 (-128 is left unused, so that q and -q both fit)
UMAX = 255  # the zero-point scheme's range: unsigned bytes 0 .. 255
SCHEMES = ("absmax", "zero_point")


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight (out, in) float -> (q (out, in) int8, scale (out,) float32) with weight ~ q * scale[:, None].

    scale_i = max(abs(weight_i)) / 127 (a row of zeros gets scale 1, so that nothing divides by zero).
    """
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (out, in), got {weight.dtype} {tuple(weight.shape)}")
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / QMAX  # (out,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)  # (out, in); round half to even
    return q, scale


def quantize_per_channel_zero_point(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """weight (out, in) float -> (q (out, in) uint8, scale (out,) float32, zero_point (out,) uint8).

    Per row i: lo_i = min(min_j W_ij, 0) and hi_i = max(max_j W_ij, 0); scale_i = (hi_i - lo_i) / 255;
    zero_point_i = round(-lo_i / scale_i), the byte that stands for 0.0; q_ij = round(W_ij / scale_i) +
    zero_point_i, clamped to 0 .. 255. Then weight ~ (q - zero_point[:, None]) * scale[:, None], and a row
    of zeros gets scale 1 and zero point 0. The same numbers as torch.quantize_per_channel(weight, scale,
    zero_point, 0, torch.quint8) and PyTorch's MinMax observers.
    """
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(f"weight must be a 2-D float tensor (out, in), got {weight.dtype} {tuple(weight.shape)}")
    w = weight.detach().float()
    lo = w.amin(dim=1).clamp(max=0.0)  # (out,): the range holds 0, so that 0.0 is stored exactly
    hi = w.amax(dim=1).clamp(min=0.0)  # (out,)
    scale = (hi - lo) / UMAX  # (out,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero_point = torch.round(-lo / scale).clamp(0, UMAX)  # (out,): lo maps to 0, hi to 255
    q = (torch.round(w / scale[:, None]) + zero_point[:, None]).clamp(0, UMAX).to(torch.uint8)  # (out, in)
    return q, scale, zero_point.to(torch.uint8)


def dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor | None = None) -> torch.Tensor:
    """q (out, in) and scale (out,) (and zero_point (out,) for the zero-point scheme) -> the float weight, (out, in)."""
    if zero_point is None:
        return q.float() * scale[:, None]
    return (q.float() - zero_point.float()[:, None]) * scale[:, None]


class Int8Linear(nn.Module):
    """An nn.Linear whose weight is kept in one byte per weight with a scale per output row: x (..., in) -> (..., out).

    scheme "absmax" keeps int8 q and a scale per row; "zero_point" keeps uint8 q, a scale and a zero point per row.
    """

    def __init__(self, linear: nn.Linear, scheme: str = "absmax"):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"Int8Linear quantizes an nn.Linear, got {type(linear).__name__}")
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
        self.in_features, self.out_features, self.scheme = linear.in_features, linear.out_features, scheme
        if scheme == "absmax":
            q, scale = quantize_per_channel(linear.weight)
            zero_point = None
        else:
            q, scale, zero_point = quantize_per_channel_zero_point(linear.weight)
        self.register_buffer("q", q)  # (out, in) int8 or uint8: one byte per weight
        self.register_buffer("scale", scale)  # (out,) float32
        self.register_buffer("zero_point", zero_point)  # (out,) uint8, or None for absmax
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out), computed with the dequantized weight (q - zero_point) * scale."""
        return F.linear(x, dequantize(self.q, self.scale, self.zero_point).to(x.dtype), self.bias)


def quantize_model(model: nn.Module, skip: Sequence[str] = (), scheme: str = "absmax") -> nn.Module:
    """Replace every nn.Linear of `model` by an Int8Linear of `scheme` ("absmax" or "zero_point"), in place,
    except those whose name ends in one of `skip`; returns the model. An output layer that shares its weight
    with the embedding is skipped, since quantizing it would untie the two."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    names = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear)
        and id(m.weight) not in tied
        and not any(name == s or name.endswith("." + s) for s in skip)
    ]
    for name in names:
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, Int8Linear(model.get_submodule(name), scheme))
    return model


def model_bytes(model: nn.Module) -> int:
    """The bytes of `model`'s parameters and buffers, each tensor counted once (a tied weight once)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
