"""The encoder layer (self-attention, then feed-forward, each with a residual and a norm) and the stack."""

from __future__ import annotations

import torch
from torch import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig, resolve_config
from .layers import feed_forward, make_norm

__all__ = ["EncoderLayer", "Encoder"]


class EncoderLayer(nn.Module):
    """One encoder layer, built from a config: (B, S, d_model) -> (B, S, d_model).

    ``EncoderLayer(config)``, or keyword fields for a layer built by hand:
    ``EncoderLayer(d_model=32, num_heads=4, d_ff=64, dropout=0.0)``.
    """

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.self_attn = MultiHeadAttention.from_config(cfg)
        self.norm1 = make_norm(cfg)
        self.feed_forward = None if cfg.attention_only else feed_forward(cfg)  # dense, or a mixture of experts
        self.norm2 = None if cfg.attention_only or cfg.parallel_block else make_norm(cfg)  # parallel: norm1 serves both
        self.dropout = nn.Dropout(cfg.dropout)  # on each sublayer's output, before it is added

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask bool (True = may attend) broadcastable to (B, h, S, S) -> (B, S, d_model)."""
        if self.config.parallel_block:  # x + attention(norm(x)) + feed_forward(norm(x)), one norm (GPT-J, PaLM)
            h = self.norm1(x)
            return x + self.dropout(self.self_attn(h, h, h, mask)[0]) + self.dropout(self.feed_forward(h))
        if self.config.norm_first:  # pre-LN: x + sublayer(norm(x)); the residual path is never normalised
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            if self.feed_forward is not None:
                x = x + self.dropout(self.feed_forward(self.norm2(x)))
        else:  # post-LN, as in the 2017 paper: norm(x + sublayer(x))
            x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
            if self.feed_forward is not None:
                x = self.norm2(x + self.dropout(self.feed_forward(x)))
        return x


class Encoder(nn.Module):
    """config.num_layers encoder layers, then a final norm when config.final_norm (pre-LN needs one)."""

    def __init__(self, config: TransformerConfig | None = None, **overrides):
        super().__init__()
        cfg = self.config = resolve_config(config, overrides)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = make_norm(cfg) if cfg.final_norm else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, S, d_model), mask broadcastable to (B, h, S, S), True = may attend -> (B, S, d_model)."""
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)
