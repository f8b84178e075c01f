"""The encoder layer (self-attention + feed-forward, each wrapped in add & norm) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .layers import AddNorm, FeedForward, LayerNorm

__all__ = ["EncoderLayer", "Encoder"]


class EncoderLayer(nn.Module):
    """One encoder layer: x -> AddNorm(self-attention) -> AddNorm(feed-forward); (B, S, d_model) -> same."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
    ):
        super().__init__()
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.attn_block = AddNorm(d_model, dropout, norm_first, eps)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.ff_block = AddNorm(d_model, dropout, norm_first, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask bool (True = may attend) broadcastable to (B, h, S, S) -> (B, S, d_model)."""
        x = self.attn_block(x, lambda y: self.self_attn(y, y, y, mask)[0])
        return self.ff_block(x, self.feed_forward)


class Encoder(nn.Module):
    """A stack of num_layers encoder layers, with a final LayerNorm when `final_norm` (pre-LN needs one)."""

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        eps: float = 1e-5,
        final_norm: bool | None = None,
    ):
        super().__init__()
        self.d_model = d_model
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation, eps) for _ in range(num_layers)
        )
        use_norm = norm_first if final_norm is None else final_norm
        self.norm = LayerNorm(d_model, eps) if use_norm else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask broadcastable to (B, h, S, S), True = may attend -> (B, S, d_model)."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)
