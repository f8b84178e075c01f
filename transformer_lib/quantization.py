"""int8 weights: per-channel, weight-only, symmetric quantization of a model's linear layers.

Each output row i of a weight W (out, in) gets its own scale s_i = max_j abs(W_ij) / 127, and is
stored as the int8 numbers q_ij = round(W_ij / s_i), between -127 and 127. The layer keeps q and s
(one byte per weight instead of four, plus one float per row) and computes with q * s: the
activations stay in float, which is why this is called weight-only. The error of each weight is at
most s_i / 2, so a row with one large weight loses precision on all its small ones: that is why
each row (channel) gets its own scale rather than one for the whole matrix.

    quantize_model(model)         # every nn.Linear (except those named in `skip`) -> Int8Linear, in place
    model_bytes(model)            # the bytes its parameters and buffers take
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["quantize_per_channel", "dequantize", "Int8Linear", "quantize_model", "model_bytes"]

QMAX = 127  # int8's symmetric range: -127 .. 127 (-128 is left unused, so that q and -q both fit)


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


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """q (out, in) int8 and scale (out,) -> the float weight they stand for, (out, in)."""
    return q.float() * scale[:, None]


class Int8Linear(nn.Module):
    """An nn.Linear whose weight is kept as int8 with a scale per output row: x (..., in) -> (..., out)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"Int8Linear quantizes an nn.Linear, got {type(linear).__name__}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = quantize_per_channel(linear.weight)
        self.register_buffer("q", q)  # (out, in) int8: one byte per weight
        self.register_buffer("scale", scale)  # (out,) float32
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out), computed with the dequantized weight q * scale."""
        return F.linear(x, dequantize(self.q, self.scale).to(x.dtype), self.bias)


def quantize_model(model: nn.Module, skip: Sequence[str] = ()) -> nn.Module:
    """Replace every nn.Linear of `model` by an Int8Linear, in place, except those whose name ends in one of
    `skip`; returns the model. An output layer that shares its weight with the embedding is skipped, since
    quantizing it would untie the two."""
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
        setattr(model.get_submodule(parent) if parent else model, child, Int8Linear(model.get_submodule(name)))
    return model


def model_bytes(model: nn.Module) -> int:
    """The bytes of `model`'s parameters and buffers, each tensor counted once (a tied weight once)."""
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total
